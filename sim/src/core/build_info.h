// What build of cowstate this is: the version (project(VERSION)) and the git commit it was
// built from, generated at build time (cmake/build_info.cmake). Both tools print them for
// --version, and every case file, shrunk scenario and JSON line records them.
#pragma once

#include <string>

namespace cowstate::sim {

const char* tool_version() noexcept;  // "0.2.0"
const char* build_commit() noexcept;  // "543b0b1c8d2e", "543b0b1c8d2e-dirty" or "unknown"

// "0.2.0 (git 543b0b1c8d2e)": what --version prints after the tool's name.
inline std::string version_line() {
  return std::string(tool_version()) + " (git " + build_commit() + ")";
}

}  // namespace cowstate::sim
