// The keyed backend as a learner sees it after a step (`cowstate explain` of a backend
// scenario): one copy-on-write map per (state, key group), the checkpoints with what their
// sync phase took and what their async phase still holds, and the logical clock.
//
// Values are in the backend workload's canonical form (sim/src/backend/simulation.cc): a
// value or a sum as [v], a list as its elements, a map as (user key, user value) pairs
// flattened, an average as [sum, count]; with TTL every value or element is followed by its
// last-access time (`ttl_stride` numbers per element, the last one the time).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace cowstate::sim {

struct BackendEntryView {
  std::uint64_t key = 0;
  std::int32_t ns = 0;
  std::vector<std::int64_t> value;
  std::uint32_t entry_version = 0;
  std::uint32_t state_version = 0;
};

// One (state, key group) map; only maps with entries, a live snapshot or retired memory.
struct BackendMapView {
  std::string state;
  std::int32_t key_group = 0;
  std::uint32_t map_version = 0;
  std::uint32_t highest_required_version = 0;
  std::size_t capacity = 0;
  std::size_t rehash_capacity = 0;  // non-zero while an incremental rehash is in flight
  std::size_t retired_entries = 0;
  std::size_t retired_states = 0;
  std::vector<BackendEntryView> entries;  // ascending (key, namespace)
};

// A map snapshot a checkpoint's sync phase took: (state, key group).
using MapSnapshotId = std::pair<std::string, std::int32_t>;

// What a checkpoint restores: one entry of its image, with its key group.
struct ImageEntryView {
  std::string state;
  std::uint64_t key = 0;
  std::int32_t ns = 0;
  std::int32_t key_group = 0;
  std::vector<std::int64_t> value;
};

struct CheckpointView {
  std::string name;  // the scenario's name (c1, ...)
  std::uint64_t id = 0;
  std::vector<MapSnapshotId> taken;  // by the sync phase
  std::vector<MapSnapshotId> held;   // still held: their blocks are not written yet
  std::uint64_t bytes_written = 0;
  bool finished = false;
  bool complete = false;              // committed: a restorable checkpoint in storage
  bool cancelled = false;             // a cancel was accepted
  std::string error;                  // why it failed, when it finished without completing
  // What storage made of it since: "" (as written), "lost at a power loss", "pruned",
  // "data file damaged" or "manifest damaged" (a write fault changed what its commit left).
  std::string storage;
  std::vector<ImageEntryView> image;  // what a restore of it must give (the model's)
};

struct BackendLayout {
  std::int32_t max_parallelism = 0;
  std::int32_t first_key_group = 0, last_key_group = -1;
  std::vector<std::string> states;  // in registration order
  bool ttl = false;
  std::uint64_t ttl_ms = 0;
  std::int64_t now = 0;                           // the logical clock (ms)
  std::map<std::string, std::size_t> ttl_stride;  // states with TTL: numbers per element
  std::vector<BackendMapView> maps;               // by state (registration order), then key group
  std::vector<CheckpointView> checkpoints;        // in start order
};

}  // namespace cowstate::sim
