// CowStateMap: a chained hash map from (key, namespace) to state with copy-on-write
// snapshots, after Apache Flink's CopyOnWriteStateMap.
//
// Layout
// ------
// Entries live in an EntryPool (cowstate/entry_pool.h) and are named by 32-bit indices
// (0 = none), so a bucket costs 4 bytes and an entry for (u64, i32) -> i64 costs 32.
// The table is an array of bucket heads held in segments behind a small directory
// (cowstate/segment_table.h); each bucket is a singly linked chain. An entry
// holds key, namespace, state, next, entry_version, for boxed states state_version, and for
// keys or namespaces wider than a word (or not trivially copyable) the hash (kStoresHash). Small
// trivially copyable states are stored inline in the entry; other states are boxed (in the map's
// BoxPool, cowstate/box_pool.h, pointed to by the entry) so that copies of an entry share them.
// A bitmap beside the pool, segmented the same way, marks the slots holding live entries.
//
// Versions
// --------
// `map_version` [stateMapVersion] grows by one per snapshot start; the new value is that
// snapshot's version. H = highest_required_version [highestRequiredSnapshotVersion] is the
// largest live snapshot version, or 0. A snapshot at version v sees exactly the entries
// reachable from the bucket heads as they were at its start; all of them have
// entry_version < v.
//
// Snapshot start
// --------------
// Flink copies every bucket head at a snapshot's start. Here a snapshot copies only the
// directories: of the primary table, of the rehash table during a rehash (with the rehash
// index), and of the live-slot bitmap; at most 4096 pointers each, whatever the size.
// Every segment records the map version it was born at, and the writer never writes into
// a segment born before H: it copies the segment first (born at map_version; the original
// is retired like an entry, I13). So the segments a snapshot's directories point to stay
// as they were at its start. What this costs the writer: its first head write into each
// segment under a new snapshot copies the segment (16 KiB for 4Ki buckets), and the first
// change of each live-slot segment (4 KiB for 32Ki slots) likewise; a snapshot is then
// paid for across the writes that follow it rather than at its start.
//
// Copy-on-write rule
// ------------------
// An entry with entry_version < H may be reachable from a live snapshot and is never
// written again. To change it (its state, or its `next` because a later entry is removed)
// the writer copies the chain prefix from the bucket head up to it; the copies get
// entry_version = map_version and share boxed states with the originals. A boxed state
// with state_version < H is never mutated or handed out mutably; it is copied first.
// With no live snapshot (H = 0) nothing is ever copied: identity is preserved.
//
// Change tracking
// ---------------
// For incremental checkpoints a map may track its changes (track_changes(); the records
// and their rules are cowstate/change_log.h's): every insert, copy and in-place change
// records its slot once per interval between snapshot starts, and moves the entry's version
// to the map version (it is writable, so its version is at least H and stays so); every
// removal records a tombstone. A snapshot's start seals the interval's record, and the
// snapshot holds the records since the last completed checkpoint's snapshot (the base):
// its changed entries are its entries of version >= base among those slots.
// Untracked, a map records nothing and never changes a version in place.
//
// Incremental rehash
// ------------------
// When size exceeds 0.75 * capacity, a table of twice the capacity is allocated and every
// keyed operation (reads included) first moves whole buckets from the old table until at
// least 4 entries moved. Old-table buckets below `rehash_index` are empty; their entries
// live in the new table. Shared entries are copied as they move.
//
// Memory
// ------
// An entry, boxed state or segment that the writer unlinks or replaces while a live
// snapshot may still reach it is retired, not freed: it records its birth version b
// (entry_version / state_version / the segment's birth) and the map version r at
// retirement, and may be seen exactly by snapshots v with b < v <= r. It is freed once no such
// snapshot is live. Freeing happens on the writer thread, at its next operation after a release (or
// at once when the writer releases).
//
// Thread safety
// -------------
// One writer thread calls every non-const member except those marked "any thread".
// Snapshot handles may be iterated and released on any thread. H and a release sequence
// number share one atomic word: the writer reads it with acquire at the start of each
// operation, so everything a releasing thread read in its snapshot happens-before the
// writer reuses that memory. A stale H is never lower than the truth (only the writer
// raises it), so a stale read can only over-copy. Entries and segments reachable from a
// live snapshot are never written, so snapshot readers need no locks. `mu_` guards the set of live
// versions and is taken only at snapshot start, release and reclamation.
//
// Invariants (docs/invariants.md; cited by id in assertions and check_invariants())
// ----------
//  I1  map_version and snapshot versions only grow; live versions are distinct and <= map_version.
//  I2  H equals the largest live snapshot version, or 0 when none is live.
//  I3  No entry with entry_version < H is written.
//  I4  No boxed state with state_version < H is mutated or handed out mutably.
//  I5  primary_size + rehash_size equals the number of entries reachable from the tables.
//  I6  Rehash location: an entry sits in the bucket its hash selects in its table; old-table
//      buckets below rehash_index are empty.
//  I7  A key appears at most once in the live map; each entry's hash is hash(key, namespace).
//  I8  Capacities are powers of two within [min_capacity, max_capacity].
//  I9  A snapshot's directories cover every bucket of its start (capacity + rehash_index)
//      and its live-slot bitmap marks exactly its entries.
//  I10 Retired memory is unreachable from the live tables and is freed only when no live
//      snapshot v with b < v <= r remains; with no live snapshot nothing stays retired.
//  I11 Live entries own distinct boxed states; entry and state versions are <= map_version.
//  I12 Pool accounting: live + retired + free slots = slots ever allocated; the live-slot
//      bitmap marks exactly the live entries' slots.
//  I13 No segment (bucket heads, live-slot bitmap) born before H is written; it is copied
//      first, the copy born at map_version, the original retired as in I10.
//  I14 Tracking changes, every live entry of version v >= the base has its slot in
//      interval v's change record.
//  I15 Tracking changes, every key live at the base's snapshot and removed since has a
//      tombstone in a record from the base on.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cowstate/append_log.h"
#include "cowstate/assert.h"
#include "cowstate/box_pool.h"
#include "cowstate/change_log.h"
#include "cowstate/entry_pool.h"
#include "cowstate/hooks.h"
#include "cowstate/segment_table.h"
#include "cowstate/state_memory.h"
#include "cowstate/table_scan.h"

namespace cowstate {

// Capacity limits. All are rounded up to powers of two.
struct MapOptions {
  std::uint32_t initial_capacity = 128;
  std::uint32_t min_capacity = 4;
  std::uint32_t max_capacity = 1u << 30;
  // Track changes from construction on (track_changes()): what a backend sets for every
  // map it creates when it writes incremental checkpoints.
  bool track_changes = false;
};

namespace detail {
// MurmurHash3's 64-bit finalizer: every input bit affects every output bit.
constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

}  // namespace detail

// Default composite hash of (key, namespace), as Flink's bitMix(keyHash ^ nsHash).
template <class K, class N>
struct DefaultHash {
  std::uint32_t operator()(const K& key, const N& ns) const noexcept {
    const std::uint64_t k = static_cast<std::uint64_t>(std::hash<K>{}(key));
    const std::uint64_t n = static_cast<std::uint64_t>(std::hash<N>{}(ns));
    return static_cast<std::uint32_t>(detail::mix64(k ^ (n * 0x9e3779b97f4a7c15ULL)) >> 32);
  }
};

// Teaching and test policy: an integral key k in namespace n lands in bucket
// (k + n) mod capacity, so collisions and chains can be arranged by hand.
template <class K, class N>
struct IdentityHash {
  std::uint32_t operator()(const K& key, const N& ns) const noexcept {
    return static_cast<std::uint32_t>(key) + static_cast<std::uint32_t>(ns);
  }
};

// Whether a state type is stored inside the entry (copied with it) rather than boxed.
// Specialize to force either layout.
template <class S>
inline constexpr bool kInlineState = std::is_trivially_copyable_v<S> && sizeof(S) <= 16;

// What an incremental visitor's callback decides for one entry.
template <class S>
class VisitResult {
 public:
  static VisitResult keep() { return VisitResult(Kind::keep, std::nullopt); }
  static VisitResult remove() { return VisitResult(Kind::remove, std::nullopt); }
  static VisitResult replace(S state) { return VisitResult(Kind::replace, std::move(state)); }

  enum class Kind : std::uint8_t { keep, remove, replace };
  Kind kind() const noexcept { return kind_; }
  S& replacement() { return *replacement_; }

 private:
  VisitResult(Kind kind, std::optional<S> s) : kind_(kind), replacement_(std::move(s)) {}
  Kind kind_;
  std::optional<S> replacement_;
};

// Position of an incremental visitor; survives across calls and map mutations.
struct VisitCursor {
  std::uint8_t table = 0;  // 0: primary, 1: rehash table
  std::uint32_t bucket = 0;
};

struct CowStateMapAccess;  // the one friend: tests, simulator and explain renderers

template <class K, class N, class S, class Hash = DefaultHash<K, N>>
class CowStateMapSnapshot;

template <class K, class N, class S, class Hash = DefaultHash<K, N>>
class CowStateMap {
 public:
  static constexpr bool kInline = kInlineState<S>;
  using key_type = K;
  using namespace_type = N;
  using state_type = S;
  using Snapshot = CowStateMapSnapshot<K, N, S, Hash>;

  // REQUIRES: options.max_capacity <= 2^30 after rounding up to a power of two (I8).
  explicit CowStateMap(MapOptions options = {}, Hash hash = {});
  // REQUIRES: no snapshot is live (I10).
  ~CowStateMap();
  CowStateMap(const CowStateMap&) = delete;
  CowStateMap& operator=(const CowStateMap&) = delete;

  // Every keyed call below, reads included, is a writer call (it may take a rehash step).
  // REQUIRES: the writer thread; not from inside a for_each or visit_incremental callback.

