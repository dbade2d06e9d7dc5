// Building a BackendLayout (cowstate/sim/backend_layout.h) from the production backend: the
// maps of a typed state table read through CowStateMapAccess, and what a BackendSnapshot
// took and still holds. Only `cowstate explain` asks for it (RunConfig::on_step), so a run
// without an observer never builds one.
#pragma once

#include <algorithm>
#include <string>
#include <tuple>

#include "cowstate/checkpoint.h"
#include "cowstate/cow_state_map_access.h"
#include "cowstate/sim/backend_layout.h"

namespace cowstate::sim::detail {

// Adds the maps of `table` that hold entries, a live snapshot or retired memory, each
// entry's state turned into the canonical form by `canonical(state)`.
template <class Table, class Canonical>
void add_map_views(BackendLayout& out, const std::string& state, const Table& table,
                   Canonical&& canonical) {
  using Access = CowStateMapAccess;
  using S = typename Table::S;
  const KeyGroupRange r = table.range();
  for (std::int32_t g = r.start(); !r.empty() && g <= r.end(); ++g) {
    const auto& m = table.map(g);
    BackendMapView v;
    v.state = state;
    v.key_group = g;
    v.map_version = m.map_version();
    v.highest_required_version = m.highest_required_version();
    v.capacity = m.capacity();
    v.rehash_capacity = Access::rehash_capacity(m);
    v.retired_entries = Access::retired_entries(m);
    v.retired_states = Access::retired_states(m);
    if (m.size() == 0 && v.highest_required_version == 0 && v.retired_entries == 0) continue;
    for (int t = 0; t < 2; ++t) {
      const std::size_t buckets = t == 0 ? v.capacity : v.rehash_capacity;
      for (std::uint32_t b = 0; b < buckets; ++b) {
        for (std::uint32_t i : Access::chain(m, t, b)) {
          const Access::EntryInfo e = Access::info(m, i);
          v.entries.push_back({Access::key_of(m, i), Access::namespace_of(m, i),
                               canonical(*static_cast<const S*>(e.state)), e.entry_version,
                               e.state_version});
        }
      }
    }
    std::sort(v.entries.begin(), v.entries.end(), [](const auto& a, const auto& b) {
      return std::tie(a.key, a.ns) < std::tie(b.key, b.ns);
    });
    COWSTATE_ASSERT(v.entries.size() == m.size(), "I5", "a map's chains hold its size");
    out.maps.push_back(std::move(v));
  }
}

// The map snapshots `snapshot` took at its sync phase, and those it still holds.
inline void add_map_snapshots(CheckpointView& out, const BackendSnapshot& snapshot) {
  const CheckpointHeader& h = snapshot.header();
  for (std::int32_t g = h.range.start(); !h.range.empty() && g <= h.range.end(); ++g) {
    for (const BackendSnapshot::Section& s : snapshot.key_group(g)) {
      COWSTATE_ASSERT(s.state < h.states.size(), "C1", "a section of a registered state");
      const MapSnapshotId id{h.states[s.state].name, g};
      out.taken.push_back(id);
      if (!s.snapshot->released()) out.held.push_back(id);
    }
  }
}

}  // namespace cowstate::sim::detail
