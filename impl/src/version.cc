#include "cowstate/version.h"

namespace cowstate {

const char* version_string() noexcept { return COWSTATE_VERSION; }

}  // namespace cowstate
