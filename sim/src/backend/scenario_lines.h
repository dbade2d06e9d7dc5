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

namespace cowstate::sim {

// The backend workload's states: one per kind, registered in this order.
struct BackendStateInfo {
  ActionKind kind;  // the writer action that names it
  const char* name;
};
const std::vector<BackendStateInfo>& backend_states();
// The states that get the TTL of `config ttl=MS` (value, list and map: one timestamp per
// value, per list element, per map value), in registration order. The reducing and
// aggregating states never do.
const std::vector<std::string>& ttl_states();
bool is_ttl_state(const std::string& name);
// Whether a backend state's canonical values are sequences (list, map and aggregating
// states), written in brackets even with one element.
bool has_sequence_values(const std::string& name);

}  // namespace cowstate::sim

namespace cowstate::sim::backend_lines {

void parse_writer_action(ScenarioReader& in, const ScenarioToken& verb, Action* a);
std::string print_writer_action(const Action& a);
std::vector<Action> simpler_writer_actions(const Action& a);
Workload::WriterActionTraits traits(const Action& a);
// `NAME`, after `s=`: one of the backend's states; of kind `kind` unless that is null.
Name parse_state_name(ScenarioReader& in, const ActionKind* kind = nullptr);

}  // namespace cowstate::sim::backend_lines
