// One simulation run: the production map and the reference model side by side, driven by
// fibers under a strategy.
//
// Tasks (each a Fiber, all on one thread):
//   writer      applies each operation to the map and the model and compares the results;
//               starts snapshots (each gets a serializer task).
//   ser<N>      one per snapshot: advances the production snapshot writer a bounded number
//               of entries per step, checks every emitted entry against the model image of
//               its version, and at completion restores the bytes into a fresh map and
//               compares; then releases the snapshot. With change tracking it also reads
//               its delta from the last completed snapshot (the base) and checks it.
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
//   I14, I15    with change tracking, a completed snapshot's delta from its base, applied
//               to the base's image, gives its image
//   I*          check_invariants() at the deep cadence
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cowstate/sim/coverage.h"
#include "cowstate/sim/failure.h"
#include "cowstate/sim/scenario.h"
#include "cowstate/sim/strategy.h"
#include "cowstate/sim/workload.h"

namespace cowstate::sim {

// The map as a learner sees it after a step (`cowstate explain`).
struct LayoutEntry {
  std::uint32_t slot = 0;  // pool slot
  EntryKey key;
  StateValue state;
  std::uintptr_t state_id = 0;  // identity of the state object (shared between copies)
  std::uint32_t entry_version = 0;
  std::uint32_t state_version = 0;
  std::vector<std::string> seen_by;  // live snapshots whose frozen version reaches this entry
};
struct SnapshotLayout {
  std::string name;
  std::uint32_t version = 0;
  std::vector<std::uint32_t> heads;  // the copied bucket heads (pool slots, 0 = empty)
  std::size_t size = 0;
  std::size_t emitted = 0;  // entries its serializer wrote so far
  bool completed = false;
};
struct MapLayout {
  std::uint32_t map_version = 0;
  std::uint32_t highest_required_version = 0;
  std::size_t size = 0;
  // tables[0] is the primary table, tables[1] the rehash target (empty unless a rehash is
  // in flight); tables[t][bucket] is the chain, head first.
  std::vector<std::vector<std::vector<LayoutEntry>>> tables;
  std::uint32_t rehash_index = 0;  // primary buckets below it have moved
  // Entries only snapshots reach (retired copies or removed entries), by slot.
  std::vector<LayoutEntry> retired;
  std::size_t retired_entries = 0, retired_states = 0, free_slots = 0;
  std::vector<SnapshotLayout> snapshots;  // live ones, in start order
};
struct BackendLayout;  // cowstate/sim/backend_layout.h

// One scheduler step, for observers.
struct StepView {
  std::uint64_t step = 0;
  std::string task;                // scenario task name (writer, releaser, snapshot name)
  std::string action;              // the step line as a scenario would write it
  int source_line = 0;             // scenario line, 0 when generated
  std::string paused_at;           // yield point the task stopped at; empty: its step ended
  std::vector<std::string> trace;  // the trace lines the step produced
  std::set<EntryKey> copied_entries, copied_states;  // by the writer step that just ended
  const MapLayout* layout = nullptr;
  const BackendLayout* backend = nullptr;  // the backend workload's instead of a layout
};

struct RunConfig {
  std::uint64_t seed = 1;
  // Generated runs: which simulation, with which options (made by that workload). Scenario
  // runs take both from the scenario's config instead.
  const Workload* workload = nullptr;
  std::shared_ptr<const WorkloadOptions> options;
  std::uint64_t step_bound = 0;  // 0: derived from the options' ops_max
  bool keep_trace = false;       // keep every trace line (otherwise only the tail)
  std::size_t trace_tail = 24;
  // Runs this scenario's steps instead of generated ones (see scenario.h); the workload and
  // its capacities come from its config (`config workload=NAME`). Not owned.
  const Scenario* scenario = nullptr;
  bool record = false;  // record every task's actions and every step (for to_scenario)
  // At the end of a passing run, restart from every crash state of the run's disk (every
  // prefix of its operations since the last power loss times every allowed subset of what
  // was not durable), at most this many (0: none). Workloads without a disk refuse it.
  std::uint64_t crash_states_max = 0;
  std::function<void(const StepView&)> on_step;  // sees every step (the map: with its layout)

  // The workload this run is: the scenario's, or `workload`.
  const Workload& which() const;
};

// What a task did, for turning a run into a scenario.
struct TaskRecord {
  std::string name;  // scenario task name
  std::vector<Action> actions;
};
struct StepRecord {
  std::uint32_t task = 0;
  bool resumed = false;  // it continued a step an earlier pause interrupted
  std::uint32_t first_action = 0, end_action = 0;  // actions it began, in its TaskRecord
  std::string paused_at;                           // empty: its step ended
};

struct RunStats {
  std::uint64_t steps = 0;
  std::uint64_t ops = 0;
  std::uint64_t snapshots = 0;          // started
  std::uint64_t snapshots_checked = 0;  // serialized, restored and compared in full
  std::uint64_t entries_checked = 0;
  std::uint64_t deep_checks = 0;
  std::uint64_t yields = 0;        // yield points taken inside production code
  std::uint64_t crash_states = 0;  // restarts checked from enumerated crash states
  std::uint64_t crash_points = 0;  // the prefixes of disk operations they came from
  CoverageCounts coverage;         // hits per coverage probe (cowstate/sim/coverage.h)

  // Adds another run's (or shard's) counts: a campaign's totals.
  RunStats& operator+=(const RunStats& o) {
    steps += o.steps;
    ops += o.ops;
    snapshots += o.snapshots;
    snapshots_checked += o.snapshots_checked;
    entries_checked += o.entries_checked;
    deep_checks += o.deep_checks;
    yields += o.yields;
    crash_states += o.crash_states;
    crash_points += o.crash_points;
    coverage += o.coverage;
    return *this;
  }
};

struct RunResult {
  Outcome outcome = Outcome::pass;
  std::string check;    // id of the check that failed
  std::string message;  // what it saw
  // check `expect`: the expectation as written, and how it was not met.
  std::string expectation;
  Difference difference;
  RunStats stats;
  std::uint64_t trace_hash = 0;         // FNV-1a over every trace line
  std::vector<std::string> trace;       // every line if keep_trace, else the last trace_tail
  std::vector<std::uint32_t> schedule;  // task id of every step
  bool abandoned = false;  // an exploring strategy stopped the run (state already explored)
  // With RunConfig::record:
  std::vector<TaskRecord> tasks;
  std::vector<StepRecord> steps;
  int failed_line = 0;  // scenario line of the failing expectation or invalid step
  // The disk operation each power loss came after, in the order they came.
  std::vector<std::uint64_t> crash_ops;

  FailureSignature signature() const { return {outcome, check, expectation, difference}; }
};

// Runs one simulation. Deterministic: the same config and strategy give the same trace.
RunResult run_once(const RunConfig& config, Strategy& strategy);

}  // namespace cowstate::sim
