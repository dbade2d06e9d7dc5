// Workload options: what the writer does, how big the map is, how snapshots come and go.
//
// `swarm(seed)` draws a per-seed mix (swarm testing, Groce et al.): some operations are
// switched off entirely, key spaces, hot keys, capacities (tiny ones keep a rehash in
// flight; a small maximum forces chains longer than the table), value sizes and snapshot
// cadence vary. Options print as one `key=value` line before the first step and parse back
// from it, so a failing case file carries its exact workload.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "cowstate/sim/scenario.h"

namespace cowstate::sim {

// The writer's operations are the first kOpCount scenario actions (scenario.h), so a
// generated operation is written down as a scenario step unchanged.
using Op = ActionKind;
inline constexpr std::size_t kOpCount = 10;
static_assert(static_cast<std::size_t>(ActionKind::visit) + 1 == kOpCount);
inline const char* op_name(Op op) noexcept { return action_name(op); }

struct WorkloadOptions {
  std::uint32_t ops_max = 400;  // writer operations per run
  std::array<std::uint32_t, kOpCount> weights = {30, 5, 12, 4, 15, 4, 10, 6, 5, 2};
  std::uint32_t keys = 16;             // key space [0, keys)
  std::uint32_t namespaces = 2;        // namespaces [0, namespaces)
  std::uint32_t hot_keys = 0;          // the first hot_keys keys are hot ...
  std::uint32_t hot_percent = 0;       // ... and take this share of operations
  std::uint32_t initial_capacity = 4;  // map capacities (powers of two after rounding)
  std::uint32_t min_capacity = 4;
  std::uint32_t max_capacity = 1u << 30;
  bool identity_hash = false;       // bucket = (key + ns) mod capacity: collisions on demand
  std::uint32_t value_len_max = 3;  // states are vectors of 0..value_len_max int64
  std::uint32_t live_snapshots_max = 3;
  std::uint32_t step_entries_max = 4;  // serializer step budget in entries
  std::uint32_t cancel_percent = 10;   // chance the releaser cancels a snapshot when it runs
  std::uint32_t deep_check_every = 1;  // check_invariants() and full compares; 0 = never

  // A per-seed mix; ops_max and deep_check_every are left as given.
  static WorkloadOptions swarm(std::uint64_t seed, std::uint32_t ops_max,
                               std::uint32_t deep_check_every);

  std::string to_string() const;
  // Parses what to_string() prints; unknown keys or bad numbers are an error in *error.
  static std::optional<WorkloadOptions> parse(std::string_view line, std::string* error);
  bool operator==(const WorkloadOptions&) const = default;
};

// Which simulation a run is: one map (map/simulation.cc) or a keyed backend (backend/simulation.cc).
enum class WorkloadKind : std::uint8_t { map, backend };

// The backend workload: a KeyedStateBackend with one state of each kind (scenario.h's
// backend_states()), keys switching across key groups, checkpoints written through real
// checkpoint storage, cancels and injected I/O errors.
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

  // A per-seed mix; ops_max and deep_check_every are left as given.
  static BackendWorkloadOptions swarm(std::uint64_t seed, std::uint32_t ops_max,
                                      std::uint32_t deep_check_every);
  std::string to_string() const;
  static std::optional<BackendWorkloadOptions> parse(std::string_view line, std::string* error);
  bool operator==(const BackendWorkloadOptions&) const = default;
};

}  // namespace cowstate::sim
