// `cowstate explain`: a scenario narrated step by step, for people learning how the
// copy-on-write map works.
//
// `explain_scenario` runs a scenario once (as `cowstate run` does) and keeps, for every
// scheduler step, what the step was and the map's layout after it (RunConfig::on_step).
// The renderers turn that sequence into
//   text  one section per step: a heading naming the task, the step line and its source
//         line, a paragraph saying in plain English what happened, the map and highest
//         required versions, every chain head first with each entry's key, state, pool
//         slot, entry and state versions and the live snapshots that still see it, the
//         entries only snapshots reach, every live snapshot with its head array and the
//         chains it sees, and what the writer copied and why; the outcome at the end;
//   dot   one Graphviz digraph per step: bucket arrays and snapshot head arrays as record
//         nodes, entries as nodes, `next` edges, retired entries grey, copies highlighted.
//
// Why something was copied needs the entry's versions before the writer's operation began,
// so the renderers read the steps in order and keep the layout at the start of each writer
// operation. Retired entries carry no `next` in a layout; it is the one they had when last
// seen in a live chain, which cannot have changed since (I3: a snapshot's entries are
// never written while it is live).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "cowstate/sim/backend_layout.h"
#include "cowstate/sim/explain_source.h"
#include "cowstate/sim/run.h"
#include "cowstate/sim/scenario.h"

namespace cowstate::sim {

// One scheduler step with the layout after it (an owning copy of a StepView).
struct ExplainStep {
  std::uint64_t step = 0;
  std::string task;
  std::string action;   // the step line as written; "continue" for a resumed step
  int source_line = 0;  // 0: run after the last line (tasks finishing)
  std::string paused_at;
  std::vector<std::string> trace;
  std::set<EntryKey> copied_entries, copied_states;
  MapLayout layout;       // the map workload's
  BackendLayout backend;  // the backend workload's
};

ExplainStep to_explain_step(const StepView& view);

// The steps a reader follows: one per step line (or `;` part) run, plus the pauses a line
// asked for. A fixed schedule passes through the other yield points by resuming the same
// task at once; those resumptions are folded into the step they interrupted, and a task's
// last resumption (which only ends it) is dropped. Steps are renumbered from 1.
std::vector<ExplainStep> reader_steps(const std::vector<ExplainStep>& scheduler_steps);

struct Explanation {
  std::string file;
  ScenarioConfig config;
  std::vector<ExplainStep> steps;
  RunResult result;
  ScenarioNotes notes;  // the file's comments, placed beside its steps
};

// Where a step's notes go: the comments above its line before the first step of the line,
// those below it after the last one.
struct StepNotes {
  const std::vector<std::string>* above = nullptr;  // null: not the line's first step
  const std::vector<std::string>* after = nullptr;  // null: not the line's last step
  std::string trailing;
};
StepNotes notes_of(const Explanation& e, std::size_t step_index);
// Note lines as text: comments as "# ...", expectation lines as written, each indented.
std::string comment_lines(const std::vector<std::string>& lines, const std::string& indent);

// Runs `scenario` once, keeping its reader steps.
Explanation explain_scenario(const Scenario& scenario);

// The narrated text, legend first and outcome last.
std::string explain_text(const Explanation& explanation);

// One DOT graph per step, in step order (file step-001.dot holds the first).
std::vector<std::string> explain_dot(const Explanation& explanation);

// The explain model as one JSON document (the HTML viewer's input): the file, its notes,
// every step with its narration and picture, the outcome.
std::string explain_json(const Explanation& explanation);

// The parts of a step's and of the whole model's JSON every workload's model shares.
nlohmann::json step_json_base(const Explanation& e, std::size_t step_index,
                              const std::string& narration);
nlohmann::json explanation_json_base(const Explanation& e, const char* workload);

// The same three for a backend scenario (sim/src/backend/explain.cc).
std::string explain_backend_text(const Explanation& explanation);
std::vector<std::string> explain_backend_dot(const Explanation& explanation);
std::string explain_backend_json(const Explanation& explanation);

}  // namespace cowstate::sim
