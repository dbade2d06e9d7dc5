// The backend workload's options (sim/src/backend/): a KeyedStateBackend with one state of
// each kind, keys switching across key groups, checkpoints through real checkpoint storage,
// cancels, injected I/O errors, power losses and read faults on a simulated disk, and (on
// half of the seeds) state TTL on a logical clock.
// Printed as one `key=value` line and parsed back, as the map workload's are.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cowstate::sim {

struct BackendWorkloadOptions {
  std::uint32_t ops_max = 300;  // writer operations per run
  // value, list, map, reducing, aggregating, checkpoint
  std::array<std::uint32_t, 6> weights = {12, 12, 12, 8, 8, 4};
  std::uint32_t keys = 32;       // key space [0, keys), filtered to the backend's range
  std::uint32_t namespaces = 3;  // namespaces [0, namespaces)
  std::uint32_t max_parallelism = 8;
  std::uint32_t key_group_first = 0;  // the backend's range
  std::uint32_t key_group_last = 7;
  std::uint32_t initial_capacity = 4;  // of every state map
  std::uint32_t min_capacity = 4;
  std::uint32_t max_capacity = 1u << 30;
  std::uint32_t live_checkpoints_max = 2;
  std::uint32_t step_entries_max = 4;  // serializer step budget in entries
  std::uint32_t cancel_percent = 10;   // chance the releaser cancels a checkpoint
  std::uint32_t fault_percent = 10;    // chance a serializer arms an I/O error first
  std::uint32_t fault_within = 12;     // ... at one of the next N file operations
  // Chance a writer operation with no checkpoint in flight is a power loss (simulated disk
  // only), and that its restart meets a read fault. Off unless set (or drawn by swarm), so
  // a case file written without them replays as it was recorded.
  std::uint32_t power_loss_percent = 0;
  std::uint32_t read_fault_percent = 0;
  // Chance a serializer that arms no I/O error arms a write fault instead (simulated disk
  // only): one of its data file's next appends, or its manifest's, lost or misdirected.
  // Off unless set (or drawn by swarm), like the two above.
  std::uint32_t write_fault_percent = 0;
  // 1: data files are written through async files whose queued buffers (io_buffer_bytes
  // each) land when an io task says (ManualIo), so completions are delayed and reordered
  // across files and errors surface at a later call; 0: every append lands at once.
  std::uint32_t async_io = 0;
  std::uint32_t io_buffer_bytes = 64;
  std::uint32_t deep_check_every = 1;  // full compares with the model; 0 = never
  // State TTL of the count, events and attrs states (ScenarioConfig has the same settings);
  // ttl_ms 0 = none. With a TTL a clock task advances logical time, often landing exactly
  // on a stored value's expiry instant, and the writer sometimes drives cleanup by hand.
  std::uint32_t ttl_ms = 0;
  std::uint32_t ttl_update = 0;         // 1: OnReadAndWrite
  std::uint32_t ttl_visibility = 0;     // 1: ReturnExpiredIfNotCleanedUp
  std::uint32_t ttl_cleanup = 5;        // incremental cleanup size; 0 = none
  std::uint32_t ttl_key_switch = 0;     // 1: incremental cleanup on every key switch
  std::uint32_t ttl_full_snapshot = 0;  // 1: full-snapshot cleanup
  // A memory budget (ScenarioConfig has the same settings); budget_bytes 0 = none. With one
  // the backend has a cold tier and FLIP-50's manager, which checks every spill_check key
  // switches (0: never); cold_cache_percent of the budget caches hot cold entries; and
  // spill_percent of the writer's operations are explicit spills and loads.
  std::uint32_t budget_bytes = 0;
  std::uint32_t spill_check = 1;
  std::uint32_t cold_cache_percent = 25;
  std::uint32_t spill_percent = 0;
  // Incremental checkpoints (ScenarioConfig has the same setting): 0 = none; N = the backend
  // writes deltas of its last completed checkpoint, every N-th checkpoint of a chain full.
  // Chains are read back through the storage's manifests for every restore. Runs drawn with
  // them have no write faults (a damaged member would make every later delta unreadable).
  std::uint32_t incremental = 0;

  // A per-seed mix; ops_max and deep_check_every are left as given.
  static BackendWorkloadOptions swarm(std::uint64_t seed, std::uint32_t ops_max,
                                      std::uint32_t deep_check_every);
  std::string to_string() const;
  static std::optional<BackendWorkloadOptions> parse(std::string_view line, std::string* error);
  bool operator==(const BackendWorkloadOptions&) const = default;
};

}  // namespace cowstate::sim
