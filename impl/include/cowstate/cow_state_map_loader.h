// CowStateMap::Loader: fills an empty map from entries known to arrive once each (a
// restore), without a lookup per entry. The map's header includes this one after its own
// class; include that one.
//
// An entry goes into the next pool slot, so a restored map's entries lie in the order they
// came. finish() then links each at the head of its bucket's chain: the only random access
// per entry is one bucket head (and a byte beside it), and no load waits on another, where
// put() walks the chain it inserts into. Keys are compared only where the byte says the
// chain may hold the entry's hash. The first entry (in add order) whose key an earlier one
// had is the one reported, as put() would have met it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "cowstate/assert.h"
#include "cowstate/cow_state_map.h"
#include "cowstate/hooks.h"

namespace cowstate {

template <class K, class N, class S, class H>
class CowStateMap<K, N, S, H>::Loader {
 public:
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;
  ~Loader() {
    if (!finished_) discard();
  }

  // More entries than load(count) sized the table for are fine: they fill it further.
  void add(const K& key, const N& ns, S state) {
    COWSTATE_YIELD("map.insert_new");
    const std::uint32_t hash = map_.hash_(key, ns);
    const std::uint32_t idx = map_.emplace_entry(hash, key, ns, std::move(state), 0, 0);
    COWSTATE_ASSERT(idx == hashes_.size(), "I12", "a loaded entry off the pool's next slot");
    hashes_.push_back(hash);
    ++map_.primary_size_;
  }

  // Links the chains. Returns the position (from 0, in add order) of the first entry whose
  // key and namespace an earlier one had, or nullopt when every entry was distinct. On a
  // duplicate the map is left empty.
  std::optional<std::size_t> finish() {
    COWSTATE_ASSERT(!finished_, "REQUIRES", "finish() called twice");
    finished_ = true;
    const std::optional<std::size_t> duplicate = link();
    if (duplicate) discard();
    return duplicate;
  }

 private:
  friend class CowStateMap;
  Loader(CowStateMap& map, std::size_t count) : map_(map) {
    hashes_.reserve(count + 1);
    hashes_.push_back(0);  // slot 0, the null index
  }

  // Puts every entry at the head of its chain, in slot order, and returns the position of
  // the first one whose key its chain already holds. The loop is short and no iteration
  // waits on another's bucket load, so many are in flight at once; the buckets a few
  // entries ahead are prefetched. Beside each bucket, a byte records which eighths of the
  // hash space its chain's hashes came from: only an entry whose eighth is already there
  // walks the chain to compare keys.
  std::optional<std::size_t> link() {
    constexpr std::uint32_t kAhead = 16;
    Table& t = map_.primary_;
    const std::uint32_t mask = map_.primary_mask_;
    const auto n = static_cast<std::uint32_t>(hashes_.size());
    std::vector<std::uint8_t> eighths(t.size(), 0);
    for (std::uint32_t i = 1; i < n; ++i) {
      if (i + kAhead < n) {
        const std::uint32_t ahead = hashes_[i + kAhead] & mask;
        __builtin_prefetch(t.address(ahead), 1);
        __builtin_prefetch(&eighths[ahead], 1);
      }
      const std::uint32_t hash = hashes_[i];
      const std::uint32_t b = hash & mask;
      const auto eighth = static_cast<std::uint8_t>(1u << (hash >> 29));
      Entry& e = map_.at(i);
      if ((eighths[b] & eighth) != 0 && !COWSTATE_MUTANT(load_skips_distinct_check)) [[unlikely]] {
        for (std::uint32_t j = t[b]; j != 0; j = map_.at(j).next) {
          if (matches(map_.at(j), hash, e.key, e.ns)) return i - 1;
        }
      }
      eighths[b] |= eighth;
      e.next = COWSTATE_MUTANT(load_drops_chain_tail) ? 0 : t[b];
      *t.address_for_write(b) = i;  // no snapshot was ever taken (load's REQUIRES)
    }
    return std::nullopt;
  }

  // Frees every loaded entry: the map is empty again, as before load().
  void discard() {
    for (std::uint32_t i = 1; i < hashes_.size(); ++i) {
      if constexpr (!kInline) {
        map_.heap_.on_free_live(*map_.at(i).state);
        map_.free_state(map_.at(i).state);
      }
      map_.mark_vacant(i, 0);
      map_.free_entry(i);
    }
    map_.reset_primary(map_.primary_cap());
    map_.primary_size_ = 0;
  }

  CowStateMap& map_;
  std::vector<std::uint32_t> hashes_;  // by pool slot
  bool finished_ = false;
};

template <class K, class N, class S, class H>
typename CowStateMap<K, N, S, H>::Loader CowStateMap<K, N, S, H>::load(std::size_t count) {
  COWSTATE_ASSERT(pool_.slots_allocated() == 0 && map_version_ == 0, "REQUIRES",
                  "loading into a map that held an entry or took a snapshot");
  // A table the entries fill to at most 0.75 (Flink's growth point), within the bounds.
  const std::uint64_t want = std::min<std::uint64_t>(count + count / 3 + 1, max_capacity_);
  const std::uint32_t cap =
      std::clamp(round_pow2(static_cast<std::uint32_t>(want)), min_capacity_, max_capacity_);
  if (cap != primary_cap()) reset_primary(cap);
  return Loader(*this, count);
}

}  // namespace cowstate
