// A workload: what one simulation drives and checks (after TigerBeetle's VOPR, which takes
// its state machine as a parameter). The scheduler, strategies, campaigns, the shrinker,
// the failure pipeline and the command line know workloads only through this interface;
// a new workload is a folder of sim/src and one line of the registry
// (sim/src/core/registry.cc), or a register_workload() call for one that only a test
// binary has.
//
// Built in:
//   map       one CowStateMap, its snapshots serialized and restored (sim/src/map/)
//   backend   a KeyedStateBackend with checkpoints on disk, faults and rescaling restores
//             (sim/src/backend/)
// tests/probe_workload/ is the smallest one, registered only in its test binary.
//
// A workload gives:
//   - its options for generated runs: a per-seed mix (swarm), printed as one key=value line
//     before the first step and parsed back from case files (WorkloadOptions);
//   - its simulation: the tasks, the checks after every step, the expectations, the state
//     digest for exploration (a detail::SimCore subclass);
//   - what a recorded generated run says in its scenario's `config` line;
//   - the grammar of its writer lines: parsed through a ScenarioReader
//     (cowstate/sim/scenario_reader.h), printed back, and made simpler by the shrinker;
//   - its narrator for `cowstate explain`.
//
// Thread safety: the registry is filled before any run starts (built-ins at first use,
// tests in main) and read-only afterwards; a Workload is stateless.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cowstate/sim/failure.h"

namespace cowstate::sim {

struct Action;
struct RunConfig;
struct Scenario;
struct ScenarioConfig;
struct ScenarioToken;
class Name;
class ScenarioReader;
class Strategy;
namespace detail {
class SimCore;
}

// The options of one workload's generated runs, whatever the workload.
class WorkloadOptions {
 public:
  virtual ~WorkloadOptions() = default;
  virtual std::uint32_t ops_max() const = 0;           // writer operations per run
  virtual std::uint32_t deep_check_every() const = 0;  // 0: never
  // One `key=value ...` line; parse_options() of the same workload reads it back.
  virtual std::string to_string() const = 0;
  virtual std::unique_ptr<WorkloadOptions> clone() const = 0;
  // The same options with deep checks every `every` steps (0: never).
  virtual std::unique_ptr<WorkloadOptions> with_deep_check_every(std::uint32_t every) const = 0;
  virtual bool same_as(const WorkloadOptions& other) const = 0;
};

// Options of type O (a plain struct with ops_max, deep_check_every, to_string() and ==)
// behind the WorkloadOptions interface; options_of<O>() reads them back.
template <class O>
class TypedOptions final : public WorkloadOptions {
 public:
  explicit TypedOptions(O options) : options_(std::move(options)) {}
  std::uint32_t ops_max() const override { return options_.ops_max; }
  std::uint32_t deep_check_every() const override { return options_.deep_check_every; }
  std::string to_string() const override { return options_.to_string(); }
  std::unique_ptr<WorkloadOptions> clone() const override {
    return std::make_unique<TypedOptions>(options_);
  }
  std::unique_ptr<WorkloadOptions> with_deep_check_every(std::uint32_t every) const override {
    O o = options_;
    o.deep_check_every = every;
    return std::make_unique<TypedOptions>(std::move(o));
  }
  bool same_as(const WorkloadOptions& other) const override {
    const auto* o = dynamic_cast<const TypedOptions*>(&other);
    return o != nullptr && o->options_ == options_;
  }
  const O& get() const noexcept { return options_; }

 private:
  O options_;
};

// `options` behind the interface, as RunConfig and CaseSpec hold them.
template <class O>
std::shared_ptr<const WorkloadOptions> make_options(O options) {
  return std::make_shared<const TypedOptions<O>>(std::move(options));
}

// The O inside `options`. REQUIRES: it holds an O (the workload that made it reads it).
template <class O>
const O& options_of(const WorkloadOptions& options) {
  return dynamic_cast<const TypedOptions<O>&>(options).get();
}

// What a workload's scenarios may say beyond what every scenario may (writer, releaser and
// serializer lines of the map's actions, `expect NAME|live = {...}`, `expect failure`): the
// scenario parser reads a file through the language of the workload its config line names.
struct ScenarioLanguage {
  // Writer lines act on named states (`value s=NAME ...`), images say `s=NAME` and may say
  // `into RANGE`, and the config line may set TTL.
  bool keyed_states = false;
  // Snapshots are checkpoints: `expect latest NAME|none`; a releaser cancels or keeps one,
  // it never releases it.
  bool checkpoints = false;
  // Serializer lines may arm a storage fault: `fail at write N`.
  bool storage_faults = false;
  // The map's own bookkeeping may be expected: `expect versions`, `retired` and `copied`.
  bool map_internals = false;
};

class Workload {
 public:
  virtual ~Workload() = default;
  // As written after --workload and in `config workload=NAME`.
  virtual std::string_view name() const = 0;
  // One line for --help.
  virtual std::string_view summary() const = 0;

