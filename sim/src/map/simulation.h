// The map simulation (map/simulation.cc), made by the map workload (map/workload.cc).
#pragma once

#include <memory>

#include "core/sim_core.h"

namespace cowstate::sim {

std::unique_ptr<detail::SimCore> make_map_simulation(const RunConfig& config, Strategy& strategy);

}  // namespace cowstate::sim
