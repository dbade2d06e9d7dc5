// CowStateMapAccess: the one door into CowStateMap internals, for tests, the simulator's
// checkers and the explain renderers. The public API does not grow for them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "cowstate/cow_state_map.h"

namespace cowstate {

struct CowStateMapAccess {
  // Everything about one entry that a copy-on-write check or a narration needs.
  struct EntryInfo {
    std::uint32_t index = 0;  // pool slot; 0 = absent
    std::uint32_t entry_version = 0;
    std::uint32_t state_version = 0;  // equals entry_version for inline states
    const void* state = nullptr;      // address of the state object
  };

  template <class Map>
  static std::size_t entry_size() {
    return sizeof(typename Map::Entry);
  }

  template <class Map>
  static EntryInfo info(const Map& m, std::uint32_t index) {
    const auto& e = m.at(index);
    EntryInfo r;
    r.index = index;
    r.entry_version = e.entry_version;
    if constexpr (Map::kInline) {
      r.state_version = e.entry_version;
      r.state = &e.state;
    } else {
      r.state_version = e.state_version;
      r.state = e.state;
    }
    return r;
  }

  // The live entry of (key, ns), without an incremental rehash step; index 0 if absent.
  template <class Map>
  static EntryInfo find(const Map& m, const typename Map::key_type& key,
                        const typename Map::namespace_type& ns) {
    const std::uint32_t hash = m.hash_(key, ns);
    for (const auto* t : {&m.primary_, &m.rehash_}) {
      if (t->empty()) continue;
      const std::uint32_t i = m.find_in(*t, Map::bucket_of(*t, hash), hash, key, ns, nullptr);
      if (i != 0) return info(m, i);
    }
    return EntryInfo{};
  }

  // Entry indices of one bucket's chain; table 0 = primary, 1 = rehash table.
  template <class Map>
  static std::vector<std::uint32_t> chain(const Map& m, int table, std::uint32_t bucket) {
    const auto& t = table == 0 ? m.primary_ : m.rehash_;
    std::vector<std::uint32_t> out;
    for (std::uint32_t i = t.at(bucket); i != 0; i = m.at(i).next) out.push_back(i);
    return out;
  }

  template <class Map>
  static std::uint32_t hash_of(const Map& m, const typename Map::key_type& key,
                               const typename Map::namespace_type& ns) {
    return m.hash_(key, ns);
  }
  template <class Map>
  static std::uint32_t rehash_index(const Map& m) {
    return m.rehash_index_;
  }
  template <class Map>
  static std::size_t rehash_capacity(const Map& m) {
    return m.rehash_.size();
  }
  template <class Map>
  static std::size_t primary_size(const Map& m) {
    return m.primary_size_;
  }
  template <class Map>
  static std::size_t rehash_size(const Map& m) {
    return m.rehash_size_;
  }
  // Retired items as they stand, without reclaiming.
  template <class Map>
  static std::size_t retired_entries(const Map& m) {
    return m.retired_entries_.size();
  }
  template <class Map>
  static std::size_t retired_states(const Map& m) {
    return m.retired_states_.size();
  }
  template <class Map>
  static std::size_t pool_slots(const Map& m) {
    return m.pool_.slots_allocated();
  }
  template <class Map>
  static std::vector<std::uint32_t> live_versions(const Map& m) {
    std::lock_guard<std::mutex> lock(m.mu_);
    return m.live_versions_;
  }
  template <class Snapshot>
  static std::size_t head_array_length(const Snapshot& s) {
    return s.heads_.size();
  }

  // Where a snapshot's head array lives (to see that the next snapshot reuses it).
  template <class Snapshot>
  static const std::uint32_t* head_array_data(const Snapshot& s) {
    return s.heads_.data();
  }

  // The bucket heads a snapshot copied at its start (pool slots, 0 = empty bucket).
  template <class Snapshot>
  static std::vector<std::uint32_t> snapshot_heads(const Snapshot& s) {
    return std::vector<std::uint32_t>(s.heads_.begin(), s.heads_.end());
  }

  // Pool slots a snapshot reaches through its heads and chains; stops after `limit` slots
  // so a corrupted chain cannot loop forever.
  template <class Snapshot>
  static std::vector<std::uint32_t> snapshot_slots(const Snapshot& s, std::size_t limit) {
    std::vector<std::uint32_t> out;
    for (std::uint32_t head : s.heads_) {
      for (std::uint32_t i = head; i != 0 && out.size() < limit; i = s.map_->at(i).next) {
        out.push_back(i);
      }
    }
    return out;
  }

  template <class Map>
  static const typename Map::key_type& key_of(const Map& m, std::uint32_t index) {
    return m.at(index).key;
  }
  template <class Map>
  static const typename Map::namespace_type& namespace_of(const Map& m, std::uint32_t index) {
    return m.at(index).ns;
  }
  template <class Map>
  static const std::vector<std::uint32_t>& free_list(const Map& m) {
    return m.pool_.free_list();
  }

  // mask[i] is true when pool slot i is on the free list.
  template <class Map>
  static std::vector<bool> free_slot_mask(const Map& m) {
    std::vector<bool> mask(m.pool_.slots_allocated() + 1, false);
    for (std::uint32_t i : m.pool_.free_list()) mask[i] = true;
    return mask;
  }
};

}  // namespace cowstate