  // A per-seed mix of options (swarm testing); ops_max and deep_check_every as given.
  virtual std::unique_ptr<WorkloadOptions> swarm(std::uint64_t seed, std::uint32_t ops_max,
                                                 std::uint32_t deep_check_every) const = 0;
  // What to_string() printed; nullptr with *error saying where and what otherwise.
  virtual std::unique_ptr<WorkloadOptions> parse_options(std::string_view line,
                                                         std::string* error) const = 0;

  // What its scenario files may say beyond the writer's lines.
  virtual ScenarioLanguage scenario_language() const = 0;

  // The writer's lines (docs/scenario-format.md). Reads the action whose word `verb` the
  // reader has just read into *a, failing through the reader; `continue` never reaches it.
  virtual void parse_writer_action(ScenarioReader& in, const ScenarioToken& verb,
                                   Action* a) const = 0;
  // What follows the word (action_name()) of a writer action it parsed: " k=1 v=10", so
  // that parsing the printed line gives the action back.
  virtual std::string print_writer_action(const Action& a) const = 0;
  // For the shrinker: the same writer action on simpler data, each variant different from
  // `a` and as valid in the scenario as `a` is.
  virtual std::vector<Action> simpler_writer_actions(const Action& a) const = 0;
  // What the parser, the scheduler and the shrinker need to know of a writer action.
  struct WriterActionTraits {
    // The serializer task it starts, named after a.snapshot, as the prefix the shrinker
    // renames such tasks with ("s": s1, s2, ...); nullptr when it starts none.
    const char* starts_task = nullptr;
    bool names_task = false;   // refers to a task started above, by a.snapshot (restore)
    bool can_pause = true;     // has a yield point, so `pause at` may stop it
    bool names_entry = false;  // a.entry names an entry (the shrinker renames keys there)
    // Added to the size of its data when the shrinker compares candidates, so a variant
    // with a lower weight counts as simpler (put is simpler than put_and_get_old).
    std::uint32_t weight = 0;
  };
  virtual WriterActionTraits writer_action_traits(const Action& a) const = 0;
  // The `s=NAME` of an image expectation, with ScenarioLanguage::keyed_states: one of its
  // states. Without keyed states it is never called.
  virtual Name parse_state_name(ScenarioReader& in) const;
  // Whether the values of `state` are sequences, written in brackets even with one element
  // (a list state's `{2:[1]}`, where a value state's is `{2:1}`).
  virtual bool state_values_are_sequences(const Name& state) const;

  // One simulation of `config`: generated from config.options, or config.scenario's lines.
  virtual std::unique_ptr<detail::SimCore> make_simulation(const RunConfig& config,
                                                           Strategy& strategy) const = 0;
  // The scenario `config` settings a generated run with `options` needs to replay as a
  // scenario (capacities, the hash, key groups, TTL).
  virtual void write_config(const WorkloadOptions& options, ScenarioConfig* config) const = 0;

  // `cowstate explain`: runs a scenario of this workload once and narrates it: as text, as
  // one Graphviz graph per step (with `dot`), and as the explain model, the JSON document
  // the HTML viewer draws. False when the workload has no narrator; then `why_not` says so.
  struct Narration {
    std::string text;                 // the text format
    std::vector<std::string> graphs;  // the dot format, one per step
    std::string model_json;           // the explain model (cowstate/sim/explain.h)
    Outcome outcome = Outcome::pass;
    std::string check;
  };
  virtual bool narrate(const Scenario& scenario, bool dot, Narration* out,
                       std::string* why_not) const = 0;
};

// A workload whose options are an O with O::swarm(seed, ops_max, deep_check_every) and
// O::parse(line, error) -> std::optional<O>: the options half written once.
template <class O>
class WorkloadWithOptions : public Workload {
 public:
  std::unique_ptr<WorkloadOptions> swarm(std::uint64_t seed, std::uint32_t ops_max,
                                         std::uint32_t deep_check_every) const final {
    return std::make_unique<TypedOptions<O>>(O::swarm(seed, ops_max, deep_check_every));
  }
  std::unique_ptr<WorkloadOptions> parse_options(std::string_view line,
                                                 std::string* error) const final {
    auto o = O::parse(line, error);
    if (!o) return nullptr;
    return std::make_unique<TypedOptions<O>>(std::move(*o));
  }
};

// Every workload, built-in ones first, in registration order.
const std::vector<const Workload*>& workloads();
// The workload named `name`, or nullptr.
const Workload* find_workload(std::string_view name);
// The workload `scenario`'s config names. REQUIRES: a registered one (a parsed scenario's).
const Workload& workload_of(const Scenario& scenario);
// The map workload, the default of `fuzz` and of scenarios.
const Workload& default_workload();
// Adds a workload (a test binary's own). REQUIRES: no run has started; a new name.
void register_workload(const Workload& workload);
// "map, backend": the names, for messages; with `keep`, only the workloads it keeps.
std::string workload_names(bool (*keep)(const Workload&) = nullptr);

}  // namespace cowstate::sim
