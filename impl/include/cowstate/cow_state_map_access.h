// CowStateMapAccess: the one door into CowStateMap internals, for tests, the simulator's
// checkers and the explain renderers. The public API does not grow for them.
#pragma once

#include <atomic>
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
    COWSTATE_ASSERT(bucket < t.size(), "REQUIRES", "a chain of a bucket outside its table");
    std::vector<std::uint32_t> out;
    for (std::uint32_t i = t[bucket]; i != 0; i = m.at(i).next) out.push_back(i);
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
  // Buckets a snapshot sees: the primary capacity at its start plus, during a rehash,
  // the rehash index (the moved buckets' two halves in the new table) (I9).
  template <class Snapshot>
  static std::size_t snapshot_bucket_span(const Snapshot& s) {
    return s.bucket_span();
  }

  // The bucket heads a snapshot sees, flattened as Snapshot::head orders them: old-table
  // buckets [rehash_index, capacity), then the new table's [0, rehash_index) and
  // [capacity, capacity + rehash_index) (pool slots, 0 = empty bucket).
  template <class Snapshot>
  static std::vector<std::uint32_t> snapshot_heads(const Snapshot& s) {
    std::vector<std::uint32_t> out(s.bucket_span());
    for (std::size_t j = 0; j < out.size(); ++j) out[j] = s.head(j);
    return out;
  }

  // The head of bucket b of table t (0 = primary, 1 = rehash table) as snapshot s sees it:
  // 0 for an old-table bucket that had moved, and for the rehash table of a snapshot taken
  // with no rehash in flight.
  template <class Snapshot>
  static std::uint32_t snapshot_head(const Snapshot& s, int table, std::size_t b) {
    if (table == 0) return b >= s.rehash_index_ && b < s.primary_.size() ? s.primary_[b] : 0;
    return b < s.rehash_.size() ? s.rehash_[b] : 0;
  }

  // Pool slots a snapshot reaches through its heads and chains; stops after `limit` slots
  // so a corrupted chain cannot loop forever.
  template <class Snapshot>
  static std::vector<std::uint32_t> snapshot_slots(const Snapshot& s, std::size_t limit) {
    std::vector<std::uint32_t> out;
    for (std::size_t j = 0; j < s.bucket_span(); ++j) {
      for (std::uint32_t i = s.head(j); i != 0 && out.size() < limit; i = s.map_->at(i).next) {
        out.push_back(i);
      }
    }
    return out;
  }

  // Head segments of table t (0 = primary, 1 = rehash table) and the version each was born
  // at; which segment a snapshot's directory shares with the map's.
  template <class Map>
  static std::vector<std::uint32_t> segment_births(const Map& m, int table) {
    const auto& t = table == 0 ? m.primary_ : m.rehash_;
    std::vector<std::uint32_t> out(t.segments());
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = t.birth(i);
    return out;
  }
  template <class Snapshot, class Map>
  static bool shares_segment(const Snapshot& s, const Map& m, int table, std::size_t segment) {
    const auto& mine = table == 0 ? s.primary_ : s.rehash_;
    const auto& theirs = table == 0 ? m.primary_ : m.rehash_;
    return segment < mine.dir.size() && segment < theirs.segments() &&
           mine.dir[segment] == theirs.segment(segment);
  }
  template <class Map>
  static std::size_t retired_segments(const Map& m) {
    return m.retired_segments_.size();
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

  // Map::memory_bytes() and retired_bytes() recounted from scratch: the pools' chunks walked,
  // every live and retired state measured (M1).
  struct MemoryRecount {
    std::size_t bytes = 0;
    std::size_t retired_bytes = 0;
  };
  template <class Map>
  static MemoryRecount recount_memory(const Map& m) {
    using S = typename Map::state_type;
    std::size_t live_heap = 0;
    std::size_t retired_heap = 0;
    if constexpr (!Map::kInline) {
      m.for_each([&live_heap](const auto&, const auto&, const S& s) {
        live_heap += StateHeapBytes<S>::of(s);
      });
      for (const auto& r : m.retired_states_) retired_heap += StateHeapBytes<S>::of(*r.state);
    }
    MemoryRecount c;
    std::size_t retired_segments = 0;
    for (const auto& r : m.retired_segments_) retired_segments += r.bytes;
    c.bytes = m.pool_.bytes_recounted() + m.segment_bytes().live + retired_segments +
              m.retired_entries_.capacity() * sizeof(typename Map::RetiredEntry) +
              m.retired_states_.capacity() * sizeof(typename Map::RetiredState) +
              m.retired_segments_.capacity() * sizeof(typename Map::RetiredSegment) + live_heap +
              retired_heap + m.changes_.recount_bytes();
    if constexpr (!Map::kInline) c.bytes += m.boxes_.bytes_recounted();
    c.retired_bytes = m.retired_entries_.size() * sizeof(typename Map::Entry) +
                      m.retired_states_.size() * (Map::kInline ? 0 : sizeof(S)) + retired_segments +
                      retired_heap;
    return c;
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
