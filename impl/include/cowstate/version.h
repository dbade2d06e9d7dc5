// cowstate version, as a string ("MAJOR.MINOR.PATCH"). Matches project(VERSION) in the top-level
// CMakeLists.txt and the installed cowstateConfigVersion.cmake.
#ifndef COWSTATE_VERSION_H_
#define COWSTATE_VERSION_H_

namespace cowstate {

// Returns a static, NUL-terminated string; never null.
[[nodiscard]] const char* version_string() noexcept;

}  // namespace cowstate

#endif  // COWSTATE_VERSION_H_
