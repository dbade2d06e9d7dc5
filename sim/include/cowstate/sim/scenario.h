// Scenario files: a race written down as text (docs/scenario-format.md).
//
// A scenario is a configuration, the steps of its tasks and expectations, in file order:
//
//   config capacity=4 hash=identity
//   writer: put k=1 v=10 ; put k=5 v=50
//   writer: snapshot s1
//   writer: put k=1 v=11 pause at map.copy_chain_prefix
//   s1: step 2
//   writer: continue
//   expect s1 = {1:10, 5:50}
//   expect live = {1:11, 5:50}
//
// Tasks are `writer`, `releaser` and one serializer per snapshot, named after it. Under
// `schedule=fixed` (the default) the step lines are the interleaving: each line runs its
// task for one step (an operation, a serializer step, a releaser decision), up to the
// named yield point when it says `pause at`. Under `schedule=free` each task runs its own
// lines in order and the strategy (or `cowstate explore`) chooses the interleaving.
//
// The value types here are plain data: the parser fills them, the printer writes them
// back (parse(print(x)) == x), the shrinker edits them and the simulator runs them.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace cowstate::sim {

// The entry a step or an expectation names: (key, namespace).
using EntryKey = std::pair<std::uint64_t, std::int32_t>;
using StateValue = std::vector<std::int64_t>;
using ScenarioImage = std::map<EntryKey, StateValue>;

enum class ActionKind : std::uint8_t {
  // writer
  put,
  put_and_get_old,
  remove,
  remove_and_get_old,
  get,
  contains,
  get_mutable,
  transform,
  snapshot,
  visit,
  // serializer
  step,
  // releaser
  cancel,
  keep,
  release,
  // any task: finish the step a `pause at` interrupted
  resume,
};
const char* action_name(ActionKind kind) noexcept;  // as written in files ("continue")

// What `get_mutable ... then M` does to the state it was handed.
enum class Mutation : std::uint8_t {
  append,     // push x
  overwrite,  // s[x mod size] = -x (append x when empty)
  pop,        // drop the last element (append x when empty)
};

struct Action {
  ActionKind kind = ActionKind::get;
  EntryKey entry{0, 0};                  // keyed writer operations
  StateValue value;                      // put, put_and_get_old
  Mutation mutation = Mutation::append;  // get_mutable
  std::int64_t x = 0;                    // get_mutable, transform (append x)
  std::uint32_t budget = 0;              // visit: buckets; step: entries, 0 = all that are left
  std::uint64_t salt = 0;                // visit: which entries the visitor replaces or removes
  std::string snapshot;                  // snapshot, cancel, keep, release
  bool operator==(const Action&) const = default;
};

// One step line (or one `;`-separated part of it).
struct StepLine {
  std::string task;  // writer, releaser, or a snapshot's name
  Action action;
  std::string pause;  // yield point the step stops at; empty: the step runs to its end
  int line = 0;       // source position, not part of equality
  int column = 0;
  bool operator==(const StepLine& o) const {
    return task == o.task && action == o.action && pause == o.pause;
  }
};

enum class ExpectKind : std::uint8_t {
  image,     // expect NAME = {...} / expect live = {...}
  copied,    // expect copied entries={...} states={...}: what the last writer step copied
  versions,  // expect versions map=M h=H
  retired,   // expect retired entries=E states=S
  failure,   // expect failure CHECK: the run must fail at this check
};

struct Expectation {
  ExpectKind kind = ExpectKind::image;
  std::string target;  // image: snapshot name or "live"; failure: the check id
  ScenarioImage image;
  std::set<EntryKey> copied_entries, copied_states;
  std::uint64_t a = 0, b = 0;  // versions: map, h; retired: entries, states
  int line = 0;                // not part of equality
  int column = 0;
  bool operator==(const Expectation& o) const {
    return kind == o.kind && target == o.target && image == o.image &&
           copied_entries == o.copied_entries && copied_states == o.copied_states && a == o.a &&
           b == o.b;
  }
};

using ScenarioItem = std::variant<StepLine, Expectation>;

struct ScenarioConfig {
  std::uint32_t initial_capacity = 4;
  std::uint32_t min_capacity = 4;
  std::uint32_t max_capacity = 1u << 30;
  bool identity_hash = false;  // bucket = (key + ns) mod capacity: collisions on demand
  bool fixed_schedule = true;
  std::uint64_t seed = 1;           // free schedules: the strategy's seed
  std::string strategy = "random";  // free schedules: random or pct
  std::uint32_t pct_depth = 3;
  bool operator==(const ScenarioConfig&) const = default;
};

struct Scenario {
  ScenarioConfig config;
  std::string kills;  // negative scenarios: the mutant this scenario must kill
  std::vector<ScenarioItem> items;
  std::string file;  // where it was read from (messages only; not part of equality)
  bool operator==(const Scenario& o) const {
    return config == o.config && kills == o.kills && items == o.items;
  }

  // Number of step lines (the size the shrinker minimizes).
  std::size_t step_count() const;
};

struct ParseError {
  std::string file;
  int line = 0;
  int column = 0;
  std::string message;            // "expected X, found Y"
  std::string to_string() const;  // file:line:col: message
};

// Parses a scenario; on failure returns nullopt and fills *error.
std::optional<Scenario> parse_scenario(std::string_view text, const std::string& file,
                                       ParseError* error);
// Writes a scenario in the same format; `header` lines are written first as comments.
std::string print_scenario(const Scenario& scenario, const std::string& header = "");
// One step line as written after `task:` ("put k=1 v=10 pause at map.insert_new").
std::string print_action(const StepLine& line);
std::string print_image(const ScenarioImage& image);

// The yield points production code names (COWSTATE_YIELD), for validating `pause at`.
const std::vector<std::string>& yield_points();

}  // namespace cowstate::sim