  // The state of (key, ns), or nullptr. Never copies. Valid until the next writer call.
  [[gnu::always_inline]] const S* get(const K& key, const N& ns);
  // A state the caller may mutate in place, or nullptr. Copies it first when a live
  // snapshot may see it. Valid until the next writer call.
  S* get_mutable(const K& key, const N& ns);
  bool contains(const K& key, const N& ns);
  [[gnu::always_inline]] void put(const K& key, const N& ns, S state);
  std::optional<S> put_and_get_old(const K& key, const N& ns, S state);
  bool remove(const K& key, const N& ns);
  std::optional<S> remove_and_get_old(const K& key, const N& ns);
  // Flink's StateTransformationFunction, in one of two forms, told apart by fn's signature:
  //   S fn(const S* old_or_nullptr, const T& value)   puts the state fn returns; nothing
  //                                                   changes if fn throws;
  //   void fn(S& state, const T& value)               changes the state in place, as a
  //                                                   get_mutable would hand it out (copied
  //                                                   first when a live snapshot may see it);
  //                                                   an absent state starts as S{} and is
  //                                                   inserted only if fn returns; if fn
  //                                                   throws, what it changed stays.
  // REQUIRES: fn does not call the map; fn has exactly one of the two forms.
  template <class T, class F>
  void transform(const K& key, const N& ns, const T& value, F&& fn);

  std::size_t size() const noexcept { return primary_size_ + rehash_size_; }
  bool empty() const noexcept { return size() == 0; }

  // Calls fn(key, ns, state) for every live entry.
  // REQUIRES: fn does not modify the map.
  template <class F>
  void for_each(F&& fn) const;

  // Visits whole chains from `cursor` until at least `max_entries` entries were seen or
  // every bucket was scanned once; fn(key, ns, state) -> VisitResult<S>. Removals and
  // replacements go through remove()/put() after each chain, so copy-on-write applies.
  // Cycles forever over the map; returns the number of entries visited.
  // REQUIRES: the writer thread; fn does not call the map (it decides, the map applies).
  template <class F>
  std::size_t visit_incremental(VisitCursor& cursor, std::size_t max_entries, F&& fn);

  // Bulk loading, for restore. load(count) sizes the table for `count` entries, so that
  // none of them starts a rehash; the loader's add() puts each entry into the next pool
  // slot without looking for its key, and finish() links the chains and then finds a
  // (key, namespace) given twice, comparing hashes kept beside the chains before keys.
  // A duplicate, or a loader dropped before finish(), leaves the map empty.
  // REQUIRES: the writer thread; the map never held an entry nor took a snapshot.
  class Loader;
  Loader load(std::size_t count);

  // Starts a snapshot: bumps the map version and copies the directories of the head tables
  // and of the live-slot bitmap (at most 4096 pointers each); no segment is copied.
  // REQUIRES: the writer thread; fewer than 2^32 - 2 snapshots over the map's life (I1).
  Snapshot snapshot();

  // Change tracking, for incremental checkpoints (cowstate/change_log.h): from this call on,
  // the map records what it creates, changes and removes, and each snapshot captures what
  // changed since the base. The first snapshot after it has no base (its delta is all of it).
  // REQUIRES: the writer thread; not yet tracking.
  void track_changes();
  bool tracks_changes() const noexcept { return changes_.on(); }
  // The checkpoint of snapshot `version` completed: later snapshots' deltas start from it
  // (unless a newer one completed already). A checkpoint that fails or is cancelled calls
  // nothing. REQUIRES: the writer thread; tracking; `version` a snapshot's version.
  void checkpoint_completed(std::uint32_t version) { changes_.complete(version); }
  // Bytes of the change records the map holds (snapshots may hold sealed ones longer).
  std::size_t change_log_bytes() const noexcept { return changes_.bytes(); }

  // Writer-side: frees what released snapshots no longer need; returns the entries and
  // boxed states that stay retired (segments: segment_bytes().retired).
  std::size_t retired_count();

  // Bytes of the segments the writer's tables hold (bucket heads of both tables, the
  // live-slot bitmap, with their directories) and of the segments retired for live
  // snapshots. O(1). Writer thread.
  struct SegmentBytes {
    std::size_t live = 0;
    std::size_t retired = 0;
  };
  SegmentBytes segment_bytes() const noexcept {
    return {primary_.bytes() + rehash_.bytes() + live_slots_.bytes(), retired_segment_bytes_};
  }

  // Bytes held by the map: entry slabs, segments (live and retired), the boxed states'
  // chunks and what the states own on the heap (StateHeapBytes, live and retired), the
  // change log, and bookkeeping. O(1). Writer thread.
  std::size_t memory_bytes() const noexcept {
    heap_.settle();
    const SegmentBytes segments = segment_bytes();
    std::size_t bytes = pool_.bytes_reserved() + segments.live + segments.retired +
                        retired_entries_.capacity() * sizeof(RetiredEntry) +
                        retired_states_.capacity() * sizeof(RetiredState) +
                        retired_segments_.capacity() * sizeof(RetiredSegment) + heap_.live() +
                        heap_.retired() + changes_.bytes();
    if constexpr (!kInline) bytes += boxes_.bytes_reserved();
    return bytes;
  }
  // The part of memory_bytes() only live snapshots need: retired entries, boxed states and
  // segments, and the heap the retired states own. O(1). Writer thread.
  std::size_t retired_bytes() const noexcept {
    heap_.settle();
    return retired_entries_.size() * sizeof(Entry) +
           retired_states_.size() * (kInline ? 0 : sizeof(S)) + retired_segment_bytes_ +
           heap_.retired();
  }

  std::uint32_t map_version() const noexcept { return map_version_; }
  // Any thread.
  std::uint32_t highest_required_version() const noexcept {
    return low32(sync_.load(std::memory_order_acquire));
  }
  std::uint32_t capacity() const noexcept { return primary_cap(); }
  bool rehashing() const noexcept { return !rehash_.empty(); }

  // Deep O(n) check of every invariant. On failure describes the first broken one, by id,
  // in *why (or on stderr when why is null) and returns false.
  bool check_invariants(std::string* why = nullptr) const;

 private:
  friend struct CowStateMapAccess;
  friend class CowStateMapSnapshot<K, N, S, Hash>;

  using StateSlot = std::conditional_t<kInline, S, S*>;
  struct NoStateVersion {};
  // Keys and namespaces of at most a word each, trivially copied, are compared outright and
  // hashed again where a rehash needs the hash: storing it would cost an entry 4 bytes (8
  // with padding: a TTL'd int64 value's entry is 32 bytes, one half cache line, instead of
  // 40, which straddles lines). Other keys keep their hash beside them (Flink's `hash`).
  static constexpr bool kStoresHash = !(std::is_trivially_copyable_v<K> && sizeof(K) <= 8 &&
                                        std::is_trivially_copyable_v<N> && sizeof(N) <= 8);
  struct NoHash {
    NoHash() = default;
    explicit NoHash(std::uint32_t) {}
  };
  using StoredHash = std::conditional_t<kStoresHash, std::uint32_t, NoHash>;
  struct Entry {
    K key;
    StateSlot state;
    [[no_unique_address]] N ns;
    std::uint32_t next;
    [[no_unique_address]] StoredHash hash;
    std::uint32_t entry_version;
    [[no_unique_address]] std::conditional_t<kInline, NoStateVersion, std::uint32_t> state_version;
  };
  // The hash of an entry's key and namespace: stored, or computed again (kStoresHash).
  std::uint32_t hash_of(const Entry& e) const {
    if constexpr (kStoresHash) {
      return e.hash;
    } else {
      return hash_(e.key, e.ns);
    }
  }
  // Reclaims that free at least this many entries (and a sixteenth of the pool) reorder the
  // free list (EntryPool::order_free_list); small ones leave it as it is.
  static constexpr std::size_t kOrderFreeListMin = 4096;
  // The birth version is kept here, not read back from the entry, so that reclamation
  // does not touch the retired entries' memory.
  struct RetiredEntry {
    std::uint32_t index;
    std::uint32_t birth;
    std::uint32_t retired_at;
  };
  struct RetiredState {
    S* state;
    std::uint32_t birth;
    std::uint32_t retired_at;
  };
  // A retired segment of a head table or of the live-slot bitmap, as retired entries.
  struct RetiredSegment {
    void* segment;
    std::uint32_t bytes;
    std::uint32_t birth;
    std::uint32_t retired_at;
  };
  using Table = SegmentTable<std::uint32_t>;
  static constexpr unsigned kLiveSlotsShift = 9;  // 512 words: 32Ki slots, 4 KiB a segment
  // Bit s of word s / 64: pool slot s holds a live entry (reachable from the tables).
  using LiveSlots = SegmentTable<std::uint64_t, kLiveSlotsShift>;

  static std::uint32_t low32(std::uint64_t w) noexcept { return static_cast<std::uint32_t>(w); }
  static std::uint32_t high32(std::uint64_t w) noexcept {
    return static_cast<std::uint32_t>(w >> 32);
  }
  static std::uint64_t pack(std::uint32_t release_seq, std::uint32_t h) noexcept {
    return (std::uint64_t{release_seq} << 32) | h;
  }

  // The copy-on-write decisions, in one place each (I3, I4).
  static bool must_copy_entry(std::uint32_t entry_version, std::uint32_t h) noexcept {
    if (COWSTATE_MUTANT(entry_version_le)) return entry_version <= h;
    return entry_version < h;
  }
  // Whether entry `e` must be copied before it is written: must_copy_entry, except under
  // the planted bug that writes shared entries in place.
  [[gnu::always_inline]] static bool must_copy_before_write(const Entry& e,
                                                            std::uint32_t h) noexcept {
    return must_copy_entry(e.entry_version, h) && !COWSTATE_MUTANT(skip_chain_prefix_copy);
  }
  static bool must_copy_state(std::uint32_t state_version, std::uint32_t h) noexcept {
    if (COWSTATE_MUTANT(state_version_le)) return state_version <= h;
    return state_version < h;
  }
  // A segment born before H may be in a live snapshot's directory (I13).
  static bool must_copy_segment(std::uint32_t birth, std::uint32_t h) noexcept { return birth < h; }

