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
//
// Shards (`split_depth` D >= 1): the schedules are grouped into subtrees by their choices
// at the first D branching decisions (a decision with an alternative within the bound),
// numbered in depth-first order, and each subtree is explored with a dedup table of its
// own, emptied when the search enters the next subtree. The exploration of a subtree then
// depends on the subtree alone, so shard I of N explores exactly the subtrees k with
// k mod N == I, finds the next one by running the first schedule of each subtree it skips
// (not counted), and the shards' counts add up to those of the unsharded run with the same
// D. With D = 0 the one dedup table spans the whole space: fewer schedules, and no split.
// (A split with one table cannot add up: a subtree explored later prunes states first
// reached in earlier subtrees, which a shard that skipped them has not seen.)
#pragma once

#include <cstdint>
#include <vector>

#include "cowstate/sim/coverage.h"
#include "cowstate/sim/run.h"

namespace cowstate::sim {

struct ExploreOptions {
  std::uint32_t preemption_bound = 2;
  std::uint64_t max_schedules = 10000;
  bool dedup = true;
  bool stop_at_first_failure = false;
  std::uint32_t split_depth = 0;  // subtrees below the first D branching decisions; 0: one
  std::uint32_t shard_index = 0;  // explore the subtrees k with k mod shard_count == index
  std::uint32_t shard_count = 1;  // REQUIRES: 1 unless split_depth > 0
};

struct ExploredFailure {
  std::vector<std::uint32_t> schedule;  // replay with make_replay_strategy
  RunResult result;
  std::uint64_t subtree = 0;
};

// One subtree this shard explored, from its first schedule on.
struct ExploredSubtree {
  std::uint64_t index = 0;
  std::vector<std::size_t> prefix;  // the candidate taken at each decision that leads to it
  std::uint64_t schedules = 0, pruned = 0, steps = 0, failures = 0;
  CoverageCounts coverage;  // of its schedules
};

struct ExploreResult {
  std::uint64_t schedules = 0;  // executions, complete or abandoned
  std::uint64_t pruned = 0;     // executions abandoned at an already explored state
  std::uint64_t steps = 0;
  bool complete = false;  // the bounded space was exhausted
  std::vector<ExploredFailure> failures;
  std::vector<ExploredSubtree> subtrees;  // this shard's, in order
  std::uint64_t subtrees_total = 0;       // in the whole space (so far, when not complete)
  std::uint64_t discovery_runs = 0;       // first schedules of skipped subtrees, not counted
};

ExploreResult explore(const RunConfig& config, const ExploreOptions& options);

// The coverage report of an exploration (unit: subtree); `seed` is the explored run's.
CoverageReport explored_coverage(const ExploreResult& r, std::uint64_t seed);

}  // namespace cowstate::sim
