// The backend workload, for the registry (core/registry.cc).
#pragma once

#include "cowstate/sim/workload.h"

namespace cowstate::sim {

const Workload& backend_workload();

}  // namespace cowstate::sim