  // Element i of a segmented table (bucket heads, live-slot words) for writing: its segment
  // is copied first when a live snapshot may share it (I13). The birth is compared here
  // rather than through writable_or_null, whose null answer would cost every write a test.
  template <class Tab>
  [[gnu::always_inline]] typename Tab::value_type& writable_at(Tab& t, std::size_t i,
                                                               std::uint32_t h) {
    if (!must_copy_segment(t.birth(i >> t.shift()), h)) [[likely]]
      return *t.address_for_write(i);
    return *copy_segment_for_write(t, i, h);
  }
  std::uint32_t& head_ref(Table& t, std::uint32_t b, std::uint32_t h) {
    return writable_at(t, b, h);
  }
  // writable_at's copy: replaces the segment holding element i by a copy born at the map
  // version, retires the original, and returns element i of the copy.
  template <class Tab>
  [[gnu::noinline]] typename Tab::value_type* copy_segment_for_write(Tab& t, std::size_t i,
                                                                     std::uint32_t h);
  // Retires or frees a segment a table no longer holds, as entries are (I10, I13).
  void dispose_segment(void* segment, std::size_t bytes, std::uint32_t birth, std::uint32_t h);
  void free_segment(void* segment, std::size_t bytes) noexcept;
  // Buckets per head segment, as a shift: a quarter of a table up to 16Ki buckets (so even
  // the simulator's tables of a few buckets have several segments), 4Ki buckets from there,
  // and more past 2^24 buckets so that a directory, what a snapshot start copies, stays at
  // most 4096 pointers.
  static unsigned head_segment_shift(std::uint32_t cap) noexcept {
    const unsigned log = static_cast<unsigned>(std::countr_zero(cap));
    if (log <= 14) return log >= 2 ? log - 2 : 0;
    return std::max(12u, log - 12);
  }
  // The live-slot bitmap (I12): slot `slot` holds a live entry, or no longer does. The
  // bitmap covers every slot the pool has allocated (slots_allocated()), free ones included:
  // it grows when a slot past it is marked live or put on the free list (make_room_and_copy).
  [[gnu::always_inline]] void mark_live(std::uint32_t slot, std::uint32_t h) {
    const std::size_t w = std::size_t{slot} >> 6;
    if (w >= live_slots_.size()) [[unlikely]]
      grow_live_slots(w);
    mark_live_covered(slot, h);
  }
  // mark_live of a slot the bitmap covers already: one taken from the pool's free list.
  [[gnu::always_inline]] void mark_live_covered(std::uint32_t slot, std::uint32_t h) {
    const std::size_t w = std::size_t{slot} >> 6;
    COWSTATE_DEBUG_ASSERT(w < live_slots_.size(), "I12", "a free slot past the live-slot bitmap");
    writable_at(live_slots_, w, h) |= std::uint64_t{1} << (slot & 63);
  }
  [[gnu::always_inline]] void mark_vacant(std::uint32_t slot, std::uint32_t h) {
    const std::size_t w = std::size_t{slot} >> 6;
    COWSTATE_DEBUG_ASSERT((live_slots_[w] >> (slot & 63)) & 1u, "I12", "a slot left vacant twice");
    writable_at(live_slots_, w, h) &= ~(std::uint64_t{1} << (slot & 63));
  }
  bool slot_live(std::uint32_t slot) const noexcept {
    return (slot >> 6) < live_slots_.size() && ((live_slots_[slot >> 6] >> (slot & 63)) & 1u);
  }
  [[gnu::noinline]] void grow_live_slots(std::size_t word);
  // An empty primary table of `cap` buckets in place of the current one.
  // REQUIRES: no snapshot was ever taken (its segments are freed, not retired).
  void reset_primary(std::uint32_t cap) {
    COWSTATE_ASSERT(map_version_ == 0, "REQUIRES", "resetting a table a snapshot may share");
    primary_.clear(
        [this](std::uint32_t* seg, std::uint32_t) { free_segment(seg, primary_.segment_bytes()); });
    primary_.assign_zero(cap, head_segment_shift(cap), map_version_);
    primary_mask_ = cap - 1;
    threshold_ = threshold_for(cap);
  }

  Entry& at(std::uint32_t i) noexcept { return pool_.at(i); }
  const Entry& at(std::uint32_t i) const noexcept { return pool_.at(i); }
  std::uint32_t primary_cap() const noexcept { return primary_mask_ + 1; }
  // Where an entry with this hash lives: the bucket of the primary table, or of the rehash
  // table when its old bucket has already moved (I6).
  struct Home {
    Table* table;
    std::uint32_t bucket;
  };
  Home home_of(std::uint32_t hash) noexcept {
    const std::uint32_t b = hash & primary_mask_;
    if (b >= rehash_index_) [[likely]]
      return {&primary_, b};
    COWSTATE_DEBUG_ASSERT(rehash_.size() == std::size_t{primary_cap()} * 2, "I6",
                          "a moved bucket with no rehash table twice the primary");
    return {&rehash_, hash & (primary_mask_ * 2 + 1)};
  }
  static std::uint32_t bucket_of(const Table& t, std::uint32_t hash) noexcept {
    return hash & static_cast<std::uint32_t>(t.size() - 1);
  }
  static std::uint32_t round_pow2(std::uint32_t v) noexcept {
    return v <= 1 ? 1u : std::bit_ceil(v);
  }
  std::uint32_t threshold_for(std::uint32_t cap) const noexcept {
    return cap >= max_capacity_ ? std::numeric_limits<std::uint32_t>::max()
                                : (cap >> 1) + (cap >> 2);
  }

  // Every keyed writer operation starts here: reads H, reclaims after releases and takes
  // an incremental rehash step. Returns H for this operation.
  [[gnu::always_inline]] std::uint32_t begin_op();
  [[gnu::noinline, gnu::cold]] void reclaim();
  // Reclaims when a release happened since the last reclaim; `w` is a load of sync_.
  void reclaim_if_released(std::uint64_t w) {
    if (high32(w) != seen_release_seq_) [[unlikely]]
      reclaim();
  }
  [[gnu::noinline]] void incremental_rehash(std::uint32_t h);
  void double_capacity();
  static bool matches(const Entry& e, std::uint32_t hash, const K& key, const N& ns) noexcept {
    if constexpr (kStoresHash) {
      return e.hash == hash && e.key == key && e.ns == ns;
    } else {
      (void)hash;
      return e.key == key && e.ns == ns;
    }
  }
  // Index of (key, ns) in `table`'s bucket `b`, or 0; `prev` gets its predecessor.
  std::uint32_t find_in(const Table& table, std::uint32_t b, std::uint32_t hash, const K& key,
                        const N& ns, std::uint32_t* prev) const;
  // Copies the chain prefix of bucket `b` up to `until` where shared; returns the
  // writable entry standing for `until`. REQUIRES: `until` is in chain `b` of `table`.
  // An entry's pool slot and its address, so that a caller holding one does not compute the
  // address again (at() is a few instructions, and a store to an entry makes the compiler
  // redo them).
  struct SlotRef {
    std::uint32_t index;
    Entry* entry;
  };
  SlotRef copy_chain_prefix(Table& table, std::uint32_t b, std::uint32_t until, std::uint32_t h);
  // Copies entry `src` (`s` = at(src)) into a free slot and retires `src`. Inline: a call
  // cost a first write about six instructions of its forty.
  [[gnu::always_inline]] SlotRef copy_entry(std::uint32_t src, const Entry& s, std::uint32_t h);
  // copy_entry's uncommon case: gives the pool a free slot and the retirement log room for
  // a record, then copies.
  [[gnu::noinline]] SlotRef make_room_and_copy(std::uint32_t src, const Entry& s, std::uint32_t h);
  void retire_entry(std::uint32_t index);
  void retire_state(S* state, std::uint32_t birth);
  // Unlinks entry `i` (predecessor `prev`, 0 for the head) and disposes of it.
  // REQUIRES: `i` is in chain `b` of `t`, right after `prev`.
  void unlink(Table& t, std::uint32_t b, std::uint32_t i, std::uint32_t prev, std::uint32_t h);
  // Disposes of an unlinked entry: retires what a live snapshot may see, frees the rest.
  // REQUIRES: `index` is reachable from neither table.
  void dispose_unlinked(std::uint32_t index, std::uint32_t h);
  void free_entry(std::uint32_t index) noexcept;
  // A new boxed state, constructed from `args`.
  template <class... Args>
  S* new_state(Args&&... args);
  // Frees a boxed state. REQUIRES: no live snapshot may reach it; no live entry holds it.
  void free_state(S* state);
  // Sets the state of entry `w` to `state`. REQUIRES: `w` is writable (I3).
  void assign_state(SlotRef w, S&& state, std::uint32_t h);
  // Change tracking (change_log.h): entry `e` in slot `slot` is about to change in place;
  // records it once per interval, with the interval's version (I14). REQUIRES: writable.
  // The check is inline, the recording out of line: an untracked map pays one compare.
  [[gnu::always_inline]] void note_change(std::uint32_t slot, Entry& e) {
    if (e.entry_version < track_below_) [[unlikely]]
      record_change(slot, e);
  }
  [[gnu::noinline]] void record_change(std::uint32_t slot, Entry& e) {
    e.entry_version = map_version_;
    changes_.note_slot(slot);
  }
  // A new entry (inserted or copied) in `slot`, born at the map version.
  [[gnu::always_inline]] void note_new(std::uint32_t slot) {
    if (changes_.on()) [[unlikely]]
      record_new(slot);
  }
  [[gnu::noinline]] void record_new(std::uint32_t slot) { changes_.note_slot(slot); }
  // Moves or copies the state out of an entry that is about to change.
  S take_old_state(Entry& e, std::uint32_t h);
  // Inserts a new entry at the head of the bucket (grows first if needed).
  // An inline state comes by value, in registers: a reference would make every put keep
  // its state in memory in case it inserts.
  using NewState = std::conditional_t<kInline, S, S&&>;
  void insert_new(Table* table, std::uint32_t hash, const K& key, const N& ns, NewState state,
                  std::uint32_t h);
  // Constructs a new entry in a fresh slot, in front of `next`; returns its slot.
  std::uint32_t emplace_entry(std::uint32_t hash, const K& key, const N& ns, NewState state,
                              std::uint32_t next, std::uint32_t h);
  // The state of slot idx (in chain b of t), made writable as get_mutable hands it out.
  S& writable_state(Table& t, std::uint32_t b, std::uint32_t idx, std::uint32_t h);
  // Returns the writable entry for (key, ns) found at `idx` in `table`. Always inline: its
  // common case is a load and a compare, and a call would cost every put more than that.
  [[gnu::always_inline]] SlotRef make_writable(Table& table, std::uint32_t b, std::uint32_t idx,
                                               std::uint32_t h);
  // make_writable's copy: the entry alone when it heads its chain, else the chain prefix.
  [[gnu::always_inline]] SlotRef copy_for_write(Table& table, std::uint32_t b, std::uint32_t idx,
                                                const Entry& e, std::uint32_t h);
  // Any thread. Reached from ~Snapshot, so it asserts nothing (a throwing assertion handler
  // would terminate).
  bool release_snapshot(std::uint32_t version);
  static S& state_ref(Entry& e) noexcept {
    if constexpr (kInline)
      return e.state;
    else
      return *e.state;
  }
  // Where the state lives: in the entry, or its box.
  static const void* state_box(const Entry& e) noexcept {
    if constexpr (kInline)
      return &e.state;
    else
      return e.state;
  }
  static const S& state_ref(const Entry& e) noexcept {
    if constexpr (kInline)
      return e.state;
    else
      return *e.state;
  }

