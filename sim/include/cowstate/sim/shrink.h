// From a failing run to the smallest scenario file that fails the same way.
//
// `to_scenario` writes a recorded run (RunConfig::record) as a fixed-schedule scenario:
// every action each task took, in the order the scheduler ran them, with `pause at` where
// a step stopped at a yield point inside production code. `cowstate run` replays it.
//
// `shrink` then minimizes it while it keeps failing the same way (its FailureSignature,
// failure.h: the same outcome and check, and for an expectation the same one, failing with
// the same kind of difference), greedily and to a fixed point, cheapest wins first:
//   1. drop whole snapshots (the snapshot start, its serializer's steps, the releaser's
//      lines about it, expectations naming it);
//   2. drop preemptions: a paused step and its `continue` lines become one plain step;
//   3. finish each task at its first step: `step all` there, its later lines dropped;
//   4. drop step groups, delta-debugging style (halves, quarters, ... single lines, each
//      size swept from the end), a group being a line with the `continue` lines that
//      finish it;
//   5. smaller data: values to fewer and smaller numbers, keys and namespaces to small
//      ones, serializer budgets to `all` or smaller, visit budgets and salts to small
//      ones, a power loss's crash point nearer the end and its seeds and fault position
//      smaller;
//   6. only when nothing above helps (a run or more per line): a task's step at each of
//      its lines made `step all`, two of its steps merged into one; a memory budget, then
//      the spill manager's check interval, lowered to the smallest power of two that still
//      fails (the manager then spills after fewer writes, which the passes above drop);
//      a step shortly before a power loss dropped with the crash point (`after=now-K`)
//      moved back to match.
// Every candidate is a full simulation run with every check on, bounded by ShrinkOptions.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "cowstate/sim/run.h"
#include "cowstate/sim/scenario.h"

namespace cowstate::sim {

// Runs a scenario: fixed schedules as written, free ones under their strategy and seed; with
// `crash_states_max`, then restarts from the crash states of its disk (RunConfig).
RunResult run_scenario(const Scenario& scenario, bool keep_trace = false,
                       std::function<void(const StepView&)> on_step = {},
                       std::uint64_t crash_states_max = 0);

// The fixed-schedule scenario that replays `recorded` (run with RunConfig::record); nullopt
// when the run stopped before any task took a step (its setup failed).
std::optional<Scenario> to_scenario(const RunConfig& config, const RunResult& recorded);

struct ShrinkOptions {
  std::uint64_t max_runs = 20000;
  double max_seconds = 60;
};

struct ShrinkResult {
  Scenario scenario;  // the smallest failing scenario found
  RunResult result;   // its run
  // How it fails: the original failure's signature, its keys renamed as the shrinker renamed
  // them; the printed scenario replays to exactly this.
  FailureSignature signature;
  std::uint64_t runs = 0;
  std::size_t steps_before = 0, steps_after = 0;
  // Why it stopped: "" at a fixed point (no pass made progress), "runs" or "seconds" when
  // ShrinkOptions cut it short; only a fixed point or "runs" is the same on every machine.
  std::string cut_by;
  bool reproduced = false;     // the input failed as recorded (otherwise nothing was shrunk)
  std::string not_reproduced;  // why not, when !reproduced
};

// Minimizes `failing` while its run fails as `failure` says.
ShrinkResult shrink(const Scenario& failing, const FailureSignature& failure,
                    const ShrinkOptions& options = {});

// The whole pipeline for a failing generated run: record, convert, shrink.
ShrinkResult shrink_run(const RunConfig& config, Strategy& strategy,
                        const ShrinkOptions& options = {});

}  // namespace cowstate::sim
