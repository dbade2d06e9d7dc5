// Bounded exhaustive exploration: every schedule of one run's tasks with at most
// `preemption_bound` preemptions (CHESS, Musuvathi & Qadeer), by stateless depth-first
// search over re-executions, with dedup of explored states.
//
// Each re-execution follows a forced prefix of choices and then runs non-preemptively
// (the last task while it is runnable, else the lowest id). Backtracking takes the deepest
// decision with an untried alternative within the bound. Before every choice the run's
// state digest (model, map layout, versions, retired memory, every task's position and
// random stream, snapshot progress) is looked up: a state already reached with no more
// preemptions used has had its future explored, so the run is abandoned there and counted
// as pruned. Data choices come from per-task random streams, so they do not depend on the
// interleaving and two schedules that reach one digest have the same future.
#pragma once

#include <cstdint>
#include <vector>

#include "cowstate/sim/run.h"

namespace cowstate::sim {

struct ExploreOptions {
  std::uint32_t preemption_bound = 2;
  std::uint64_t max_schedules = 10000;
  bool dedup = true;
  bool stop_at_first_failure = false;
};

struct ExploredFailure {
  std::vector<std::uint32_t> schedule;  // replay with make_replay_strategy
  RunResult result;
};

struct ExploreResult {
  std::uint64_t schedules = 0;  // executions, complete or abandoned
  std::uint64_t pruned = 0;     // executions abandoned at an already explored state
  std::uint64_t steps = 0;
  bool complete = false;  // the bounded space was exhausted
  std::vector<ExploredFailure> failures;
};

ExploreResult explore(const RunConfig& config, const ExploreOptions& options);

}  // namespace cowstate::sim