  // Configuration (immutable after construction).
  std::uint32_t min_capacity_;
  std::uint32_t max_capacity_;
  [[no_unique_address]] Hash hash_;

  // Writer thread only.
  EntryPool<Entry> pool_;
  struct NoBoxes {};
  [[no_unique_address]] std::conditional_t<kInline, NoBoxes, BoxPool<S>> boxes_;
  Table primary_;
  Table rehash_;  // empty unless a rehash is in flight
  LiveSlots live_slots_;
  std::uint32_t primary_mask_ = 0;  // primary_.size() - 1
  std::uint32_t primary_size_ = 0;
  std::uint32_t rehash_size_ = 0;
  std::uint32_t rehash_index_ = 0;
  std::uint32_t threshold_ = 0;
  std::uint32_t map_version_ = 0;
  std::uint32_t seen_release_seq_ = 0;
  // Change tracking: map_version_ while tracking, else 0 (no entry version is below it).
  std::uint32_t track_below_ = 0;
  ChangeLog<K, N> changes_;
  AppendLog<RetiredEntry> retired_entries_;
  AppendLog<RetiredState> retired_states_;
  AppendLog<RetiredSegment> retired_segments_;
  std::size_t retired_segment_bytes_ = 0;
  // Heap bytes of the boxed states (state_memory.h); settled by const readers, hence mutable.
  mutable StateHeapCounter<S> heap_;
#if defined(COWSTATE_MUTANTS) && COWSTATE_MUTANTS
  // States freed while a planted bug is active: emptied but kept until the map is destroyed,
  // so that a bug which frees too early shows as a wrong image rather than as a read of
  // freed memory, whose crash would end the whole kill matrix (free_state).
  std::vector<S*> quarantined_states_;
  std::vector<void*> quarantined_segments_;  // the same for segments, zeroed
#endif

  // Any thread: H in the low half, the release sequence number in the high half.
  std::atomic<std::uint64_t> sync_{0};

  // Guarded by mu_.
  mutable std::mutex mu_;
  std::vector<std::uint32_t> live_versions_;  // ascending
  std::uint32_t release_seq_ = 0;
};

// ---------------------------------------------------------------------------------------
// Implementation

template <class K, class N, class S, class H>
CowStateMap<K, N, S, H>::CowStateMap(MapOptions options, H hash)
    : min_capacity_(round_pow2(options.min_capacity)),
      max_capacity_(std::max(round_pow2(options.max_capacity), round_pow2(options.min_capacity))),
      hash_(std::move(hash)) {
  COWSTATE_ASSERT(max_capacity_ <= (1u << 30), "I8", "maximum capacity above 2^30");
  const std::uint32_t cap =
      std::clamp(round_pow2(options.initial_capacity), min_capacity_, max_capacity_);
  COWSTATE_ASSERT(std::has_single_bit(cap), "I8", "initial capacity not a power of two");
  COWSTATE_ASSERT(min_capacity_ <= cap && cap <= max_capacity_, "I8",
                  "initial capacity outside [min_capacity, max_capacity]");
  primary_.assign_zero(cap, head_segment_shift(cap), map_version_);
  live_slots_.assign_zero(0, kLiveSlotsShift, map_version_);
  primary_mask_ = cap - 1;
  threshold_ = threshold_for(cap);
  if (options.track_changes) track_changes();
}

template <class K, class N, class S, class H>
CowStateMap<K, N, S, H>::~CowStateMap() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    COWSTATE_ASSERT(live_versions_.empty(), "I10", "map destroyed while a snapshot is live");
  }
  // Nothing is reused after this, so nothing goes back to the pools (their chunks are
  // freed whole): only destructors run, and not at all when they are trivial. Slots are
  // visited in ascending order, the pool's memory order, not chain by chain: the live-slot
  // bitmap names the live entries, the retirement log the retired ones (I12).
  constexpr bool kTrivialEntry = std::is_trivially_destructible_v<Entry>;
  constexpr bool kTrivialState = kInline || std::is_trivially_destructible_v<S>;
#if defined(COWSTATE_MUTANTS) && COWSTATE_MUTANTS
  // Under a planted bug a state may be both live and retired, or quarantined as well:
  // mutant builds gather the states and destroy each once.
  std::vector<S*> doomed = quarantined_states_;
  auto destroy_state = [&doomed](S* state) { doomed.push_back(state); };
#else
  auto destroy_state = [](S* state) { state->~S(); };
#endif
  if constexpr (!kTrivialEntry || !kTrivialState) {
    if constexpr (!kTrivialEntry) {
      for (const RetiredEntry& r : retired_entries_) at(r.index).~Entry();
    }
    for (std::size_t w = 0; w < live_slots_.size(); ++w) {
      for (std::uint64_t bits = live_slots_[w]; bits != 0; bits &= bits - 1) {
        Entry& e = at(
            static_cast<std::uint32_t>(w * 64 + static_cast<std::size_t>(std::countr_zero(bits))));
        if constexpr (!kTrivialState) destroy_state(e.state);  // live: it owns it (I11)
        if constexpr (!kTrivialEntry) e.~Entry();
      }
    }
  }
  if constexpr (!kTrivialState) {
    for (const RetiredState& r : retired_states_) destroy_state(r.state);
  }
#if defined(COWSTATE_MUTANTS) && COWSTATE_MUTANTS
  if constexpr (!kTrivialState) {
    std::sort(doomed.begin(), doomed.end());
    doomed.erase(std::unique(doomed.begin(), doomed.end()), doomed.end());
    for (S* state : doomed) state->~S();
  }
  for (void* segment : quarantined_segments_)
    detail::free_chunk(static_cast<std::uint64_t*>(segment));
#endif
  for (const RetiredSegment& r : retired_segments_) {
    detail::free_chunk(static_cast<std::uint64_t*>(r.segment));
  }
}

template <class K, class N, class S, class H>
inline std::uint32_t CowStateMap<K, N, S, H>::begin_op() {
  const std::uint64_t w = sync_.load(std::memory_order_acquire);
  heap_.settle();  // a state handed out mutably by the last operation (M1)
  reclaim_if_released(w);
  const std::uint32_t h = low32(w);
  COWSTATE_DEBUG_ASSERT(h <= map_version_, "I1", "H above the map version");
  if (!rehash_.empty()) incremental_rehash(h);
  return h;
}

template <class K, class N, class S, class H>
void CowStateMap<K, N, S, H>::reclaim() {
  std::vector<std::uint32_t> live;
  {
    std::lock_guard<std::mutex> lock(mu_);
    live = live_versions_;
    seen_release_seq_ = release_seq_;
  }
  COWSTATE_ASSERT(std::is_sorted(live.begin(), live.end()), "I1",
                  "live snapshot versions out of order");
  COWSTATE_ASSERT(live.empty() || live.back() <= map_version_, "I1",
                  "a live snapshot version above the map version");
  // A retired item (birth b, retired at r) may be seen by live snapshot v iff b < v <= r.
  auto visible = [&live](std::uint32_t b, std::uint32_t r) {
    if (COWSTATE_MUTANT(free_retired_early)) {
      return !live.empty() && b < live.back() && live.back() <= r;
    }
    auto it = std::upper_bound(live.begin(), live.end(), b);
    return it != live.end() && *it <= r;
  };
  std::size_t kept = 0;
  for (const RetiredEntry& r : retired_entries_) {
    if (visible(r.birth, r.retired_at)) {
      retired_entries_[kept++] = r;
    } else {
      free_entry(r.index);
    }
  }
  const std::size_t freed = retired_entries_.size() - kept;
  retired_entries_.truncate(kept);
  // A large batch (a snapshot that saw many writes) leaves the free list in write order;
  // ordering it makes the next batch of copies fill neighbouring slots.
  if (freed >= kOrderFreeListMin && freed * 16 >= pool_.slots_allocated()) {
    pool_.order_free_list();
  }
  kept = 0;
  for (const RetiredState& r : retired_states_) {
    if (visible(r.birth, r.retired_at)) {
      retired_states_[kept++] = r;
    } else {
      heap_.on_free_retired(*r.state);
      free_state(r.state);
    }
  }
  if (freed > 0 || kept < retired_states_.size()) COWSTATE_PROBE("cow.reclaim");
  retired_states_.truncate(kept);
  kept = 0;
  for (const RetiredSegment& r : retired_segments_) {
    if (visible(r.birth, r.retired_at)) {
      retired_segments_[kept++] = r;
    } else {
      retired_segment_bytes_ -= r.bytes;
      free_segment(r.segment, r.bytes);
    }
  }
  retired_segments_.truncate(kept);
  COWSTATE_ASSERT(!live.empty() || retired_entries_.empty(), "I10",
                  "retired entries remain with no live snapshot");
  COWSTATE_ASSERT(!live.empty() || retired_segment_bytes_ == 0, "I10",
                  "retired segments remain with no live snapshot");
  COWSTATE_ASSERT(!live.empty() || retired_states_.empty(), "I10",
                  "retired states remain with no live snapshot");
}

template <class K, class N, class S, class H>
std::size_t CowStateMap<K, N, S, H>::retired_count() {
  reclaim_if_released(sync_.load(std::memory_order_acquire));
  return retired_entries_.size() + retired_states_.size();
}

template <class K, class N, class S, class H>
void CowStateMap<K, N, S, H>::free_entry(std::uint32_t index) noexcept {
  pool_.destroy(index);
}

