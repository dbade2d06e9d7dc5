// The backend workload's writer lines (docs/scenario-format.md):
//   value|list|map|reducing|aggregating s=STATE k=K [ns=N] OP OPERANDS
//   checkpoint NAME
//   restore NAME into RANGE [and RANGE [then merge]]
//   cleanup s=STATE n=N|all                         (with config ttl=MS)
#pragma once

#include <string>
#include <vector>

#include "cowstate/sim/scenario_reader.h"
#include "cowstate/sim/workload.h"

namespace cowstate::sim::backend_lines {

void parse_writer_action(ScenarioReader& in, const ScenarioToken& verb, Action* a);
std::string print_writer_action(const Action& a);
std::vector<Action> simpler_writer_actions(const Action& a);
Workload::WriterActionTraits traits(const Action& a);
// `NAME`, after `s=`: one of the backend's states; of kind `kind` unless that is null.
Name parse_state_name(ScenarioReader& in, const ActionKind* kind = nullptr);

}  // namespace cowstate::sim::backend_lines
