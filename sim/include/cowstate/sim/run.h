// One simulation run: the production map and the reference model side by side, driven by
// fibers under a strategy.
//
// Tasks (each a Fiber, all on one thread):
//   writer      applies each operation to the map and the model and compares the results;
//               starts snapshots (each gets a serializer task).
//   ser<N>      one per snapshot: advances the production snapshot writer a bounded number
//               of entries per step, checks every emitted entry against the model image of
//               its version, and at completion restores the bytes into a fresh map and
//               compares; then releases the snapshot.
//   releaser    cancels and releases snapshots before their serializers finish, in any
//               order, sometimes twice.
// Named yield points inside production code (COWSTATE_YIELD, compiled into sim builds)
// let any task run in the middle of a writer operation or a serializer step.
//
// Checks after every step (ids from docs/invariants.md, or a checker name):
//   result      every operation result equals the model's
//   size, I2    live sizes and the highest required version agree with the model
//   I1, I9      snapshot versions mirror the model's; snapshot arrays cover the size
//   emitted     entries a serializer emits: in the image, equal, never twice
//   image       a completed snapshot emitted exactly its image; live snapshots iterate to
//               their image (deep cadence)
//   restore     the bytes restore to a map equal to the image, itself sound
//   live        the live map equals the model (deep cadence)
//   minimal     a write to an entry no live snapshot can see does not copy it
//   I10         no slot a live snapshot reaches is free; nothing stays retired once every
//               snapshot is released
//   I*          check_invariants() at the deep cadence
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cowstate/sim/strategy.h"
#include "cowstate/sim/workload.h"

namespace cowstate::sim {

enum class Outcome : std::uint8_t { pass, failure, assertion, stuck };
// 0 pass, 1 correctness failure, 3 assertion or crash caught, 4 stuck schedule.
int exit_code(Outcome outcome) noexcept;
const char* outcome_name(Outcome outcome) noexcept;

struct RunConfig {
  std::uint64_t seed = 1;
  WorkloadOptions workload;
  std::uint64_t step_bound = 0;  // 0: derived from workload.ops_max
  bool keep_trace = false;       // keep every trace line (otherwise only the tail)
  std::size_t trace_tail = 24;
};

struct RunStats {
  std::uint64_t steps = 0;
  std::uint64_t ops = 0;
  std::uint64_t snapshots = 0;          // started
  std::uint64_t snapshots_checked = 0;  // serialized, restored and compared in full
  std::uint64_t entries_checked = 0;
  std::uint64_t deep_checks = 0;
  std::uint64_t yields = 0;  // yield points taken inside production code
};

struct RunResult {
  Outcome outcome = Outcome::pass;
  std::string check;    // id of the check that failed
  std::string message;  // what it saw
  RunStats stats;
  std::uint64_t trace_hash = 0;         // FNV-1a over every trace line
  std::vector<std::string> trace;       // every line if keep_trace, else the last trace_tail
  std::vector<std::uint32_t> schedule;  // task id of every step
  bool abandoned = false;  // an exploring strategy stopped the run (state already explored)
};

// Runs one simulation. Deterministic: the same config and strategy give the same trace.
RunResult run_once(const RunConfig& config, Strategy& strategy);

}  // namespace cowstate::sim