template <class K, class N, class S, class H>
template <class Tab>
typename Tab::value_type* CowStateMap<K, N, S, H>::copy_segment_for_write(Tab& t, std::size_t i,
                                                                          std::uint32_t h) {
  COWSTATE_ASSERT(must_copy_segment(t.birth(i >> t.shift()), h), "I13",
                  "copying a segment no live snapshot can share");
  constexpr bool kHeads = std::is_same_v<Tab, Table>;  // planted bugs: heads only
  if (kHeads && COWSTATE_MUTANT(segment_written_in_place)) return t.address_for_write(i);
  if (!kHeads && COWSTATE_MUTANT(live_slots_written_in_place)) return t.address_for_write(i);
  const auto [original, birth] = t.copy_segment(i >> t.shift(), map_version_);
  const bool wrong_birth = kHeads && COWSTATE_MUTANT(segment_freed_at_copy);
  dispose_segment(original, t.segment_bytes(), wrong_birth ? map_version_ : birth, h);
  COWSTATE_PROBE("cow.segment_copy");
  COWSTATE_YIELD("map.copy_segment");
  typename Tab::value_type* out = t.writable_or_null(i, h);
  COWSTATE_ASSERT(out != nullptr, "I13", "a segment copy still shared");
  return out;
}

template <class K, class N, class S, class H>
void CowStateMap<K, N, S, H>::dispose_segment(void* segment, std::size_t bytes, std::uint32_t birth,
                                              std::uint32_t h) {
  COWSTATE_ASSERT(segment != nullptr, "G1", "disposing of no segment");
  if (!must_copy_segment(birth, h)) {
    free_segment(segment, bytes);
    return;
  }
  COWSTATE_ASSERT(birth < map_version_, "I10",
                  "retiring a segment born after every snapshot (no snapshot can see it)");
  retired_segments_.append(
      RetiredSegment{segment, static_cast<std::uint32_t>(bytes), birth, map_version_});
  retired_segment_bytes_ += bytes;
}

template <class K, class N, class S, class H>
void CowStateMap<K, N, S, H>::free_segment(void* segment, std::size_t bytes) noexcept {
#if defined(COWSTATE_MUTANTS) && COWSTATE_MUTANTS
  // As free_state: under a planted bug a segment freed too early reads as empty buckets
  // (a wrong image) rather than as freed memory.
  if (mutants::active() != mutants::Mutant::none) {
    std::memset(segment, 0, bytes);
    quarantined_segments_.push_back(segment);
    return;
  }
#endif
  (void)bytes;
  detail::free_chunk(static_cast<std::uint64_t*>(segment));
}

template <class K, class N, class S, class H>
void CowStateMap<K, N, S, H>::grow_live_slots(std::size_t word) {
  const std::size_t per_segment = std::size_t{1} << kLiveSlotsShift;
  live_slots_.append_zero(word / per_segment + 1 - live_slots_.segments(), map_version_);
  COWSTATE_ASSERT(word < live_slots_.size(), "I12", "the live-slot bitmap short of a slot");
}

template <class K, class N, class S, class H>
void CowStateMap<K, N, S, H>::free_state(S* state) {
  COWSTATE_ASSERT(state != nullptr, "I11", "freeing a null state");
#if defined(COWSTATE_MUTANTS) && COWSTATE_MUTANTS
  if (!mutants::keeps_map_memory_rules()) {
    if constexpr (std::is_default_constructible_v<S>) *state = S{};
    quarantined_states_.push_back(state);
    return;
  }
#endif
  if constexpr (!kInline) {  // inline maps retire no states
    state->~S();
    boxes_.deallocate(state);
  }
}

template <class K, class N, class S, class H>
template <class... Args>
S* CowStateMap<K, N, S, H>::new_state(Args&&... args) {
  S* box = boxes_.allocate();
  COWSTATE_DEBUG_ASSERT(box != nullptr, "I11", "the box pool handed out no box");
  S* s;
  try {
    s = new (box) S(std::forward<Args>(args)...);
  } catch (...) {
    boxes_.deallocate(box);
    throw;
  }
  heap_.on_new(*s);
  return s;
}

template <class K, class N, class S, class H>
void CowStateMap<K, N, S, H>::retire_entry(std::uint32_t index) {
  COWSTATE_ASSERT(index != 0, "I12", "retiring slot 0, which no entry occupies");
  COWSTATE_ASSERT(at(index).entry_version < map_version_ || COWSTATE_MUTANT(entry_version_le),
                  "I10", "retiring an entry born after every snapshot (no snapshot can see it)");
  retired_entries_.append(RetiredEntry{index, at(index).entry_version, map_version_});
  COWSTATE_PROBE("cow.retire");
}

template <class K, class N, class S, class H>
void CowStateMap<K, N, S, H>::retire_state(S* state, std::uint32_t birth) {
  COWSTATE_ASSERT(state != nullptr, "I11", "retiring a null state");
  COWSTATE_ASSERT(birth < map_version_ || COWSTATE_MUTANT(state_version_le), "I10",
                  "retiring a state born after every snapshot (no snapshot can see it)");
  retired_states_.append(RetiredState{state, birth, map_version_});
  heap_.on_retire(*state);
  COWSTATE_PROBE("cow.retire");
}

template <class K, class N, class S, class H>
inline auto CowStateMap<K, N, S, H>::copy_entry(std::uint32_t src, const Entry& s, std::uint32_t h)
    -> SlotRef {
  // The common case calls nothing, so it needs no saved registers: a free slot to reuse
  // and room for the retirement record; making them is out of line, and then comes back.
  if (!pool_.has_free_slot() || !retired_entries_.has_room()) [[unlikely]]
    return make_room_and_copy(src, s, h);
  const std::uint32_t idx = pool_.reuse_free_slot();
  COWSTATE_DEBUG_ASSERT(idx != 0 && idx != src, "I12",
                        "a copy was given slot 0 or the slot of the entry it copies");
  COWSTATE_DEBUG_ASSERT(s.entry_version < map_version_ || COWSTATE_MUTANT(entry_version_le), "I10",
                        "copying (and retiring) an entry born after every snapshot");
  Entry* copy;
  if constexpr (std::is_trivially_copyable_v<Entry>) {
    // The whole entry at once (two 16-byte moves for a 32-byte entry), then its version,
    // rather than a load and a store per field.
    copy = &at(idx);
    std::memcpy(static_cast<void*>(copy), &s, sizeof(Entry));
    copy->entry_version = map_version_;
  } else {
    copy =
        new (&at(idx)) Entry{s.key, s.state, s.ns, s.next, s.hash, map_version_, s.state_version};
  }
  retired_entries_.append_unchecked(RetiredEntry{src, s.entry_version, map_version_});
  mark_live_covered(idx, h);
  mark_vacant(src, h);
  note_new(idx);
  return {idx, copy};
}

template <class K, class N, class S, class H>
auto CowStateMap<K, N, S, H>::make_room_and_copy(std::uint32_t src, const Entry& s, std::uint32_t h)
    -> SlotRef {
  pool_.ensure_free_slot();  // a new chunk at most: `s` stays where it is
  // The slot may be one never used: the bitmap covers it before copy_entry marks it.
  const std::size_t last_word = pool_.slots_allocated() >> 6;
  if (last_word >= live_slots_.size()) grow_live_slots(last_word);
  if (!retired_entries_.has_room()) retired_entries_.grow();
  COWSTATE_ASSERT(pool_.has_free_slot(), "I12", "no free slot after making room for a copy");
  COWSTATE_ASSERT(retired_entries_.has_room(), "I10",
                  "no room in the retirement log after growing it");
  return copy_entry(src, s, h);
}

template <class K, class N, class S, class H>
auto CowStateMap<K, N, S, H>::copy_chain_prefix(Table& table, std::uint32_t b, std::uint32_t until,
                                                std::uint32_t h) -> SlotRef {
  // `link` is where the index of `current` is stored: null for the bucket head (written
  // through head_ref, which copies its segment when shared), then the `next` of the entry
  // before it, which is writable by then (copied, or born after every live snapshot).
  COWSTATE_DEBUG_ASSERT(b < table.size() && until != 0, "I5",
                        "copying up to no entry, or in a bucket outside its table");
  std::uint32_t* link = nullptr;
  for (;;) {
    const std::uint32_t current = link == nullptr ? table[b] : *link;
    COWSTATE_ASSERT(current != 0, "I5", "entry to copy up to is not in its chain");
    Entry* cur = &at(current);
    SlotRef w{current, cur};
    if (must_copy_entry(cur->entry_version, h)) {
      w = copy_entry(current, *cur, h);
      (link == nullptr ? head_ref(table, b, h) : *link) = w.index;
    }
    if (current == until) {
      COWSTATE_DEBUG_ASSERT(w.entry->entry_version >= h, "I3",
                            "the entry copied up to is still shared");
      return w;
    }
    COWSTATE_YIELD("map.copy_chain_prefix");
    COWSTATE_ASSERT(w.entry->entry_version >= h, "I3", "relinking a shared entry");
    link = &w.entry->next;
  }
}

template <class K, class N, class S, class H>
inline auto CowStateMap<K, N, S, H>::make_writable(Table& table, std::uint32_t b, std::uint32_t idx,
                                                   std::uint32_t h) -> SlotRef {
  Entry& e = at(idx);
  if (must_copy_before_write(e, h)) [[unlikely]]
    return copy_for_write(table, b, idx, e, h);
  COWSTATE_DEBUG_ASSERT(e.entry_version >= h || COWSTATE_MUTANT(skip_chain_prefix_copy), "I3",
                        "handing out a shared entry as writable");
  return {idx, &e};
}

template <class K, class N, class S, class H>
inline auto CowStateMap<K, N, S, H>::copy_for_write(Table& table, std::uint32_t b,
                                                    std::uint32_t idx, const Entry& e,
                                                    std::uint32_t h) -> SlotRef {
  if (table[b] == idx) {  // the head (most chains are one entry long): copy it alone
    const SlotRef c = copy_entry(idx, e, h);
    COWSTATE_PROBE("cow.entry_copy");
    head_ref(table, b, h) = c.index;
    COWSTATE_ASSERT(c.entry->entry_version >= h, "I3", "the copy of a head is still shared");
    return c;
  }
  const SlotRef w = copy_chain_prefix(table, b, idx, h);
  COWSTATE_PROBE("cow.chain_prefix_copy");
  COWSTATE_ASSERT(w.entry->entry_version >= h, "I3", "the copy of a chain entry is still shared");
  return w;
}

