#include "cowstate/version.h"

namespace cowstate {

const char* version_string() noexcept { return "0.1.0"; }

}  // namespace cowstate
