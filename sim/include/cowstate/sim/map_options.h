// The map workload's options (sim/src/map/): what the writer does to one CowStateMap, how
// big the map is, how snapshots come and go.
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

#include "cowstate/sim/map_ops.h"
#include "cowstate/sim/scenario.h"

namespace cowstate::sim {

struct MapWorkloadOptions {
  std::uint32_t ops_max = 400;  // writer operations per run
  OpWeights weights = {.put = 30,
                       .put_and_get_old = 5,
                       .remove = 12,
                       .remove_and_get_old = 4,
                       .get = 15,
                       .contains = 4,
                       .get_mutable = 10,
                       .transform = 6,
                       .snapshot_start = 5,
                       .snapshot_release = 0,
                       .visit = 2};
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
  // The map tracks changes (change_log.h): each serialized snapshot is a completed
  // checkpoint, and the next snapshot's delta from it is checked (I14, I15). Printed only
  // when on, so case files recorded before it replay unchanged.
  bool track_changes = false;

  // A per-seed mix; ops_max and deep_check_every are left as given.
  static MapWorkloadOptions swarm(std::uint64_t seed, std::uint32_t ops_max,
                                  std::uint32_t deep_check_every);

  std::string to_string() const;
  // Parses what to_string() prints; unknown keys or bad numbers are an error in *error.
  static std::optional<MapWorkloadOptions> parse(std::string_view line, std::string* error);
  bool operator==(const MapWorkloadOptions&) const = default;
};

}  // namespace cowstate::sim