template <class K, class N, class S, class H>
void CowStateMap<K, N, S, H>::dispose_unlinked(std::uint32_t index, std::uint32_t h) {
  COWSTATE_DEBUG_ASSERT(index != 0, "I12", "disposing of slot 0, which no entry occupies");
  mark_vacant(index, h);
  Entry& e = at(index);
  if constexpr (!kInline) {
    // A retired entry keeps pointing at its state: the snapshots that reach the entry
    // read the state through it (the state has its own retirement record).
    if (must_copy_state(e.state_version, h)) {
      retire_state(e.state, e.state_version);
    } else {
      COWSTATE_ASSERT(!must_copy_entry(e.entry_version, h), "I10",
                      "freeing the state of an entry a live snapshot can see");
      heap_.on_free_live(*e.state);
      free_state(e.state);
    }
  }
  if (must_copy_entry(e.entry_version, h)) {
    retire_entry(index);
  } else {
    free_entry(index);
  }
}

template <class K, class N, class S, class H>
void CowStateMap<K, N, S, H>::assign_state(SlotRef w, S&& state, std::uint32_t h) {
  Entry& e = *w.entry;
  COWSTATE_ASSERT(e.entry_version >= h || COWSTATE_MUTANT(skip_chain_prefix_copy), "I3",
                  "assigning the state of a shared entry");
  note_change(w.index, e);
  if constexpr (kInline) {
    e.state = std::move(state);
  } else {
    if (must_copy_state(e.state_version, h)) {
      S* fresh = new_state(std::move(state));
      retire_state(e.state, e.state_version);
      e.state = fresh;
    } else {
      heap_.hand_out(e.state);  // counted again at the next settle (M1)
      *e.state = std::move(state);
    }
    e.state_version = map_version_;
    COWSTATE_DEBUG_ASSERT(e.state != nullptr, "I11", "an entry left without a state");
  }
}

template <class K, class N, class S, class H>
S CowStateMap<K, N, S, H>::take_old_state(Entry& e, std::uint32_t h) {
  if constexpr (kInline) {
    return e.state;
  } else {
    COWSTATE_DEBUG_ASSERT(e.state != nullptr, "I11", "taking the state of an entry without one");
    if (must_copy_state(e.state_version, h)) return S(*e.state);  // a snapshot may see it
    heap_.hand_out(e.state);  // moved from: counted again at the next settle (M1)
    return std::move(*e.state);
  }
}

template <class K, class N, class S, class H>
std::uint32_t CowStateMap<K, N, S, H>::find_in(const Table& table, std::uint32_t b,
                                               std::uint32_t hash, const K& key, const N& ns,
                                               std::uint32_t* prev) const {
  COWSTATE_DEBUG_ASSERT(b < table.size(), "I6", "a bucket outside its table");
  std::uint32_t p = 0;
  for (std::uint32_t i = table[b]; i != 0;) {
    const Entry& e = at(i);
    if (matches(e, hash, key, ns)) {
      if (prev != nullptr) *prev = p;
      return i;
    }
    p = i;
    i = e.next;
  }
  return 0;
}

template <class K, class N, class S, class H>
inline const S* CowStateMap<K, N, S, H>::get(const K& key, const N& ns) {
  begin_op();
  const std::uint32_t hash = hash_(key, ns);
  const auto [t, b] = home_of(hash);
  const std::uint32_t i = find_in(*t, b, hash, key, ns, nullptr);
  COWSTATE_DEBUG_ASSERT(i == 0 || at(i).entry_version <= map_version_, "I11",
                        "an entry born after the map version");
  return i == 0 ? nullptr : &state_ref(at(i));
}

template <class K, class N, class S, class H>
bool CowStateMap<K, N, S, H>::contains(const K& key, const N& ns) {
  return get(key, ns) != nullptr;
}

template <class K, class N, class S, class H>
S* CowStateMap<K, N, S, H>::get_mutable(const K& key, const N& ns) {
  const std::uint32_t h = begin_op();
  const std::uint32_t hash = hash_(key, ns);
  const auto [tp, b] = home_of(hash);
  Table& t = *tp;
  std::uint32_t i = find_in(t, b, hash, key, ns, nullptr);
  if (i == 0) return nullptr;
  S* out = &writable_state(t, b, i, h);
  COWSTATE_DEBUG_ASSERT(out == &state_ref(at(find_in(t, b, hash, key, ns, nullptr))), "I4",
                        "handing out a state the live entry does not hold");
  return out;
}

template <class K, class N, class S, class H>
S& CowStateMap<K, N, S, H>::writable_state(Table& t, std::uint32_t b, std::uint32_t i,
                                           std::uint32_t h) {
  if constexpr (kInline) {
    const SlotRef w = make_writable(t, b, i, h);
    if (!COWSTATE_MUTANT(handout_not_logged)) note_change(w.index, *w.entry);
    return w.entry->state;
  } else {
    SlotRef w{i, &at(i)};
    Entry* e = w.entry;
    if (must_copy_state(e->state_version, h) && !COWSTATE_MUTANT(shared_state_mutable)) {
      w = make_writable(t, b, i, h);
      e = w.entry;
      COWSTATE_PROBE("cow.state_copy");
      S* fresh = new_state(*e->state);
      retire_state(e->state, e->state_version);
      e->state = fresh;
      e->state_version = map_version_;
    }
    COWSTATE_ASSERT(e->state_version >= h || COWSTATE_MUTANT(shared_state_mutable), "I4",
                    "handing out a shared state mutably");
    // A state born at or after H was assigned while its entry was writable, and the entry
    // has stayed so (only a new snapshot makes it shared, and then its state too).
    COWSTATE_DEBUG_ASSERT(e->entry_version >= h || COWSTATE_MUTANT(shared_state_mutable), "I3",
                          "a fresh state in a shared entry");
    if (!COWSTATE_MUTANT(handout_not_logged)) note_change(w.index, *e);
    heap_.hand_out(e->state);  // the caller may change it: counted again at the next settle
    return *e->state;
  }
}

template <class K, class N, class S, class H>
inline void CowStateMap<K, N, S, H>::put(const K& key, const N& ns, S state) {
  const std::uint32_t h = begin_op();
  const std::uint32_t hash = hash_(key, ns);
  const auto [tp, b] = home_of(hash);
  Table& t = *tp;
  std::uint32_t i = find_in(t, b, hash, key, ns, nullptr);
  if (i != 0) {
    if constexpr (kInline) {
      // make_writable and assign_state, taken apart: the common case is one compare and one
      // store, and assign_state's I3 check is what the compare has just established.
      Entry& e = at(i);
      if (must_copy_before_write(e, h)) [[unlikely]] {
        copy_for_write(t, b, i, e, h).entry->state = std::move(state);
        return;
      }
      note_change(i, e);
      e.state = std::move(state);
      return;
    }
    assign_state(make_writable(t, b, i, h), std::move(state), h);
    return;
  }
  insert_new(&t, hash, key, ns, std::move(state), h);
}

template <class K, class N, class S, class H>
std::optional<S> CowStateMap<K, N, S, H>::put_and_get_old(const K& key, const N& ns, S state) {
  const std::uint32_t h = begin_op();
  const std::uint32_t hash = hash_(key, ns);
  const auto [tp, b] = home_of(hash);
  Table& t = *tp;
  std::uint32_t i = find_in(t, b, hash, key, ns, nullptr);
  if (i != 0) {
    const SlotRef w = make_writable(t, b, i, h);
    std::optional<S> old(take_old_state(*w.entry, h));
    assign_state(w, std::move(state), h);
    return old;
  }
  insert_new(&t, hash, key, ns, std::move(state), h);
  return std::nullopt;
}

template <class K, class N, class S, class H>
template <class T, class F>
void CowStateMap<K, N, S, H>::transform(const K& key, const N& ns, const T& value, F&& fn) {
  const std::uint32_t h = begin_op();
  const std::uint32_t hash = hash_(key, ns);
  const auto [tp, b] = home_of(hash);
  Table& t = *tp;
  std::uint32_t i = find_in(t, b, hash, key, ns, nullptr);
  constexpr bool kInPlace =
      std::is_invocable_r_v<void, F&, S&, const T&> && !std::is_invocable_v<F&, const S*, const T&>;
  static_assert(kInPlace || std::is_invocable_r_v<S, F&, const S*, const T&>,
                "transform takes S fn(const S*, const T&) or void fn(S&, const T&)");
  if constexpr (kInPlace) {
    if (i != 0) {
      S& state = COWSTATE_MUTANT(transform_in_place_shared) ? state_ref(at(i))
                                                            : writable_state(t, b, i, h);
      std::invoke(fn, state, value);
      return;
    }
    S fresh{};
    std::invoke(fn, fresh, value);
    insert_new(&t, hash, key, ns, std::move(fresh), h);
  } else {
    if (i != 0) {
      S fresh = std::invoke(fn, static_cast<const S*>(&state_ref(at(i))), value);
      assign_state(make_writable(t, b, i, h), std::move(fresh), h);
      return;
    }
    S fresh = std::invoke(fn, static_cast<const S*>(nullptr), value);
    insert_new(&t, hash, key, ns, std::move(fresh), h);
  }
}

template <class K, class N, class S, class H>
void CowStateMap<K, N, S, H>::insert_new(Table* table, std::uint32_t hash, const K& key,
                                         const N& ns, NewState state, std::uint32_t h) {
  // Flink's rule: grow when the size before this insert exceeds 0.75 * capacity. A rehash
  // moves at least 4 entries per operation, so it always ends before the new table fills.
  if (size() > threshold_ && !rehashing()) {
    double_capacity();  // the primary table stays where it is; `table` remains valid
  }
  COWSTATE_DEBUG_ASSERT(table == &primary_ || table == &rehash_, "I6",
                        "an insert into a table the map does not own");
  COWSTATE_YIELD("map.insert_new");
  const std::uint32_t b = bucket_of(*table, hash);
  [[maybe_unused]] const std::size_t before = size();
  const std::uint32_t idx = emplace_entry(hash, key, ns, std::move(state), (*table)[b], h);
  head_ref(*table, b, h) = idx;
  COWSTATE_DEBUG_ASSERT(at((*table)[b]).entry_version == map_version_, "I11",
                        "a new entry not born at the map version");
  if (table == &primary_) {
    ++primary_size_;
  } else {
    COWSTATE_ASSERT(rehashing(), "I6", "an insert into the rehash table with no rehash in flight");
    ++rehash_size_;
  }
  COWSTATE_DEBUG_ASSERT(size() == before + 1, "I5", "an insert that did not count one entry");
}

