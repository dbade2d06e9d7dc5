// ColdCache: the hot entries of a table's spilled key groups, kept in memory in front of the
// cold tier (spill_tier.h). Whole key groups are the unit of spill and load, but a key group
// holds hot and cold keys alike when keys are hashed uniformly; the cache keeps the hot
// entries of spilled key groups in memory, within a share of the budget.
//
// Layout
// ------
// Slots live in chunks of kChunkSlots that never move (a state handed out mutably stays put
// until the next call), indexed by (key, namespace) in a CowStateMap of slot numbers (the
// heap tier's own map: as fast a lookup, and exact accounting for free; it never takes a
// snapshot). A slot holds key, namespace, state, its key group and three bits: `referenced` (read
// or written since the clock hand last passed), `dirty` (newer than the cold tier) and
// `in_store` (the cold tier has a record of the key). Eviction is CLOCK (second chance); a
// dirty victim is written back first. So the cache is write-back: a counter updated on every
// record reaches LMDB once per eviction, not once per record.
//
// The owner (StateTable) flushes the dirty slots of a key group before it is loaded and of
// every key group before a checkpoint's read transaction begins, so both see every write.
//
// Memory
// ------
// bytes() is exact by the same rule as the maps' (state_memory.h): chunks, the index map's
// memory_bytes(), the free list, and the heap the slots' keys, namespaces and states own; a
// state handed out mutably is measured again before the count is read.
//
// Thread safety: the writer thread only.
//
// Invariants (docs/invariants.md)
//  SP7 A key is in the index iff a used slot holds it; every used slot is in the index once.
//  M1  bytes() equals recount_bytes().
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "cowstate/assert.h"
#include "cowstate/cow_state_map.h"
#include "cowstate/cow_state_map_access.h"
#include "cowstate/state_memory.h"

namespace cowstate {

template <class K, class N, class S>
class ColdCache {
 public:
  static constexpr std::size_t kChunkSlots = 32;
  struct Slot {
    K key{};
    N ns{};
    S state{};
    std::int32_t key_group = -1;
    std::uint32_t index = 0;  // its own position
    bool used = false;
    bool referenced = false;
    bool dirty = false;
    bool in_store = false;
  };

  // `limit_bytes`: eviction keeps the entries within what that many bytes hold at
  // entry_bytes() each (a slot, its index entry and bucket share), except that one always fits.
  explicit ColdCache(std::size_t limit_bytes = 0) : limit_(limit_bytes) {}
  void set_limit(std::size_t limit_bytes) noexcept { limit_ = limit_bytes; }
  std::size_t size() const noexcept { return index_.size(); }
  std::uint64_t hits() const noexcept { return hits_; }
  std::uint64_t misses() const noexcept { return misses_; }

  // The slot of (key, ns), marked referenced, or nullptr.
  [[gnu::always_inline]] Slot* find(const K& key, const N& ns) {
    heap_.settle();
    const std::uint32_t* i = index_.get(key, ns);
    if (i == nullptr) {
      ++misses_;
      return nullptr;
    }
    ++hits_;
    Slot& s = at(*i);
    s.referenced = true;
    return &s;
  }
  // Evicts while one more entry would not fit: write_back(slot) gets each dirty victim before
  // it goes. The owner calls it before it reads the cold tier for an entry to insert, so a
  // victim just read there is written back before the cold tier's cursor moves on.
  template <class W>
  void make_room(W&& write_back) {
    heap_.settle();
    while (index_.size() > 0 && index_.size() >= capacity()) evict_one(write_back);
  }
  // Inserts (key, ns) (absent), after make_room(write_back). REQUIRES: find(key, ns) ==
  // nullptr.
  template <class W>
  Slot& insert(const K& key, const N& ns, std::int32_t key_group, S state, bool dirty,
               bool in_store, W&& write_back) {
    make_room(write_back);
    const std::uint32_t i = take_slot();
    Slot& s = at(i);
    s.key = key;
    s.ns = ns;
    key_heap_ += StateHeapBytes<K>::of(s.key) + StateHeapBytes<N>::of(s.ns);
    s.state = std::move(state);
    s.key_group = key_group;
    s.used = true;
    s.referenced = true;
    s.dirty = dirty;
    s.in_store = in_store;
    heap_.on_new(s.state);
    const std::optional<std::uint32_t> old = index_.put_and_get_old(s.key, s.ns, i);
    COWSTATE_ASSERT(!old.has_value(), "SP7", "a key cached twice");
    return s;
  }
  // The caller may change s.state until its next call on the cache.
  void hand_out(Slot& s) noexcept { heap_.hand_out(&s.state); }
  void erase(Slot& s) {
    heap_.on_free_live(s.state);
    const bool held = index_.remove(s.key, s.ns);
    COWSTATE_ASSERT(held, "SP7", "erasing a slot the index does not hold");
    s.used = false;
    s.state = S{};
    key_heap_ -= StateHeapBytes<K>::of(s.key) + StateHeapBytes<N>::of(s.ns);
    s.key = K{};
    s.ns = N{};
    free_.push_back(s.index);
  }
  // fn(slot) for every used slot.
  template <class F>
  void for_each(F&& fn) {
    heap_.settle();
    for (std::uint32_t i = 0; i < slots_; ++i) {
      if (at(i).used) fn(at(i));
    }
  }

