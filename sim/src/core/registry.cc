// The registry of workloads: the one place that lists them (cowstate/sim/workload.h).
#include <mutex>
#include <string>
#include <vector>

#include "backend/workload.h"
#include "cowstate/assert.h"
#include "cowstate/sim/scenario.h"
#include "cowstate/sim/scenario_reader.h"
#include "cowstate/sim/workload.h"
#include "map/workload.h"

namespace cowstate::sim {

namespace {

std::vector<const Workload*>& registry() {
  static std::vector<const Workload*> all = {
      &map_workload(),
      &backend_workload(),
  };
  return all;
}

}  // namespace

Name Workload::parse_state_name(ScenarioReader& in) const {
  in.fail(in.peek(), "no state name: a " + std::string(name()) + " scenario has no states");
}

bool Workload::state_values_are_sequences(const Name&) const { return false; }

const std::vector<const Workload*>& workloads() { return registry(); }

const Workload* find_workload(std::string_view name) {
  for (const Workload* w : registry()) {
    if (w->name() == name) return w;
  }
  return nullptr;
}

const Workload& workload_of(const Scenario& scenario) {
  const Workload* w = find_workload(scenario.config.workload.str());
  COWSTATE_ASSERT(w != nullptr, "REQUIRES", "a scenario names a registered workload");
  return *w;
}

const Workload& default_workload() { return map_workload(); }

void register_workload(const Workload& workload) {
  COWSTATE_ASSERT(find_workload(workload.name()) == nullptr, "REQUIRES",
                  "a workload name is registered once");
  registry().push_back(&workload);
}

std::string workload_names(bool (*keep)(const Workload&)) {
  std::string out;
  for (const Workload* w : registry()) {
    if (keep == nullptr || keep(*w)) out += (out.empty() ? "" : ", ") + std::string(w->name());
  }
  return out;
}

}  // namespace cowstate::sim
