// The backend simulation (backend/simulation.cc), made by the backend workload
// (backend/workload.cc).
#pragma once

#include <memory>

#include "core/sim_core.h"

namespace cowstate::sim::detail {

std::unique_ptr<SimCore> make_backend_simulation(const RunConfig& config, Strategy& strategy);

}  // namespace cowstate::sim::detail