  std::size_t bytes() const noexcept {
    heap_.settle();
    return bytes_now();
  }
  // bytes(), measured from scratch (M1).
  std::size_t recount_bytes() const {
    std::size_t heap = 0;
    std::size_t used = 0;
    for (std::uint32_t i = 0; i < slots_; ++i) {
      const Slot& s = at(i);
      heap += StateHeapBytes<K>::of(s.key) + StateHeapBytes<N>::of(s.ns);
      if (!s.used) continue;
      heap += StateHeapBytes<S>::of(s.state);
      ++used;
    }
    COWSTATE_ASSERT(used == index_.size(), "SP7", "used slots and index differ");
    return chunk_bytes() + CowStateMapAccess::recount_memory(index_).bytes + heap;
  }

 private:
  using Index = CowStateMap<K, N, std::uint32_t>;
  // What one entry takes: its slot, its index entry, its share of the index's buckets (at
  // most 2 per entry at the load factor's low end) and of the free list.
  static std::size_t entry_bytes() noexcept {
    return sizeof(Slot) + CowStateMapAccess::entry_size<Index>() + 3 * sizeof(std::uint32_t);
  }
  std::size_t capacity() const noexcept { return limit_ / entry_bytes(); }

  Slot& at(std::uint32_t i) const noexcept { return chunks_[i / kChunkSlots][i % kChunkSlots]; }
  std::uint32_t take_slot() {
    if (!free_.empty()) {
      const std::uint32_t i = free_.back();
      free_.pop_back();
      return i;
    }
    if (slots_ == chunks_.size() * kChunkSlots) {
      chunks_.push_back(std::make_unique<Slot[]>(kChunkSlots));
    }
    at(slots_).index = slots_;
    return slots_++;
  }
  template <class W>
  void evict_one(W& write_back) {
    for (;;) {
      if (hand_ >= slots_) hand_ = 0;
      Slot& s = at(hand_++);
      if (!s.used) continue;
      if (s.referenced) {
        s.referenced = false;  // a second chance
        continue;
      }
      if (s.dirty) write_back(s);
      erase(s);
      return;
    }
  }
  std::size_t chunk_bytes() const noexcept {
    return chunks_.size() * kChunkSlots * sizeof(Slot) +
           chunks_.capacity() * sizeof(std::unique_ptr<Slot[]>) +
           free_.capacity() * sizeof(std::uint32_t);
  }
  std::size_t bytes_now() const noexcept {
    return chunk_bytes() + index_.memory_bytes() + heap_.live() + key_heap_;
  }

  std::size_t limit_;
  std::vector<std::unique_ptr<Slot[]>> chunks_;
  std::uint32_t slots_ = 0;  // slots handed out at least once
  std::vector<std::uint32_t> free_;
  Index index_;
  std::uint32_t hand_ = 0;
  std::size_t key_heap_ = 0;  // heap the slots' keys and namespaces own
  std::uint64_t hits_ = 0;
  std::uint64_t misses_ = 0;
  mutable StateHeapCounter<S> heap_;
};

}  // namespace cowstate
