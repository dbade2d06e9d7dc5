// The map workload: one CowStateMap and its snapshots (map/simulation.cc), generated from
// MapWorkloadOptions (cowstate/sim/map_options.h).
#include "map/workload.h"

#include "cowstate/sim/explain.h"
#include "cowstate/sim/map_options.h"
#include "cowstate/sim/run.h"
#include "map/scenario_lines.h"
#include "map/simulation.h"

namespace cowstate::sim {

namespace {

class MapWorkload final : public WorkloadWithOptions<MapWorkloadOptions> {
 public:
  std::string_view name() const override { return "map"; }
  std::string_view summary() const override { return "one copy-on-write map"; }
  ScenarioLanguage scenario_language() const override { return {.map_internals = true}; }
  void parse_writer_action(ScenarioReader& in, const ScenarioToken& verb,
                           Action* a) const override {
    map_lines::parse_writer_action(in, verb, a);
  }
  std::string print_writer_action(const Action& a) const override {
    return map_lines::print_writer_action(a);
  }
  std::vector<Action> simpler_writer_actions(const Action& a) const override {
    return map_lines::simpler_writer_actions(a);
  }
  WriterActionTraits writer_action_traits(const Action& a) const override {
    return map_lines::traits(a);
  }
  std::unique_ptr<detail::SimCore> make_simulation(const RunConfig& config,
                                                   Strategy& strategy) const override {
    return make_map_simulation(config, strategy);
  }
  void write_config(const WorkloadOptions& options, ScenarioConfig* config) const override {
    const MapWorkloadOptions& o = options_of<MapWorkloadOptions>(options);
    config->workload = name();
    config->initial_capacity = o.initial_capacity;
    config->min_capacity = o.min_capacity;
    config->max_capacity = o.max_capacity;
    config->identity_hash = o.identity_hash;
    config->track_changes = o.track_changes;
  }
  bool narrate(const Scenario& scenario, bool dot, Narration* out, std::string*) const override {
    const Explanation e = explain_scenario(scenario);
    if (dot) out->graphs = explain_dot(e);
    out->text = explain_text(e);
    out->model_json = explain_json(e);
    out->outcome = e.result.outcome;
    out->check = e.result.check;
    return true;
  }
};

}  // namespace

const Workload& map_workload() {
  static const MapWorkload w;
  return w;
}

}  // namespace cowstate::sim
