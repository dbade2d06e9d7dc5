// The backend workload: a KeyedStateBackend with checkpoints on disk (backend/simulation.cc),
// generated from BackendWorkloadOptions (cowstate/sim/backend_options.h).
#include "backend/workload.h"

#include "backend/scenario_lines.h"
#include "backend/simulation.h"
#include "cowstate/sim/backend_options.h"
#include "cowstate/sim/explain.h"
#include "cowstate/sim/run.h"

namespace cowstate::sim {

namespace {

class BackendWorkload final : public WorkloadWithOptions<BackendWorkloadOptions> {
 public:
  std::string_view name() const override { return "backend"; }
  std::string_view summary() const override {
    return "a keyed backend with checkpoints on disk, faults and rescaling restores";
  }
  ScenarioLanguage scenario_language() const override {
    return {.keyed_states = true, .checkpoints = true, .storage_faults = true};
  }
  void parse_writer_action(ScenarioReader& in, const ScenarioToken& verb,
                           Action* a) const override {
    backend_lines::parse_writer_action(in, verb, a);
  }
  std::string print_writer_action(const Action& a) const override {
    return backend_lines::print_writer_action(a);
  }
  std::vector<Action> simpler_writer_actions(const Action& a) const override {
    return backend_lines::simpler_writer_actions(a);
  }
  WriterActionTraits writer_action_traits(const Action& a) const override {
    return backend_lines::traits(a);
  }
  Name parse_state_name(ScenarioReader& in) const override {
    return backend_lines::parse_state_name(in);
  }
  bool state_values_are_sequences(const Name& state) const override {
    return has_sequence_values(state);
  }
  std::unique_ptr<detail::SimCore> make_simulation(const RunConfig& config,
                                                   Strategy& strategy) const override {
    return detail::make_backend_simulation(config, strategy);
  }
  void write_config(const WorkloadOptions& options, ScenarioConfig* config) const override {
    const BackendWorkloadOptions& b = options_of<BackendWorkloadOptions>(options);
    config->workload = name();
    config->initial_capacity = b.initial_capacity;
    config->min_capacity = b.min_capacity;
    config->max_capacity = b.max_capacity;
    config->identity_hash = false;
    config->max_parallelism = static_cast<std::int32_t>(b.max_parallelism);
    config->key_groups = {static_cast<std::int32_t>(b.key_group_first),
                          static_cast<std::int32_t>(b.key_group_last)};
    config->ttl_ms = b.ttl_ms;
    config->async_io = b.async_io == 1;
    if (config->async_io) config->io_buffer_bytes = b.io_buffer_bytes;
    config->budget_bytes = b.budget_bytes;
    config->incremental = b.incremental;
    if (b.budget_bytes != 0) {
      config->spill_check = b.spill_check;
      config->cold_cache_percent = b.cold_cache_percent;
    }
    if (b.ttl_ms != 0) {
      config->ttl_read_refresh = b.ttl_update == 1;
      config->ttl_return_expired = b.ttl_visibility == 1;
      config->ttl_cleanup = b.ttl_cleanup;
      config->ttl_key_switch = b.ttl_key_switch == 1;
      config->ttl_full_snapshot = b.ttl_full_snapshot == 1;
    }
  }
  bool narrate(const Scenario& scenario, bool dot, Narration* out, std::string*) const override {
    const Explanation e = explain_scenario(scenario);
    if (dot) out->graphs = explain_backend_dot(e);
    out->text = explain_backend_text(e);
    out->model_json = explain_backend_json(e);
    out->outcome = e.result.outcome;
    out->check = e.result.check;
    return true;
  }
};

}  // namespace

const Workload& backend_workload() {
  static const BackendWorkload w;
  return w;
}

}  // namespace cowstate::sim