template <class K, class N, class S, class H>
inline std::uint32_t CowStateMap<K, N, S, H>::emplace_entry(std::uint32_t hash, const K& key,
                                                            const N& ns, NewState state,
                                                            std::uint32_t next, std::uint32_t h) {
  const std::uint32_t idx = pool_.allocate();
  COWSTATE_ASSERT(idx != 0, "I12", "the pool handed out slot 0, the null index");
  COWSTATE_DEBUG_ASSERT(idx != next, "I5", "a new entry in front of itself (a cycle)");
  if constexpr (kInline) {
    new (&at(idx)) Entry{key, std::move(state), ns, next, StoredHash(hash), map_version_, {}};
  } else {
    S* boxed = new_state(std::move(state));
    new (&at(idx)) Entry{key, boxed, ns, next, StoredHash(hash), map_version_, map_version_};
  }
  mark_live(idx, h);
  note_new(idx);
  return idx;
}

template <class K, class N, class S, class H>
void CowStateMap<K, N, S, H>::unlink(Table& t, std::uint32_t b, std::uint32_t i, std::uint32_t prev,
                                     std::uint32_t h) {
  if (prev == 0) {
    COWSTATE_ASSERT(t[b] == i, "I5", "unlinking as the head an entry that does not head its chain");
    head_ref(t, b, h) = at(i).next;
  } else {
    COWSTATE_DEBUG_ASSERT(at(prev).next == i, "I5",
                          "unlinking after an entry that is not before it");
    Entry& p = *make_writable(t, b, prev, h).entry;
    COWSTATE_ASSERT(p.entry_version >= h || COWSTATE_MUTANT(skip_chain_prefix_copy), "I3",
                    "unlinking through a shared entry");
    p.next = at(i).next;
  }
  COWSTATE_DEBUG_ASSERT((&t == &primary_ ? primary_size_ : rehash_size_) > 0, "I5",
                        "unlinking from a table that counts no entry");
  if (changes_.on() && !COWSTATE_MUTANT(tombstone_dropped)) [[unlikely]] {
    changes_.note_removal(at(i).key, at(i).ns);
  }
  if (&t == &primary_) {
    --primary_size_;
  } else {
    --rehash_size_;
  }
  dispose_unlinked(i, h);
}

template <class K, class N, class S, class H>
bool CowStateMap<K, N, S, H>::remove(const K& key, const N& ns) {
  const std::uint32_t h = begin_op();
  const std::uint32_t hash = hash_(key, ns);
  const auto [tp, b] = home_of(hash);
  Table& t = *tp;
  std::uint32_t prev = 0;
  const std::uint32_t i = find_in(t, b, hash, key, ns, &prev);
  if (i == 0) return false;
  unlink(t, b, i, prev, h);
  COWSTATE_DEBUG_ASSERT(find_in(t, b, hash, key, ns, nullptr) == 0, "I7",
                        "a removed key still in the live map");
  return true;
}

template <class K, class N, class S, class H>
std::optional<S> CowStateMap<K, N, S, H>::remove_and_get_old(const K& key, const N& ns) {
  const std::uint32_t h = begin_op();
  const std::uint32_t hash = hash_(key, ns);
  const auto [tp, b] = home_of(hash);
  Table& t = *tp;
  std::uint32_t prev = 0;
  const std::uint32_t i = find_in(t, b, hash, key, ns, &prev);
  if (i == 0) return std::nullopt;
  std::optional<S> old(take_old_state(at(i), h));
  unlink(t, b, i, prev, h);
  COWSTATE_DEBUG_ASSERT(find_in(t, b, hash, key, ns, nullptr) == 0, "I7",
                        "a removed key still in the live map");
  return old;
}

template <class K, class N, class S, class H>
void CowStateMap<K, N, S, H>::double_capacity() {
  COWSTATE_ASSERT(rehash_.empty(), "I6", "a second rehash started while one is in flight");
  const std::uint32_t old_cap = primary_cap();
  if (old_cap >= max_capacity_) {
    threshold_ = std::numeric_limits<std::uint32_t>::max();
    return;
  }
  COWSTATE_ASSERT(old_cap * 2 <= max_capacity_, "I8", "a rehash past the maximum capacity");
  rehash_.assign_zero(std::size_t{old_cap} * 2, head_segment_shift(old_cap * 2), map_version_);
  rehash_index_ = 0;
  COWSTATE_DEBUG_ASSERT(rehashing() && home_of(0).table == &primary_, "I6",
                        "a rehash that starts with a bucket already moved");
  COWSTATE_ASSERT(rehash_size_ == 0, "I5", "entries counted in a rehash table not yet made");
  threshold_ = threshold_for(old_cap * 2);
}

template <class K, class N, class S, class H>
void CowStateMap<K, N, S, H>::incremental_rehash(std::uint32_t h) {
  constexpr std::uint32_t kMinTransferred = 4;
  const std::uint32_t old_cap = primary_cap();
  const std::uint32_t new_mask = static_cast<std::uint32_t>(rehash_.size() - 1);
  COWSTATE_ASSERT(rehash_index_ < old_cap, "I6", "a rehash step past the old table's end");
  COWSTATE_ASSERT(rehash_.size() == std::size_t{old_cap} * 2, "I8",
                  "a rehash table not twice the primary");
  std::uint32_t transferred = 0;
  std::uint32_t idx = rehash_index_;
  while (transferred < kMinTransferred) {
    std::uint32_t e = primary_[idx];
    while (e != 0) {
      COWSTATE_YIELD("map.rehash_move");
      Entry* ep = &at(e);
      if (must_copy_entry(ep->entry_version, h) && !COWSTATE_MUTANT(no_copy_in_rehash)) {
        const SlotRef c = copy_entry(e, *ep, h);
        COWSTATE_PROBE("cow.rehash_copy");
        e = c.index;
        ep = c.entry;
      }
      Entry& moved = *ep;
      COWSTATE_DEBUG_ASSERT(moved.entry_version >= h || COWSTATE_MUTANT(no_copy_in_rehash), "I3",
                            "a rehash relinking a shared entry");
      const std::uint32_t next = moved.next;
      const std::uint32_t pos = hash_of(moved) & new_mask;
      moved.next = rehash_[pos];
      head_ref(rehash_, pos, h) = e;
      e = next;
      ++transferred;
    }
    if (primary_[idx] != 0) head_ref(primary_, idx, h) = 0;
    if (++idx == old_cap) {
      COWSTATE_ASSERT(primary_size_ == transferred, "I5", "entries left behind in the old table");
      primary_.swap(rehash_);
      primary_mask_ = static_cast<std::uint32_t>(primary_.size() - 1);
      // The old table's segments: those a live snapshot's directory may hold are retired.
      rehash_.clear(
          [this, h, bytes = rehash_.segment_bytes()](std::uint32_t* seg, std::uint32_t birth) {
            dispose_segment(seg, bytes, birth, h);
          });
      primary_size_ = rehash_size_ + transferred;
      rehash_size_ = 0;
      rehash_index_ = 0;
      return;
    }
  }
  COWSTATE_ASSERT(primary_size_ >= transferred, "I5",
                  "a rehash step moved more than the table held");
  primary_size_ -= transferred;
  rehash_size_ += transferred;
  rehash_index_ = idx;
}

template <class K, class N, class S, class H>
auto CowStateMap<K, N, S, H>::snapshot() -> Snapshot {
  heap_.settle();  // counted before the state may be shared (M1)
  reclaim_if_released(sync_.load(std::memory_order_acquire));
  std::uint32_t version;
  {
    std::lock_guard<std::mutex> lock(mu_);
    COWSTATE_ASSERT(map_version_ < std::numeric_limits<std::uint32_t>::max() - 1, "I1",
                    "map version overflow");
    if (!COWSTATE_MUTANT(no_version_bump_at_snapshot)) ++map_version_;
    version = map_version_;
    COWSTATE_ASSERT(live_versions_.empty() || live_versions_.back() <= version, "I1",
                    "a snapshot version below a live one");
    if (live_versions_.empty() || live_versions_.back() != version) {
      live_versions_.push_back(version);
    }
    // Release ordering: the snapshot's reader thread receives the handle through its own
    // synchronization; H is published for the writer's own later loads.
    sync_.store(pack(release_seq_, version), std::memory_order_release);
  }
  if (rehashing()) COWSTATE_PROBE("cow.snapshot_during_rehash");
  // H covers this snapshot from here on, so every segment in the directories copied below
  // (all born before `version`) is copied before the writer next writes into it (I13). The
  // copies read only what the writer alone writes, so no other thread can interleave with
  // them in a way that matters: no yield point here.
  const bool both = rehashing() && !COWSTATE_MUTANT(snapshot_primary_directory_only);
  Snapshot snap(this, version, size(), primary_.view(), both ? rehash_.view() : Table::View{},
                both ? rehash_index_ : 0, live_slots_.view());
  if (changes_.on()) {
    snap.changes_ = changes_.seal(version);
    track_below_ = version;
  }
  COWSTATE_ASSERT(snap.bucket_span() == primary_cap() + rehash_index_ ||
                      COWSTATE_MUTANT(snapshot_primary_directory_only),
                  "I9", "a snapshot's directories miss a bucket of the map");
  return snap;
}

template <class K, class N, class S, class H>
void CowStateMap<K, N, S, H>::track_changes() {
  changes_.start(map_version_);
  track_below_ = map_version_;
}

template <class K, class N, class S, class H>
bool CowStateMap<K, N, S, H>::release_snapshot(std::uint32_t version) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find(live_versions_.begin(), live_versions_.end(), version);
  if (it == live_versions_.end()) return false;
  live_versions_.erase(it);
  ++release_seq_;
  std::uint32_t h = 0;
  if (!live_versions_.empty()) {
    h = COWSTATE_MUTANT(h_min_on_release) ? live_versions_.front() : live_versions_.back();
  }
  // Release: everything the releasing thread read in this snapshot happens-before the
  // writer's acquire load of H, after which it may write or free that memory.
  sync_.store(pack(release_seq_, h), std::memory_order_release);
  return true;
}

template <class K, class N, class S, class H>
template <class F>
void CowStateMap<K, N, S, H>::for_each(F&& fn) const {
  for (const Table* t : {&primary_, &rehash_}) {
    for (std::size_t b = 0; b < t->size(); ++b) {
      for (std::uint32_t i = (*t)[b]; i != 0; i = at(i).next) {
        const Entry& e = at(i);
        fn(e.key, e.ns, state_ref(e));
      }
    }
  }
}

