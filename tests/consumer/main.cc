// Links the installed cowstate::impl; exits 0 iff the library reports version 0.2.0.
#include <cowstate/version.h>

#include <cstdio>
#include <string_view>

int main() {
  const std::string_view version = cowstate::version_string();
  std::printf("cowstate %.*s\n", static_cast<int>(version.size()), version.data());
  return version == "0.2.0" ? 0 : 1;
}
