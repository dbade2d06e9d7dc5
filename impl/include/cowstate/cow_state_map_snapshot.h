// CowStateMapSnapshot: the frozen view of a CowStateMap at one version, the two ways to
// read it (a Cursor in bucket order, a Scan in pool-slot order) and its release. The
// copy-on-write rules that keep the view frozen, the invariants and the thread-safety
// contract are the map's (cowstate/cow_state_map.h), which includes this header after its
// own class; include that one.
#pragma once

#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cowstate/cow_state_map.h"
#include "cowstate/table_scan.h"

namespace cowstate {

// Where a boxed state keeps its contents apart from the box itself, or nullptr: what the
// snapshot scan prefetches for the entries it is about to visit. Overload for other types.
template <class S>
const void* state_payload(const S&) noexcept {
  return nullptr;
}
inline const void* state_payload(const std::string& s) noexcept { return s.data(); }
template <class T, class A>
const void* state_payload(const std::vector<T, A>& v) noexcept {
  return v.data();
}

// A frozen view of a CowStateMap at one version. Move-only. Iterate and release on any
// thread; release is idempotent and also happens on destruction.
// REQUIRES: the map outlives the snapshot.
template <class K, class N, class S, class Hash>
class CowStateMapSnapshot {
  using Map = CowStateMap<K, N, S, Hash>;

 public:
  struct EntryRef {
    const K& key;
    const N& ns;
    const S& state;
  };

  // Forward iteration over the frozen entries, bucket by bucket, prefetching ahead.
  class Cursor {
   public:
    Cursor() = default;
    explicit Cursor(const CowStateMapSnapshot* s) : snap_(s) { advance_bucket(0); }
    bool done() const noexcept { return current_ == 0; }
    // REQUIRES: !done(), for get(), at_chain_end() and next().
    EntryRef get() const {
      const auto& e = snap_->map_->at(current_);
      return EntryRef{e.key, e.ns, Map::state_ref(e)};
    }
    // True when the current entry is the last of its chain.
    bool at_chain_end() const { return snap_->map_->at(current_).next == 0; }
    void next() {
      const std::uint32_t n = snap_->map_->at(current_).next;
      if (n != 0) {
        current_ = n;
      } else {
        advance_bucket(bucket_ + 1);
      }
    }

   private:
    static constexpr std::uint32_t kPrefetchDistance = 16;
    void advance_bucket(std::size_t from) {
      const std::size_t span = snap_->bucket_span();
      for (std::size_t b = from; b < span; ++b) {
        if (b + kPrefetchDistance < span) {
          const std::uint32_t ahead = snap_->head(b + kPrefetchDistance);
          if (ahead != 0) __builtin_prefetch(&snap_->map_->at(ahead));
        }
        if (const std::uint32_t head = snap_->head(b); head != 0) {
          bucket_ = b;
          current_ = head;
          return;
        }
      }
      bucket_ = span;
      current_ = 0;
    }
    const CowStateMapSnapshot* snap_ = nullptr;
    std::size_t bucket_ = 0;
    std::uint32_t current_ = 0;
  };

  // Visits every frozen entry once in ascending pool-slot order rather than bucket order:
  // entries then come from nearby memory, which makes serializing a large snapshot several
  // times faster than chasing chains across the pool. The entries are the slots the
  // live-slot bitmap marked at the snapshot's start (I12), which the snapshot keeps through
  // its copy of the bitmap's directory (I13): neither the heads nor the chains are read. Ascending,
  // because boxed states were mostly allocated in slot order too and the hardware prefetchers
  // follow ascending strides through them, which a descending scan defeats (a string-state
  // checkpoint then writes several times slower). Move-only (it owns the bitmap).
  class Scan {
   public:
    Scan() = default;
    explicit Scan(const CowStateMapSnapshot* s) : map_(s->map_) {
      pending_.resize(s->live_.size());
      std::size_t entries = 0;
      for (std::size_t w = 0; w < pending_.size(); ++w) {
        pending_[w] = s->live_[w];
        entries += static_cast<std::size_t>(std::popcount(pending_[w]));
      }
      // Pairs with the size taken at the start: a bit the writer changed in a segment the
      // snapshot shares would show here as a count that differs.
      COWSTATE_ASSERT(entries == s->size_, "I12",
                      "the snapshot's live slots do not add up to its size");
#if defined(COWSTATE_MUTANTS) && COWSTATE_MUTANTS
      heads_.assign(pending_.size(), 0);
      for (std::size_t b = 0; b < s->bucket_span(); ++b) {
        const std::uint32_t head = s->head(b);
        if (head != 0) heads_[head / 64] |= std::uint64_t{1} << (head % 64);
      }
#endif
      if constexpr (!Map::kInline) fill_ring();
      advance();
    }
    bool done() const noexcept { return current_ == 0; }
    // REQUIRES: !done(), for get(), at_chain_end() and next().
    EntryRef get() const { return EntryRef{entry_->key, entry_->ns, Map::state_ref(*entry_)}; }
    // The current entry is the last of its chain.
    bool at_chain_end() const { return entry_->next == 0; }
#if defined(COWSTATE_MUTANTS) && COWSTATE_MUTANTS
    // The current entry is its bucket's head (mutant builds only).
    bool at_chain_head() const { return (heads_[current_ / 64] >> (current_ % 64)) & 1u; }
#endif
    void next() { advance(); }

