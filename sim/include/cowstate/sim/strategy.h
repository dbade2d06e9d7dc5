// Scheduling strategies: the oracle the scheduler asks which runnable task goes next.
//
// One strategy per file (sim/src/core/strategy_*.cc): random, PCT, bounded exhaustive and
// replay. A strategy sees only task ids and the step number, and draws any randomness from
// its own Prng seeded from the run seed, so a (seed, strategy) pair names one schedule.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cowstate/sim/random.h"

namespace cowstate::sim {

// A runnable task as the strategy sees it.
struct TaskView {
  std::uint32_t id;      // stable for the run, in creation order
  std::uint32_t weight;  // the workload's preference; strategies may ignore it
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;
  // Called before the first step of every run.
  virtual void begin_run(std::uint64_t seed) = 0;
  // Chooses one of `runnable` (non-empty, ascending ids). `last` is the task that ran the
  // previous step (or UINT32_MAX); choosing another while `last` is runnable is a
  // preemption.
  virtual std::uint32_t pick(const std::vector<TaskView>& runnable, std::uint32_t last,
                             std::uint64_t step) = 0;
  // Exploring strategies see a digest of the whole simulation state before each choice;
  // returning false abandons the run because that state's future was already explored.
  virtual bool wants_digest() const { return false; }
  virtual bool on_state(std::uint64_t /*digest*/) { return true; }
};

// Weighted random choice at every step.
std::unique_ptr<Strategy> make_random_strategy();
// Probabilistic concurrency testing (Burckhardt et al.): random task priorities and
// depth - 1 priority change points spread over the first `steps_estimate` steps.
std::unique_ptr<Strategy> make_pct_strategy(std::uint32_t depth, std::uint64_t steps_estimate);
// Replays a recorded sequence of task ids; past its end it keeps running the last task
// while runnable, else the lowest id.
std::unique_ptr<Strategy> make_replay_strategy(std::vector<std::uint32_t> schedule);
// The bounded exhaustive strategy lives with its driver in explore.h.

}  // namespace cowstate::sim