template <class K, class N, class S, class H>
template <class F>
std::size_t CowStateMap<K, N, S, H>::visit_incremental(VisitCursor& cursor, std::size_t max_entries,
                                                       F&& fn) {
  struct Decision {
    K key;
    N ns;
    VisitResult<S> result;
  };
  std::vector<Decision> decisions;
  std::size_t visited = 0;
  std::size_t buckets_left = primary_.size() + rehash_.size();
  // A local cursor: through the reference, every store to a bucket or an entry would make
  // the compiler load it again. Empty buckets are skipped eight at a time where it can.
  VisitCursor c = cursor;
  while (visited < max_entries && buckets_left > 0) {
    const Table& t = c.table == 0 ? primary_ : rehash_;  // put/remove below may rehash
    if (c.bucket >= t.size()) {                          // next table, or wrap around
      c.table = (c.table == 0 && !rehash_.empty()) ? 1 : 0;
      c.bucket = 0;
      continue;
    }
    // Within the segment holding c.bucket: its buckets are contiguous.
    const std::size_t base = c.bucket & ~((std::size_t{1} << t.shift()) - 1);
    const std::uint32_t* heads = t.address(base);
    const std::size_t stop =
        std::min({t.size(), base + (std::size_t{1} << t.shift()), c.bucket + buckets_left});
    const std::size_t b = base + detail::next_nonempty_bucket(heads, c.bucket - base, stop - base);
    const std::size_t skipped = b - c.bucket;
    buckets_left -= skipped;
    c.bucket = static_cast<std::uint32_t>(b);
    if (b == stop) continue;
    --buckets_left;
    ++c.bucket;
    decisions.clear();
    for (std::uint32_t i = t[b]; i != 0; i = at(i).next) {
      const Entry& e = at(i);
      VisitResult<S> r = fn(static_cast<const K&>(e.key), static_cast<const N&>(e.ns),
                            static_cast<const S&>(state_ref(e)));
      ++visited;
      if (r.kind() != VisitResult<S>::Kind::keep) decisions.push_back({e.key, e.ns, std::move(r)});
    }
    for (Decision& d : decisions) {
      if (d.result.kind() == VisitResult<S>::Kind::remove) {
        remove(d.key, d.ns);
      } else {
        put(d.key, d.ns, std::move(d.result.replacement()));
      }
    }
  }
  cursor = c;
  return visited;
}

// Long because it is one block per invariant of docs/invariants.md, in their order, sharing
// one walk over the tables; a block reads alone.
template <class K, class N, class S, class H>
bool CowStateMap<K, N, S, H>::check_invariants(std::string* why) const {
  auto fail = [why](const char* id, const std::string& what) {
    if (why != nullptr) {
      *why = std::string(id) + ": " + what;
    } else {
      std::fprintf(stderr, "cowstate invariant %s violated: %s\n", id, what.c_str());
    }
    return false;
  };
  std::vector<std::uint32_t> live;
  std::uint64_t w;
  {
    std::lock_guard<std::mutex> lock(mu_);
    live = live_versions_;
    w = sync_.load(std::memory_order_acquire);
  }
  for (std::size_t i = 0; i < live.size(); ++i) {
    if (live[i] > map_version_) return fail("I1", "a live version is above the map version");
    if (i > 0 && live[i - 1] >= live[i]) return fail("I1", "live versions not ascending");
  }
  if (low32(w) != (live.empty() ? 0u : live.back())) {
    return fail("I2", "H is " + std::to_string(low32(w)) + " but the largest live version is " +
                          std::to_string(live.empty() ? 0u : live.back()));
  }
  const std::uint32_t cap = primary_cap();
  if (!std::has_single_bit(cap) || cap < min_capacity_ || cap > max_capacity_) {
    return fail("I8", "primary capacity " + std::to_string(cap) + " out of bounds");
  }
  if (!rehash_.empty() && rehash_.size() != std::size_t{cap} * 2) {
    return fail("I8", "rehash table is not twice the primary");
  }
  std::vector<std::uint8_t> seen(pool_.slots_allocated() + 1, 0);
  std::size_t counts[2] = {0, 0};
  std::vector<std::pair<K, N>> keys;
  std::vector<const S*> boxes;
  for (int ti = 0; ti < 2; ++ti) {
    const Table& t = ti == 0 ? primary_ : rehash_;
    const std::uint32_t mask = static_cast<std::uint32_t>(t.size() - 1);
    for (std::uint32_t b = 0; b < t.size(); ++b) {
      if (ti == 0 && !rehash_.empty() && b < rehash_index_ && t[b] != 0) {
        return fail("I6",
                    "old-table bucket " + std::to_string(b) + " below rehash index not empty");
      }
      for (std::uint32_t i = t[b]; i != 0; i = at(i).next) {
        if (i > pool_.slots_allocated() || seen[i]) {
          return fail("I5", "entry " + std::to_string(i) + " reached twice or out of the pool");
        }
        seen[i] = 1;
        const Entry& e = at(i);
        if ((hash_of(e) & mask) != b) return fail("I6", "entry in the wrong bucket");
        if (ti == 1 && (hash_of(e) & (cap - 1)) >= rehash_index_) {
          return fail("I6", "entry in the new table whose old bucket was not moved yet");
        }
        if (hash_of(e) != hash_(e.key, e.ns))
          return fail("I7", "stored hash differs from hash(key, ns)");
        if (e.entry_version > map_version_) return fail("I11", "entry version above map version");
        if constexpr (!kInline) {
          if (e.state == nullptr) return fail("I11", "live entry without a state");
          if (e.state_version > map_version_) return fail("I11", "state version above map version");
          boxes.push_back(e.state);
        }
        keys.emplace_back(e.key, e.ns);
        ++counts[ti];
      }
    }
  }
  if (counts[0] != primary_size_ || counts[1] != rehash_size_) {
    return fail("I5", "sizes " + std::to_string(primary_size_) + "+" +
                          std::to_string(rehash_size_) + " but reachable " +
                          std::to_string(counts[0]) + "+" + std::to_string(counts[1]));
  }
  std::size_t marked = 0;
  for (std::size_t word = 0; word < live_slots_.size(); ++word) {
    marked += static_cast<std::size_t>(std::popcount(live_slots_[word]));
  }
  for (std::uint32_t i = 1; i < seen.size(); ++i) {
    if ((seen[i] != 0) != slot_live(i)) {
      return fail("I12", "pool slot " + std::to_string(i) +
                             (seen[i] != 0 ? " holds a live entry the live-slot bitmap lacks"
                                           : " is marked live but no table reaches it"));
    }
  }
  if (marked != counts[0] + counts[1]) {
    return fail("I12", "the live-slot bitmap marks " + std::to_string(marked) + " slots, " +
                           std::to_string(counts[0] + counts[1]) + " entries are live");
  }
  if (changes_.on() && changes_.has_base()) {
    std::vector<std::pair<std::uint32_t, std::uint32_t>> recorded;  // (version, slot)
    auto add = [&recorded](const typename ChangeLog<K, N>::Record& r) {
      for (const std::uint32_t slot : r.slots) recorded.emplace_back(r.version, slot);
    };
    for (const auto& r : changes_.sealed()) add(*r);
    add(changes_.open());
    std::sort(recorded.begin(), recorded.end());
    for (std::uint32_t i = 1; i < seen.size(); ++i) {
      if (seen[i] == 0 || at(i).entry_version < changes_.base()) continue;
      if (!std::binary_search(recorded.begin(), recorded.end(),
                              std::make_pair(at(i).entry_version, i))) {
        return fail("I14", "the entry in slot " + std::to_string(i) + ", of version " +
                               std::to_string(at(i).entry_version) +
                               " (base " + std::to_string(changes_.base()) +
                               "), is not in that interval's change record");
      }
    }
  }
  for (const auto* t : {&primary_, &rehash_}) {
    for (std::size_t seg = 0; seg < t->segments(); ++seg) {
      if (t->birth(seg) > map_version_) return fail("I13", "a segment born after the map version");
    }
  }
  for (std::size_t seg = 0; seg < live_slots_.segments(); ++seg) {
    if (live_slots_.birth(seg) > map_version_) {
      return fail("I13", "a live-slot segment born after the map version");
    }
  }
  std::size_t retired_bytes = 0;
  for (const RetiredSegment& r : retired_segments_) {
    if (r.birth >= r.retired_at)
      return fail("I10", "retired segment born at or after its retirement");
    retired_bytes += r.bytes;
  }
  if (retired_bytes != retired_segment_bytes_) {
    return fail("I10", "retired segment bytes counted " + std::to_string(retired_segment_bytes_) +
                           ", held " + std::to_string(retired_bytes));
  }
  std::sort(keys.begin(), keys.end());
  if (std::adjacent_find(keys.begin(), keys.end()) != keys.end()) {
    return fail("I7", "a key appears twice in the live map");
  }
  std::sort(boxes.begin(), boxes.end());
  if (std::adjacent_find(boxes.begin(), boxes.end()) != boxes.end()) {
    return fail("I11", "two live entries share one boxed state");
  }
  std::size_t retired = 0;
  for (const RetiredEntry& r : retired_entries_) {
    if (r.index > pool_.slots_allocated() || seen[r.index]) {
      return fail("I10", "retired entry " + std::to_string(r.index) + " still reachable");
    }
    seen[r.index] = 1;
    ++retired;
    if (r.birth != at(r.index).entry_version) {
      return fail("I10", "retired entry's recorded birth differs from its entry version");
    }
    if (r.birth >= r.retired_at) {
      return fail("I10", "retired entry born at or after its retirement");
    }
  }
  for (const RetiredState& r : retired_states_) {
    if (std::binary_search(boxes.begin(), boxes.end(), r.state)) {
      return fail("I10", "retired state still owned by a live entry");
    }
  }
  const std::size_t live_entries = counts[0] + counts[1];
  if (live_entries + retired + pool_.free_slots() != pool_.slots_allocated()) {
    return fail("I12", "pool accounting: live " + std::to_string(live_entries) + " + retired " +
                           std::to_string(retired) + " + free " +
                           std::to_string(pool_.free_slots()) + " != allocated " +
                           std::to_string(pool_.slots_allocated()));
  }
  return true;
}

}  // namespace cowstate

// The bulk loader and the snapshot side (CowStateMapSnapshot, its cursor and its slot-order
// scan) are headers of their own; they need the class above, so they come last.
#include "cowstate/cow_state_map_loader.h"
#include "cowstate/cow_state_map_snapshot.h"