   private:
    using Entry = typename Map::Entry;
    static_assert(EntryPool<Entry>::kRunSlots == 64,
                  "slots 1..63 of a bitmap word must be one contiguous run of the pool");
    // Boxed states: the scan discovers entries kAhead visits before it hands them out. A
    // discovered entry's box is prefetched at once, its payload (state_payload) kAhead / 2
    // visits later, so the two dependent misses of a boxed state (the box, then, say, a
    // string's buffer) are both in flight before the entry is visited. Only the snapshot's
    // own entries are read for this: the writer never writes to them while it lives (I3).
    static constexpr std::uint32_t kAhead = Map::kInline ? 1 : 16;
    // Moves to the next entry to visit: inline states straight from the bitmap, boxed
    // states from the ring of discovered entries.
    void advance() {
      if constexpr (Map::kInline) {
        discover(current_, entry_);
      } else {
        if (ring_size_ == 0) {
          current_ = 0;
          entry_ = nullptr;
          return;
        }
        const std::uint32_t at = ring_first_ % kAhead;
        current_ = ring_slot_[at];
        entry_ = ring_entry_[at];
        ++ring_first_;
        --ring_size_;
        fill_ring();
      }
    }
    // Discovers entries until kAhead are waiting (or the bitmap is exhausted).
    void fill_ring() {
      while (ring_size_ < kAhead) {
        std::uint32_t slot = 0;
        const Entry* e = nullptr;
        discover(slot, e);
        if (e == nullptr) return;
        const std::uint32_t at = (ring_first_ + ring_size_) % kAhead;
        ring_slot_[at] = slot;
        ring_entry_[at] = e;
        ++ring_size_;
        __builtin_prefetch(Map::state_box(*e));
        if (ring_size_ > kAhead / 2) {
          const Entry* half = ring_entry_[(ring_first_ + ring_size_ - 1 - kAhead / 2) % kAhead];
          if (const void* p = state_payload(Map::state_ref(*half))) __builtin_prefetch(p);
        }
      }
    }
    // The lowest slot still to discover (the bottom of word_, else of the next non-empty
    // word) and its entry; slot 0 and nullptr when there is none.
    void discover(std::uint32_t& slot, const Entry*& entry) {
      while (word_ == 0) {
        if (next_word_ == pending_.size()) {
          slot = 0;
          entry = nullptr;
          return;
        }
        word_ = pending_[next_word_++];
        run_base_ = 0;
      }
      const std::uint32_t bit = static_cast<std::uint32_t>(__builtin_ctzll(word_));
      word_ &= word_ - 1;
      slot = static_cast<std::uint32_t>((next_word_ - 1) * 64) + bit;
      // The entry's address is computed once per entry (get() and next() reuse it): by
      // the pool's lookup for the first of slots 64w + 1 .. 64w + 63 visited, then from
      // that one's address, as they are contiguous in the pool (EntryPool::kRunSlots).
      // Slot 64w may lie in the previous chunk and takes the lookup. (No pool address is
      // below 64 entries, so run_base_ = 0 means "not known yet".) The entries themselves
      // need no software prefetch: the hardware's follows them upwards (boxed states are
      // prefetched by fill_ring).
      if (bit != 0 && run_base_ != 0) [[likely]] {
        entry = reinterpret_cast<const Entry*>(run_base_ + bit * sizeof(Entry));
      } else {
        entry = &map_->at(slot);
        if (bit != 0) run_base_ = reinterpret_cast<std::uintptr_t>(entry) - bit * sizeof(Entry);
      }
    }
    const Map* map_ = nullptr;
    std::vector<std::uint64_t> pending_;  // bit i: slot i holds an entry of the snapshot
#if defined(COWSTATE_MUTANTS) && COWSTATE_MUTANTS
    std::vector<std::uint64_t> heads_;
#endif
    // word_ holds the slots of word next_word_ - 1 still to visit (above current_); the
    // words from next_word_ on are all still to visit.
    std::size_t next_word_ = 0;
    std::uint64_t word_ = 0;
    std::uintptr_t run_base_ = 0;  // where slot 64w would be if it were in the run's chunk
    std::uint32_t current_ = 0;
    const Entry* entry_ = nullptr;  // &map_->at(current_), or null when done
    // Boxed states: the discovered entries waiting to be visited, oldest first.
    std::array<std::uint32_t, kAhead> ring_slot_{};
    std::array<const Entry*, kAhead> ring_entry_{};
    std::uint32_t ring_first_ = 0;
    std::uint32_t ring_size_ = 0;
  };

