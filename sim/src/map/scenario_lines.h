// The map workload's writer lines: one map operation each (docs/scenario-format.md),
//   put k=K [ns=N] v=VALUE        get_mutable k=K then append|overwrite|pop N
//   remove k=K                    transform k=K append N
//   snapshot NAME                 visit budget=B salt=S
// and the like for put_and_get_old, remove_and_get_old, get and contains. Workloads whose
// writer drives one map (the test-only probe) read the same lines through the map workload.
#pragma once

#include <string>
#include <vector>

#include "cowstate/sim/scenario_reader.h"
#include "cowstate/sim/workload.h"

namespace cowstate::sim::map_lines {

void parse_writer_action(ScenarioReader& in, const ScenarioToken& verb, Action* a);
std::string print_writer_action(const Action& a);
std::vector<Action> simpler_writer_actions(const Action& a);
Workload::WriterActionTraits traits(const Action& a);

}  // namespace cowstate::sim::map_lines