  CowStateMapSnapshot() = default;
  CowStateMapSnapshot(CowStateMapSnapshot&& o) noexcept
      : map_(std::exchange(o.map_, nullptr)),
        version_(o.version_),
        size_(o.size_),
        primary_(std::move(o.primary_)),
        rehash_(std::move(o.rehash_)),
        rehash_index_(o.rehash_index_),
        live_(std::move(o.live_)),
        changes_(std::move(o.changes_)),
        released_(o.released_.load(std::memory_order_relaxed)) {}
  CowStateMapSnapshot& operator=(CowStateMapSnapshot&& o) noexcept {
    if (this != &o) {
      release();
      map_ = std::exchange(o.map_, nullptr);
      version_ = o.version_;
      size_ = o.size_;
      primary_ = std::move(o.primary_);
      rehash_ = std::move(o.rehash_);
      rehash_index_ = o.rehash_index_;
      live_ = std::move(o.live_);
      changes_ = std::move(o.changes_);
      released_.store(o.released_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    }
    return *this;
  }
  ~CowStateMapSnapshot() { release(); }

  std::uint32_t version() const noexcept { return version_; }
  // Entries in the frozen view.
  std::size_t size() const noexcept { return size_; }
  bool valid() const noexcept { return map_ != nullptr && !released(); }
  bool released() const noexcept { return released_.load(std::memory_order_acquire); }
  // REQUIRES: valid(), for cursor(), scan() and for_each(); the cursor or scan is used while
  // the snapshot stays valid.
  Cursor cursor() const {
    COWSTATE_ASSERT(valid(), "I10", "iterating a released snapshot");
    return Cursor(this);
  }
  Scan scan() const {
    COWSTATE_ASSERT(valid(), "I10", "scanning a released snapshot");
    return Scan(this);
  }

  template <class F>
  void for_each(F&& fn) const {
    for (Cursor c = cursor(); !c.done(); c.next()) {
      EntryRef r = c.get();
      fn(r.key, r.ns, r.state);
    }
  }

  // What changed since the base of the map's change tracking (cowstate/change_log.h): a
  // snapshot of a tracking map has a base once a checkpoint of it completed before this
  // snapshot started. REQUIRES: valid(), for the for_each calls; has_change_base() for them.
  bool has_change_base() const noexcept { return changes_.has_base; }
  std::uint32_t change_base() const noexcept { return changes_.base; }
  // At most this many entries and tombstones in the delta (the captured slots and
  // tombstones, an entry changed in several intervals counted in each): O(intervals), for
  // deciding at the sync phase between a delta and a full write.
  std::size_t change_bound() const noexcept {
    std::size_t n = 0;
    for (const auto& r : changes_.records) n += r->slots.size() + r->tombstones.size();
    return n;
  }
  // Calls fn(key, ns, state) once for each entry of the snapshot that was created or
  // changed since the base snapshot started, in ascending pool-slot order.
  template <class F>
  void for_each_changed(F&& fn) const {
    COWSTATE_ASSERT(valid(), "I10", "reading the changes of a released snapshot");
    COWSTATE_ASSERT(has_change_base(), "REQUIRES", "changes of a snapshot without a base");
    // The captured slots as a bitmap, and'ed with the snapshot's own bitmap word by word:
    // only the snapshot's slots are read (any other may be the writer's, I3), each once,
    // in ascending order, at the cost of a pass over the bitmap rather than a sort.
    // The bitmap reaches the word of the highest captured slot only: the snapshot's own
    // bitmap is sized in whole segments, mostly beyond the pool's slots. Those segments lie
    // apart in memory, so they are all fetched while the captured slots are marked.
    std::size_t captured = 0;
    std::size_t words = 0;
    for (const auto& r : changes_.records) {
      captured += r->slots.size();
      for (const std::uint32_t slot : r->slots) {
        words = std::max(words, std::size_t{slot >> 6} + 1);
      }
    }
    words = std::min(words, live_.size());
    for (std::size_t w = 0; w < words; w += std::size_t{1} << live_.shift) {
      __builtin_prefetch(live_.dir[w >> live_.shift]);
    }
    std::vector<std::uint64_t> marked(words, 0);
    for (const auto& r : changes_.records) {
      for (const std::uint32_t slot : r->slots) {
        const std::size_t w = slot >> 6;
        if (w < words) marked[w] |= std::uint64_t{1} << (slot & 63);
      }
    }
    std::vector<std::uint32_t> slots;
    slots.reserve(captured);
    for (std::size_t w = 0; w < words; ++w) {
      if (marked[w] == 0) continue;
      std::uint64_t live = live_[w];
      // Planted bug: the captured slots are read as the live map holds them now, so a slot
      // refilled after the snapshot started brings a later write into the delta.
      if (COWSTATE_MUTANT(delta_after_snapshot)) {
        live = w < map_->live_slots_.size() ? map_->live_slots_[w] : 0;
      }
      for (std::uint64_t bits = marked[w] & live; bits != 0; bits &= bits - 1) {
        slots.push_back(static_cast<std::uint32_t>(w * 64) +
                        static_cast<std::uint32_t>(std::countr_zero(bits)));
      }
    }
    // The entries lie scattered over the pool: each is fetched a few visits ahead, the
    // first ones all at once before the loop so that they too are in flight together, and
    // by both ends, for an entry that straddles two cache lines.
    constexpr std::size_t kAhead = 24;
    auto fetch = [this](std::uint32_t slot) {
      const auto* e = reinterpret_cast<const char*>(&map_->at(slot));
      __builtin_prefetch(e);
      __builtin_prefetch(e + sizeof(typename Map::Entry) - 1);
    };
    for (std::size_t i = 0; i < std::min(kAhead, slots.size()); ++i) fetch(slots[i]);
    for (std::size_t i = 0; i < slots.size(); ++i) {
      if (i + kAhead < slots.size()) fetch(slots[i + kAhead]);
      const auto& e = map_->at(slots[i]);
      if (e.entry_version < changes_.base) continue;
      COWSTATE_YIELD("map.delta_entry");
      fn(e.key, e.ns, Map::state_ref(e));
    }
  }
  // Calls fn(key, ns) for each key removed since the base snapshot started (a key removed
  // and put again is also among the changed entries; applying a delta removes first).
  template <class F>
  void for_each_tombstone(F&& fn) const {
    COWSTATE_ASSERT(valid(), "I10", "reading the changes of a released snapshot");
    COWSTATE_ASSERT(has_change_base(), "REQUIRES", "changes of a snapshot without a base");
    for (const auto& r : changes_.records) {
      for (const auto& t : r->tombstones) fn(t.key, t.ns);
    }
  }

  // Idempotent; any thread. After it returns the snapshot must not be iterated.
  void release() {
    if (map_ == nullptr || released_.exchange(true, std::memory_order_acq_rel)) return;
    map_->release_snapshot(version_);
  }

 private:
  friend class CowStateMap<K, N, S, Hash>;
  friend struct CowStateMapAccess;
  using TableView = typename Map::Table::View;
  using LiveView = typename Map::LiveSlots::View;
  CowStateMapSnapshot(Map* map, std::uint32_t version, std::size_t size, TableView primary,
                      TableView rehash, std::uint32_t rehash_index, LiveView live)
      : map_(map),
        version_(version),
        size_(size),
        primary_(std::move(primary)),
        rehash_(std::move(rehash)),
        rehash_index_(rehash_index),
        live_(std::move(live)) {
    COWSTATE_ASSERT(rehash_index_ == 0 || rehash_.size() == primary_.size() * 2, "I8",
                    "a snapshot's rehash directory not twice its primary");
  }

  // The buckets as the snapshot sees them, flattened: old-table buckets
  // [rehash_index, capacity), then the new table's buckets [0, rehash_index) and
  // [capacity, capacity + rehash_index), which old buckets [0, rehash_index) moved to (I9).
  std::size_t bucket_span() const noexcept { return primary_.size() + rehash_index_; }
  std::uint32_t head(std::size_t j) const noexcept {
    const std::size_t cap = primary_.size();
    if (j < cap - rehash_index_) return primary_[rehash_index_ + j];
    if (j < cap) return rehash_[j - (cap - rehash_index_)];
    return rehash_[j];
  }

  Map* map_ = nullptr;
  std::uint32_t version_ = 0;
  std::size_t size_ = 0;
  // Copies of the map's directories at the start; the segments they point to are never
  // written while the snapshot is live (I13).
  TableView primary_;
  TableView rehash_;  // empty unless a rehash was in flight
  std::uint32_t rehash_index_ = 0;
  LiveView live_;  // the live-slot bitmap: bit i, slot i holds one of the snapshot's entries
  typename ChangeLog<K, N>::Captured changes_;  // empty unless the map tracks changes
  std::atomic<bool> released_{false};
};

}  // namespace cowstate
