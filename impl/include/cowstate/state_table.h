// StateTable: one registered state of a keyed backend, as one CowStateMap per key group of
// the backend's KeyGroupRange (Flink's CopyOnWriteStateTable).
//
// Layout
// ------
// maps_[g - range.start] holds the (key, namespace) -> state entries of key group g, so a
// snapshot, a checkpoint block and a rescale all work key group by key group. Maps are
// created with the table and never replaced while the table is in use; restore builds a
// fresh table (make_empty) and the backend swaps it in only when the whole restore worked.
//
// Type erasure
// ------------
// A backend holds states of different key/namespace/state types. StateTableBase is what the
// checkpoint machinery needs without knowing them: the state's metadata, a snapshot of one
// key group as a KeyGroupStateSnapshot (which writes its own entries into a byte buffer in
// bounded steps), and decoding of entries into a fresh table. StateTable<KS, NS, SS, KH> is
// the typed table the state handles (keyed_state_backend.h) use directly. Virtual calls
// happen per step or per key group, never per entry.
//
// Entries in a checkpoint block are key, namespace, state, each in its serializer's layout
// (serializers.h); docs/checkpoint-format.md has the whole file.
//
// TTL
// ---
// A state with a TTL has a table of the TTL form of its serializer (TtlStored<SS>, ttl.h):
// its states carry last-access times, stored and restored like any other bytes. With
// full-snapshot cleanup a snapshot reads the table's clock as it writes each entry (on the
// checkpoint writer's thread) and writes only what is live then: expired values and
// entries whose elements all expired are skipped, expired elements are filtered out of
// what is written. The live map is never changed by it.
//
// Errors
// ------
// A key group outside the range is a programmer error when the table is asked for its map
// (B1): the backend computes key groups itself and refuses a current key outside its range
// with a Status (set_current_key), so only a bug reaches the table with one. Decoding
// returns a Status for every malformed input, including a key that does not hash to the
// key group it was stored under (the file was written with another key hash, or is corrupt).
//
// Thread safety
// -------------
// One writer thread calls everything except the KeyGroupStateSnapshot members, which the
// async checkpoint writer calls on its own thread (one thread at a time per snapshot), and
// release(), which is idempotent and callable from any thread (the map snapshot's release).
//
// Invariants (docs/invariants.md)
//  B1  A table is asked only for maps of key groups in its range.
//  B2  A KeyGroupStateSnapshot consumes exactly size() entries before done() and emits at
//      most that many; a released one is never written again.
//  L5  With full-snapshot TTL cleanup, each entry is judged by the clock when it is
//      written; what is expired then is left out; the live map is not touched.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cowstate/assert.h"
#include "cowstate/bytes.h"
#include "cowstate/cold_cache.h"
#include "cowstate/cold_store.h"
#include "cowstate/cow_state_map.h"
#include "cowstate/hooks.h"
#include "cowstate/key_groups.h"
#include "cowstate/metrics.h"
#include "cowstate/request_rate.h"
#include "cowstate/serializers.h"
#include "cowstate/spill_context.h"
#include "cowstate/status.h"
#include "cowstate/ttl.h"

namespace cowstate {

// The kinds of keyed state (Flink's StateDescriptor.Type). Stored in checkpoints: never
// renumber.
enum class StateKind : std::uint8_t { value = 1, list = 2, map = 3, reducing = 4, aggregating = 5 };

inline const char* state_kind_name(StateKind k) noexcept {
  switch (k) {
    case StateKind::value:
      return "value";
    case StateKind::list:
      return "list";
    case StateKind::map:
      return "map";
    case StateKind::reducing:
      return "reducing";
    case StateKind::aggregating:
      return "aggregating";
  }
  return "unknown";
}

// The earlier name of StateTtlConfig (ttl.h).
using TtlConfig = StateTtlConfig;

// Per-state options at registration.
struct StateOptions {
  std::optional<StateTtlConfig> ttl;
};

// What a checkpoint records about a state. Identity is the name; the serializer ids say
// how its bytes read back (0 = not used by this kind).
struct StateMetaInfo {
  std::string name;
  StateKind kind = StateKind::value;
  std::uint16_t namespace_serializer = 0;
  std::uint16_t state_serializer = 0;
  std::uint16_t element_serializer = 0;  // list element, or map user key
  std::uint16_t value_serializer = 0;    // map user value
  std::optional<StateTtlConfig> ttl;
  friend bool operator==(const StateMetaInfo&, const StateMetaInfo&) = default;
};

namespace detail {
// Element serializer ids of a state serializer, as recorded in StateMetaInfo.
template <class SS>
struct ElementSerializerIds {
  static constexpr std::uint16_t element = 0;
  static constexpr std::uint16_t value = 0;
};
template <class ES>
struct ElementSerializerIds<ListSerializer<ES>> {
  static constexpr std::uint16_t element = ES::id;
  static constexpr std::uint16_t value = 0;
};
template <class UKS, class UVS>
struct ElementSerializerIds<MapSerializer<UKS, UVS>> {
  static constexpr std::uint16_t element = UKS::id;
  static constexpr std::uint16_t value = UVS::id;
};

}  // namespace detail

// What a key group's map snapshot knows of the changes since its map's last completed
// checkpoint (incremental checkpoints; cow_state_map.h, "Change tracking").
struct KeyGroupChanges {
  bool tracked = false;   // a heap map that tracks its changes
  bool has_base = false;  // and a checkpoint of it completed: a delta can be written
  std::size_t bound = 0;  // the delta has at most this many records
  // Which map and snapshot, for StateTableBase::checkpoint_completed.
  std::uint64_t generation = 0;
  std::uint32_t version = 0;
};

// One state's frozen entries in one key group, written in bounded steps. Owns the map
// snapshot; releasing it (explicitly, or by destruction) lets the map free what only the
// snapshot still needed.
//
// A delta (write_delta() before the first write) writes instead the records that turn the
// image of its map's last completed checkpoint into this one: a removal (record kind 0,
// key, namespace) per tombstone, then a put (kind 1, key, namespace, state) per changed
// entry, or a removal where full-snapshot TTL cleanup finds nothing of it live. write()
// then consumes and emits records, records() of them at most (changes().bound); size()
// stays the frozen view's entries.
class KeyGroupStateSnapshot {
 public:
  virtual ~KeyGroupStateSnapshot() = default;
  virtual KeyGroupChanges changes() const noexcept { return {}; }
  // REQUIRES: changes().has_base; nothing written yet.
  virtual void write_delta() {
    COWSTATE_ASSERT(false, "REQUIRES", "a delta of a snapshot without a change base");
  }
  // Entries in the frozen view.
  virtual std::size_t size() const noexcept = 0;
  // At most what write() emits in all: size(), or a delta's bound.
  virtual std::size_t records() const noexcept { return size(); }
  // Consumes at most `max_entries` entries of the frozen view and appends those it keeps
  // to `out`; returns how many it consumed. Without full-snapshot TTL cleanup it keeps
  // every entry; with it, it leaves out the expired ones (judged by the clock as they are
  // written). REQUIRES: !released().
  virtual std::size_t write(ByteWriter& out, std::size_t max_entries) = 0;
  // Entries appended to an output so far (<= entries consumed).
  virtual std::size_t emitted() const noexcept = 0;
  // All size() entries were consumed.
  virtual bool done() const noexcept = 0;
  // Idempotent; any thread.
  virtual void release() noexcept = 0;
  virtual bool released() const noexcept = 0;
};

// What one (state, key group) holds, as the metrics and the spill/load manager see it.
struct KeyGroupMemory {
  std::uint64_t entries = 0;
  std::uint64_t bytes = 0;          // in memory, retired bytes included
  std::uint64_t retired_bytes = 0;  // held only for live snapshots
  Tier tier = Tier::heap;
};

// A state's table, without its types.
class StateTableBase {
 public:
  StateTableBase(StateMetaInfo meta, KeyGroupRange range, std::int32_t max_parallelism,
                 SpillContext* spill = nullptr)
      : meta_(std::move(meta)),
        range_(range),
        max_parallelism_(max_parallelism),
        spill_(spill),
        rates_(static_cast<std::size_t>(range.size())) {
    COWSTATE_ASSERT(max_parallelism >= 1 && max_parallelism <= kUpperBoundMaxParallelism, "K1",
                    "max parallelism out of [1, 32768]");
    COWSTATE_ASSERT(range.empty() || range.end() < max_parallelism, "K2",
                    "key group range beyond max parallelism");
  }
  virtual ~StateTableBase() = default;
  StateTableBase(const StateTableBase&) = delete;
  StateTableBase& operator=(const StateTableBase&) = delete;

  const StateMetaInfo& meta() const noexcept { return meta_; }
  KeyGroupRange range() const noexcept { return range_; }
  std::int32_t max_parallelism() const noexcept { return max_parallelism_; }

  // Entries over all key groups.
  virtual std::size_t size() const noexcept = 0;
  // Entries in key group `key_group`. REQUIRES: range().contains(key_group) (B1).
  virtual std::size_t size(std::int32_t key_group) const = 0;
  // Starts a snapshot of one key group's map; nullptr when it is empty (nothing to
  // protect, nothing to write), unless `keep_empty` and its map is a heap map that tracks
  // changes (its tombstones may matter). Writer thread. REQUIRES: B1.
  virtual std::unique_ptr<KeyGroupStateSnapshot> snapshot_key_group(std::int32_t key_group,
                                                                    bool keep_empty = false) = 0;
  // The checkpoint of snapshot `changes` (from a snapshot of `key_group`) completed: the
  // key group's map takes that snapshot as its change base, unless the map was replaced
  // since (a spill, a load: another generation). Writer thread. REQUIRES: B1.
  virtual void checkpoint_completed(std::int32_t key_group, const KeyGroupChanges& changes) = 0;
  // A table of the same types and metadata, with empty maps for `range`.
  virtual std::unique_ptr<StateTableBase> make_empty(KeyGroupRange range) const = 0;
  // Decodes `count` entries of key group `key_group` from `r` into this table. Every
  // malformed value, a key of another key group and a duplicate (key, namespace) are
  // errors. REQUIRES: B1; the key group's map is empty.
  virtual Status read_entries(ByteReader& r, std::int32_t key_group, std::uint64_t count) = 0;
  // Applies `count` delta records of key group `key_group` from `r` (removals and puts,
  // KeyGroupStateSnapshot) to this table, in order. A malformed record or a key of another
  // key group is an error. REQUIRES: B1.
  virtual Status apply_delta(ByteReader& r, std::int32_t key_group, std::uint64_t count) = 0;
  // Fewest bytes one entry takes (bounds a count before anything is allocated).
  virtual std::size_t min_entry_size() const noexcept = 0;
  // A live map snapshot exists in some key group (the highest required version is not 0),
  // or a spilled map is still retired for one.
  virtual bool has_live_snapshot() const noexcept = 0;
  // Deep check of every map (CowStateMap::check_invariants).
  virtual bool check_invariants(std::string* why = nullptr) const = 0;

  // Memory accounting and the spill tier (spill_tier.h has the rules). Writer thread.
  // What key group `key_group` holds; O(1). REQUIRES: B1.
  virtual KeyGroupMemory memory(std::int32_t key_group) const = 0;
  // Moves key group `key_group` to the cold tier / back to a heap map. An error (the cold
  // tier failed) leaves it where it was. REQUIRES: a cold tier; the key group is in the other
  // tier (B1).
  virtual Status spill(std::int32_t key_group) = 0;
  virtual Status load(std::int32_t key_group) = 0;
  // Frees the spilled heap maps no live snapshot reads any more, and what the heap maps
  // retired for snapshots since released; returns how many spilled maps remain retired.
  virtual std::size_t release_retired_maps() = 0;
  // Recounts every key group's memory from scratch and compares it with memory() (M1, M2).
  virtual bool check_accounting(std::string* why = nullptr) const = 0;
  // Bytes of the cache of hot entries of spilled key groups (cold_cache.h); O(1).
  virtual std::size_t cache_bytes() const = 0;
  // Lookups of the cache that found the entry / did not (every cold access makes one).
  virtual std::uint64_t cache_hits() const = 0;
  virtual std::uint64_t cache_misses() const = 0;
  // Writes the cache's dirty entries to the cold tier (before a checkpoint's read
  // transaction begins).
  virtual void flush_cold_cache() = 0;
  // The request rate of key group `key_group` (hit on every access through a state handle).
  RequestRate& rate(std::int32_t key_group) {
    COWSTATE_ASSERT(range_.contains(key_group), "B1", "key group outside the table's range");
    return rates_[static_cast<std::size_t>(key_group - range_.start())];
  }

 protected:
  SpillContext* spill_context() const noexcept { return spill_; }
  void hit(std::size_t index) noexcept { rates_[index].hit(); }

 private:
  StateMetaInfo meta_;
  KeyGroupRange range_;
  std::int32_t max_parallelism_;
  SpillContext* spill_;
  std::vector<RequestRate> rates_;  // by key group - range.start
};

template <class KS, class NS, class SS, class KH = KeyHash<typename KS::value_type>>
class StateTable final : public StateTableBase {
 public:
  using K = typename KS::value_type;
  using N = typename NS::value_type;
  using S = typename SS::value_type;
  using Map = CowStateMap<K, N, S>;
  static_assert(Serializer<KS, K> && Serializer<NS, N> && Serializer<SS, S>);
  class Access;  // a key group's map in either tier, as the state handles use it

  // `clock` judges expiry for full-snapshot cleanup of a TTL state (unused otherwise);
  // `spill` is the backend's spill tier (nullptr: none).
  // REQUIRES: a clock when meta.ttl asks for full-snapshot cleanup; it and `spill` outlive
  // the table.
  StateTable(StateMetaInfo meta, KeyGroupRange range, std::int32_t max_parallelism,
             MapOptions options, const TtlTimeProvider* clock = nullptr,
             SpillContext* spill = nullptr)
      : StateTableBase(std::move(meta), range, max_parallelism, spill),
        options_(options),
        clock_(clock),
        cold_id_(spill != nullptr && spill->store != nullptr ? spill->store->new_table_id() : 0),
        cold_entries_(static_cast<std::size_t>(range.size()), 0),
        generations_(static_cast<std::size_t>(range.size()), 0) {
    if (spill != nullptr) ++spill->tables;
    COWSTATE_ASSERT(!full_snapshot_cleanup() || clock_ != nullptr, "L1",
                    "full-snapshot TTL cleanup without a clock");
    maps_.reserve(static_cast<std::size_t>(range.size()));
    for (std::int32_t i = 0; i < range.size(); ++i) maps_.push_back(std::make_unique<Map>(options));
    COWSTATE_ASSERT(maps_.size() == static_cast<std::size_t>(range.size()), "B1",
                    "one map per key group");
  }
  ~StateTable() override;

  // The heap map of key group `key_group`. Writer thread. REQUIRES: B1; the key group is
  // in the heap tier (tests and the simulator; state handles go through access()).
  Map& map(std::int32_t key_group) {
    Map* m = maps_[index_of(key_group)].get();
    COWSTATE_ASSERT(m != nullptr, "B1", "the heap map of a spilled key group");
    return *m;
  }
  const Map& map(std::int32_t key_group) const {
    const Map* m = maps_[index_of(key_group)].get();
    COWSTATE_ASSERT(m != nullptr, "B1", "the heap map of a spilled key group");
    return *m;
  }
  // The heap map of key group `key_group`, or nullptr when it is spilled. REQUIRES: B1.
  Map* heap_map(std::int32_t key_group) noexcept { return maps_[index_of(key_group)].get(); }
  // Key group `key_group` in whichever tier it is, counting one request. REQUIRES: B1.
  [[gnu::always_inline]] Access access(std::int32_t key_group);

  std::size_t size() const noexcept override {
    std::size_t n = 0;
    for (std::size_t i = 0; i < maps_.size(); ++i) {
      n += maps_[i] != nullptr ? maps_[i]->size() : cold_entries_[i];
    }
    return n;
  }
  std::size_t size(std::int32_t key_group) const override {
    const std::size_t i = index_of(key_group);
    return maps_[i] != nullptr ? maps_[i]->size() : cold_entries_[i];
  }

  std::unique_ptr<KeyGroupStateSnapshot> snapshot_key_group(std::int32_t key_group,
                                                            bool keep_empty = false) override;
  void checkpoint_completed(std::int32_t key_group, const KeyGroupChanges& changes) override {
    const std::size_t i = index_of(key_group);
    if (maps_[i] == nullptr || generations_[i] != changes.generation) return;
    maps_[i]->checkpoint_completed(changes.version);
  }
  std::unique_ptr<StateTableBase> make_empty(KeyGroupRange range) const override {
    return std::make_unique<StateTable>(meta(), range, max_parallelism(), options_, clock_,
                                        spill_context());
  }
  Status read_entries(ByteReader& r, std::int32_t key_group, std::uint64_t count) override;
  Status apply_delta(ByteReader& r, std::int32_t key_group, std::uint64_t count) override;
  std::size_t min_entry_size() const noexcept override { return kMinEntry; }
  bool has_live_snapshot() const noexcept override {
    return !retired_maps_.empty() || std::any_of(maps_.begin(), maps_.end(), [](const auto& m) {
      return m != nullptr && m->highest_required_version() != 0;
    });
  }
  bool check_invariants(std::string* why = nullptr) const override {
    return std::all_of(maps_.begin(), maps_.end(),
                       [why](const auto& m) { return m == nullptr || m->check_invariants(why); });
  }

  KeyGroupMemory memory(std::int32_t key_group) const override;
  Status spill(std::int32_t key_group) override;
  Status load(std::int32_t key_group) override;
  // fn(key, ns, state) for every entry of `key_group` in whichever tier it is: a spilled
  // key group's cold range with its cached entries over it. Changes nothing (no write-back,
  // no cache reference bit), so a checker may call it between any two operations.
  // REQUIRES: B1.
  template <class F>
  void for_each_in_tier(std::int32_t key_group, F&& fn);
  std::size_t release_retired_maps() override;
  bool check_accounting(std::string* why = nullptr) const override;
  std::size_t cache_bytes() const override { return cache_.bytes(); }
  std::uint64_t cache_hits() const override { return cache_.hits(); }
  std::uint64_t cache_misses() const override { return cache_.misses(); }
  void flush_cold_cache() override { flush_cached(-1); }

  // The cold tier's side of Access (state_table_cold.h). REQUIRES: the key group is spilled.
  const S* cold_get(std::int32_t key_group, const K& key, const N& ns);
  S* cold_get_mutable(std::int32_t key_group, const K& key, const N& ns);
  void cold_put(std::int32_t key_group, const K& key, const N& ns, const S& state);
  bool cold_remove(std::int32_t key_group, const K& key, const N& ns);

 private:
  static constexpr std::size_t kMinEntry =
      serializer_min_size<KS>() + serializer_min_size<NS>() + serializer_min_size<SS>();
  static constexpr std::size_t kKeyWidth = detail::fixed_width<KS>();
  static constexpr std::size_t kNsWidth = detail::fixed_width<NS>();
  static constexpr std::size_t kStateWidth = detail::fixed_width<SS>();
  // Key and namespace take the same bytes in every record.
  static constexpr bool kFixedPrefix = kKeyWidth != std::numeric_limits<std::size_t>::max() &&
                                       kNsWidth != std::numeric_limits<std::size_t>::max();
  static constexpr bool kFixed =
      kFixedPrefix && kStateWidth != std::numeric_limits<std::size_t>::max();
  // Every serializer stores directly (DirectSerializer): entries skip ByteWriter's appends.
  static constexpr bool kDirect = kFixed && DirectRecord<KS, K, NS, N, SS, S>;
  // Key and namespace store directly, the state knows its size (SizedDirectSerializer).
  static constexpr bool kSizedDirect = !kDirect && kFixedPrefix && DirectSerializer<KS, K> &&
                                       DirectSerializer<NS, N> && SizedDirectSerializer<SS, S>;
  class Snapshot;
  class ColdSnapshot;
  // A spilled heap map that a live snapshot still reads (spill_tier.h, rule 2).
  struct RetiredMap {
    std::int32_t key_group;
    std::unique_ptr<Map> map;
  };

  // Whether snapshots of this table leave out expired entries and elements.
  bool full_snapshot_cleanup() const noexcept {
    return detail::kIsTtlStored<SS> && meta().ttl.has_value() && meta().ttl->full_snapshot_cleanup;
  }
  const StateTtlConfig* snapshot_ttl() const noexcept {
    return full_snapshot_cleanup() ? &*meta().ttl : nullptr;
  }

  [[gnu::always_inline]] std::size_t index_of(std::int32_t key_group) const {
    COWSTATE_ASSERT(range().contains(key_group), "B1", "key group outside the table's range");
    const auto i = static_cast<std::size_t>(key_group - range().start());
    COWSTATE_ASSERT(i < maps_.size(), "B1", "key group index beyond the maps");
    return i;
  }
  ColdStore& store() const {
    COWSTATE_ASSERT(spill_context() != nullptr && spill_context()->store != nullptr, "P1",
                    "a cold-tier call on a backend without a cold tier");
    return *spill_context()->store;
  }
  using Slot = typename ColdCache<K, N, S>::Slot;
  // The cold key of (key group, key, ns) in key_buf_ (P2).
  std::span<const std::byte> cold_key(std::int32_t key_group, const K& key, const N& ns);
  // The cache slot of (key group, key, ns), fetched from the cold tier on a miss; nullptr
  // when the key is in neither.
  Slot* cached(std::int32_t key_group, const K& key, const N& ns);
  // Evicts cache entries (writing back dirty ones) until one more fits; called before the
  // cold tier is read for an entry to cache, while its cursor still stands on the victim.
  void make_cache_room();
  // Inserts into the cache (within its share of the budget), writing back dirty victims.
  Slot& cache_insert(std::int32_t key_group, const K& key, const N& ns, S state, bool dirty,
                     bool in_store);
  // Writes a dirty slot to the cold tier.
  void write_back(Slot& slot);
  // Writes back the dirty slots of `key_group` (-1: all).
  void flush_cached(std::int32_t key_group);
  // The error for a record at offset `at` of `r` whose key hashes to key group `found`
  // in a block of `key_group` (restore and delta alike).
  Status wrong_key_group(const ByteReader& r, std::size_t at, std::int32_t key_group,
                         std::int32_t found) const {
    return r.error_at(at, "expected a key of key group " + std::to_string(key_group) +
                              " (state \"" + meta().name + "\"), found one of key group " +
                              std::to_string(found) +
                              ": written with another key hash or max parallelism, or corrupt");
  }
  // Decodes `count` records of `r` into a fresh heap map of key group slot `i`.
  Status read_entries_heap(ByteReader& r, std::size_t i, std::int32_t key_group,
                           std::uint64_t count);
  // Decodes `count` records of `r` straight into the cold tier (restore over the budget).
  Status read_entries_cold(ByteReader& r, std::size_t i, std::int32_t key_group,
                           std::uint64_t count);
  // Writes every entry of heap map `m` into the cold range of `key_group`.
  void write_cold(std::int32_t key_group, const Map& m);
  // Records bound for one cold range, encoded into one buffer and stored in key order:
  // inserted in order, a range fills LMDB's pages one after another (a fresh table's range,
  // which sorts after everything, is appended; ColdStore::insert_sorted), where inserts in
  // hash order each search the tree from its root.
  struct ColdBatch {
    struct Record {
      std::size_t key_at, key_size, value_at, value_size, file_offset;
    };
    ByteWriter buf;
    std::vector<Record> records;
  };
  void add_cold(ColdBatch& batch, std::int32_t key_group, const K& key, const N& ns, const S& state,
                std::size_t file_offset);
  // Sorts the batch by cold key; returns the position of the first record whose key the
  // one before it has, if any.
  static std::optional<std::size_t> sort_cold(ColdBatch& batch);
  // Stores a sorted batch; returns how many records were stored before the first whose
  // key the store held (all of them when none).
  std::size_t store_cold(const ColdBatch& batch);
  // Under the planted bug spill_frees_snapshot_map: what freeing `map` would do to its
  // snapshots, without freeing it (state_table_cold.h).
  void quarantine_freed(std::unique_ptr<Map> map);

  // Set at construction.
  MapOptions options_;
  const TtlTimeProvider* clock_;
  std::uint32_t cold_id_;  // this table's ranges in the cold tier (P2); 0 without one

  // Writer thread only (the maps themselves say what snapshots may touch).
  std::vector<std::unique_ptr<Map>> maps_;   // nullptr: spilled
  std::vector<std::uint64_t> cold_entries_;  // entries of each spilled key group
  // Bumped whenever a key group's map is replaced (spill, load, restore), so a completion
  // meant for an earlier map is not taken by a later one.
  std::vector<std::uint64_t> generations_;
  std::uint64_t next_generation_ = 0;
  std::vector<RetiredMap> retired_maps_;
  std::vector<std::unique_ptr<Map>> freed_maps_;  // only under spill_frees_snapshot_map
  ByteWriter key_buf_;
  ByteWriter value_buf_;
  // Hot entries of the spilled key groups; a cold state is handed out from here.
  ColdCache<K, N, S> cache_;
  ByteWriter write_back_key_;  // a victim's cold key (key_buf_ may hold the current one)
};

// The typed snapshot of one map: the map snapshot plus a Scan that resumes across steps.
// With full-snapshot TTL cleanup it reads the clock as it writes each entry and leaves out
// what is expired then (L5).
template <class KS, class NS, class SS, class KH>
class StateTable<KS, NS, SS, KH>::Snapshot final : public KeyGroupStateSnapshot {
 public:
  // `ttl`: the table's TTL config when snapshots clean up expired state, else nullptr;
  // `start`: the time at the sync phase.
  // `tracked`: the map tracks its changes; `generation`: the map's, in its table.
  Snapshot(typename Map::Snapshot snap, const StateTtlConfig* ttl, const TtlTimeProvider* clock,
           std::int64_t start, bool tracked = false, std::uint64_t generation = 0)
      : snap_(std::move(snap)),
        ttl_(ttl),
        clock_(clock),
        start_(start),
        tracked_(tracked),
        generation_(generation) {
    COWSTATE_ASSERT(snap_.valid(), "B2", "snapshotting into a released map snapshot");
    COWSTATE_ASSERT(ttl_ == nullptr || clock_ != nullptr, "L5", "TTL cleanup without a clock");
  }
  std::size_t size() const noexcept override { return snap_.size(); }
  std::size_t records() const noexcept override {
    return as_delta_ ? snap_.change_bound() : snap_.size();
  }
  std::size_t emitted() const noexcept override { return emitted_; }
  bool done() const noexcept override {
    return as_delta_ ? started_ && delta_at_ == delta_.size() : written_ == snap_.size();
  }
  void release() noexcept override { snap_.release(); }
  bool released() const noexcept override { return snap_.released(); }
  KeyGroupChanges changes() const noexcept override {
    if (!tracked_) return {};
    return {true, snap_.has_change_base(), snap_.change_bound(), generation_, snap_.version()};
  }
  void write_delta() override {
    COWSTATE_ASSERT(tracked_ && snap_.has_change_base() && !started_, "REQUIRES",
                    "a delta of a snapshot without a change base, or begun");
    as_delta_ = true;
  }

  std::size_t write(ByteWriter& out, std::size_t max_entries) override {
    COWSTATE_ASSERT(!snap_.released(), "B2", "writing a released key-group snapshot");
    if (as_delta_) return write_delta_records(out, max_entries);
    if (!started_) {  // the scan's bitmap is built on first use, on the writing thread
      scan_ = snap_.scan();
      started_ = true;
    }
    const std::size_t budget = std::min(max_entries, snap_.size() - written_);
    std::size_t n = 0;
    if constexpr (detail::kIsTtlStored<SS>) {
      if (ttl_ != nullptr) {
        const std::int64_t ttl = ttl_->ttl();
        for (; n < budget && !scan_.done(); ++n) {
          // L5: judged as this entry is written (the mutant: at the sync phase).
          const std::int64_t now =
              COWSTATE_MUTANT(ttl_full_snapshot_at_start) ? start_ : clock_->now();
          const auto e = scan_.get();
          const std::size_t at = out.size();
          KS::write(out, e.key);
          NS::write(out, e.ns);
          if (ttl_write_live<SS>(out, e.state, ttl, now)) {
            ++emitted_;
          } else {
            out.truncate(at);  // nothing of it is live: the entry is left out
          }
          scan_.next();
          if (n + 1 < budget && !scan_.done()) COWSTATE_YIELD("checkpoint_writer.entry");
        }
        return finish_step(n);
      }
    }
    if constexpr (kDirect || kSizedDirect) {
      // Records stored straight into room made once for the step (fixed-size records) or
      // once per record (a state of known size): no bounds check per value. The scan is a
      // local while it runs: stores through std::byte* could alias a member.
      typename Map::Snapshot::Scan scan = std::move(scan_);
      std::byte* p = nullptr;
      if constexpr (kDirect) p = out.begin_direct(budget * (kKeyWidth + kNsWidth + kStateWidth));
      for (; n < budget && !scan.done(); ++n) {
        const auto e = scan.get();
        if constexpr (kSizedDirect) {
          p = out.begin_direct(kKeyWidth + kNsWidth + SS::stored_size(e.state));
        }
        p = KS::store(p, e.key);
        p = NS::store(p, e.ns);
        p = SS::store(p, e.state);
        if constexpr (kSizedDirect) out.commit(p);
        scan.next();
        // In simulator builds the map's writer may run here, between two entries.
        if (n + 1 < budget && !scan.done()) COWSTATE_YIELD("checkpoint_writer.entry");
      }
      if constexpr (kDirect) out.commit(p);
      scan_ = std::move(scan);
    } else {
      if constexpr (kFixed) out.ensure(budget * (kKeyWidth + kNsWidth + kStateWidth));
      for (; n < budget && !scan_.done(); ++n) {
        const auto e = scan_.get();
        KS::write(out, e.key);
        NS::write(out, e.ns);
        SS::write(out, e.state);
        scan_.next();
        // In simulator builds the map's writer may run here, between two entries.
        if (n + 1 < budget && !scan_.done()) COWSTATE_YIELD("checkpoint_writer.entry");
      }
    }
    emitted_ += n;
    return finish_step(n);
  }

 private:
  std::size_t finish_step(std::size_t n) {
    written_ += n;
    COWSTATE_ASSERT(written_ <= snap_.size(), "B2", "more entries written than the snapshot holds");
    COWSTATE_ASSERT(written_ < snap_.size() || scan_.done(), "B2",
                    "the scan has entries beyond the snapshot's size");
    COWSTATE_ASSERT(emitted_ <= written_, "B2", "more entries emitted than consumed");
    return n;
  }

  // One record of a delta: a removal when `state` is nullptr, else a put. The pointers are
  // into the snapshot's entries and captured records, valid while it is.
  struct DeltaRecord {
    const K* key;
    const N* ns;
    const S* state;  // null for a removal
    DeltaRecordKind kind() const noexcept {
      return state != nullptr ? DeltaRecordKind::put : DeltaRecordKind::remove;
    }
  };

  // The records of the delta, gathered on first use (on the writing thread), then written
  // at most `max_entries` a step.
  std::size_t write_delta_records(ByteWriter& out, std::size_t max_entries) {
    if (!started_) {
      delta_.reserve(snap_.change_bound());
      snap_.for_each_tombstone([&](const K& k, const N& n) {
        delta_.push_back({&k, &n, nullptr});
      });
      snap_.for_each_changed([&](const K& k, const N& n, const S& st) {
        delta_.push_back({&k, &n, &st});
      });
      started_ = true;
    }
    std::size_t n = 0;
    if constexpr (kDirect) {  // fixed-size records stored straight into room made once
      if (ttl_ == nullptr) {
        const std::size_t budget = std::min(max_entries, delta_.size() - delta_at_);
        std::byte* p = out.begin_direct(budget * (1 + kKeyWidth + kNsWidth + kStateWidth));
        for (; n < budget; ++n, ++delta_at_) {
          const DeltaRecord& d = delta_[delta_at_];
          *p++ = std::byte{static_cast<std::uint8_t>(d.kind())};
          p = KS::store(p, *d.key);
          p = NS::store(p, *d.ns);
          if (d.state != nullptr) p = SS::store(p, *d.state);
          ++emitted_;
          if (n + 1 < budget) COWSTATE_YIELD("checkpoint_writer.entry");
        }
        out.commit(p);
        return n;
      }
    }
    for (; n < max_entries && delta_at_ < delta_.size(); ++n, ++delta_at_) {
      const DeltaRecord& d = delta_[delta_at_];
      const std::size_t at = out.size();
      out.put_u8(static_cast<std::uint8_t>(d.kind()));
      KS::write(out, *d.key);
      NS::write(out, *d.ns);
      if (d.state != nullptr && !write_live_state(out, *d.state)) {
        out.truncate(at);  // nothing of it is live: the base's copy must go
        out.put_u8(static_cast<std::uint8_t>(DeltaRecordKind::remove));
        KS::write(out, *d.key);
        NS::write(out, *d.ns);
      }
      ++emitted_;
      if (n + 1 < max_entries && delta_at_ + 1 < delta_.size()) {
        COWSTATE_YIELD("checkpoint_writer.entry");
      }
    }
    return n;
  }
  // Writes `state`, less what full-snapshot TTL cleanup leaves out (L5); false when that
  // is all of it.
  bool write_live_state(ByteWriter& out, const S& state) {
    if constexpr (detail::kIsTtlStored<SS>) {
      if (ttl_ != nullptr) return ttl_write_live<SS>(out, state, ttl_->ttl(), clock_->now());
    }
    SS::write(out, state);
    return true;
  }

  typename Map::Snapshot snap_;
  typename Map::Snapshot::Scan scan_;
  const StateTtlConfig* ttl_;
  const TtlTimeProvider* clock_;
  std::int64_t start_;
  bool tracked_;
  std::uint64_t generation_;
  std::size_t written_ = 0;
  std::size_t emitted_ = 0;
  bool started_ = false;
  bool as_delta_ = false;
  std::vector<DeltaRecord> delta_;
  std::size_t delta_at_ = 0;
};

template <class KS, class NS, class SS, class KH>
std::unique_ptr<KeyGroupStateSnapshot> StateTable<KS, NS, SS, KH>::snapshot_key_group(
    std::int32_t key_group, bool keep_empty) {
  const std::size_t i = index_of(key_group);
  const StateTtlConfig* ttl = snapshot_ttl();
  const std::int64_t start = ttl != nullptr ? clock_->now() : 0;
  if (maps_[i] == nullptr) {  // spilled: its read transaction (spill_tier.h, rule 3)
    if (cold_entries_[i] == 0) return nullptr;
    return std::make_unique<ColdSnapshot>(spill_context()->sync_read_txn(),
                                          cold_prefix(cold_id_, key_group), cold_entries_[i], ttl,
                                          clock_, spill_context()->store);
  }
  Map& m = *maps_[i];
  if (m.empty() && !(keep_empty && m.tracks_changes())) return nullptr;
  auto s = std::make_unique<Snapshot>(m.snapshot(), ttl, clock_, start, m.tracks_changes(),
                                      generations_[i]);
  COWSTATE_ASSERT(s->size() == m.size(), "B2", "snapshot size differs from the map's");
  return s;
}

template <class KS, class NS, class SS, class KH>
Status StateTable<KS, NS, SS, KH>::read_entries(ByteReader& r, std::int32_t key_group,
                                                std::uint64_t count) {
  const std::size_t i = index_of(key_group);
  COWSTATE_ASSERT(maps_[i] != nullptr && maps_[i]->empty() && cold_entries_[i] == 0, "B1",
                  "decoding into a non-empty key group");
  if (kMinEntry > 0 && count > r.remaining() / kMinEntry) {
    return r.error_at(r.offset(), "expected at most " + std::to_string(r.remaining() / kMinEntry) +
                                      " entries of state \"" + meta().name + "\" in the " +
                                      std::to_string(r.remaining()) +
                                      " bytes left, found a count of " + std::to_string(count));
  }
  SpillContext* ctx = spill_context();
  if (ctx != nullptr && ctx->restore_to_cold()) return read_entries_cold(r, i, key_group, count);
  if (Status st = read_entries_heap(r, i, key_group, count); !st.ok()) return st;
  if (ctx == nullptr || ctx->store == nullptr) return Status();
  // The restore's memory limit (spill_tier.h, rule 6): the key group that crosses it goes to
  // the cold tier at once.
  ctx->restore_heap_bytes += maps_[i]->memory_bytes();
  if (!ctx->restore_to_cold()) return Status();
  return spill(key_group);
}

template <class KS, class NS, class SS, class KH>
Status StateTable<KS, NS, SS, KH>::read_entries_heap(ByteReader& r, std::size_t i,
                                                     std::int32_t key_group, std::uint64_t count) {
  auto fresh = std::make_unique<Map>(options_);
  K key{};
  N ns{};
  S state{};
  const KeyGroupAssigner key_group_of(max_parallelism());
  const auto read_entry = [&]() -> Status {
    const std::size_t at = r.offset();
    state = S{};
    if (Status st = read_record<KS, NS, SS>(r, key, ns, state); !st.ok()) return st;
    const std::int32_t g = key_group_of(KH{}(key));
    return g == key_group ? Status() : wrong_key_group(r, at, key_group, g);
  };
  const std::size_t begin = r.offset();
  typename Map::Loader loader =
      fresh->load(kMinEntry > 0 ? count : std::min<std::uint64_t>(count, r.remaining()));
  bool read = false;
  if constexpr (constexpr std::size_t kWidth = fixed_record_width<KS, NS, SS, K, N, S>();
                kWidth > 0) {
    if (count <= r.remaining() / kWidth) {
      // Every record is there: one bounds check for the key group, none per field. A key of
      // another key group is read again by read_entry, which reports it.
      const std::byte* p = r.take(count * kWidth);
      for (std::uint64_t e = 0; e < count; ++e) {
        p = SS::load(NS::load(KS::load(p, key), ns), state);
        if (key_group_of(KH{}(key)) != key_group) [[unlikely]] {
          r.seek(begin + static_cast<std::size_t>(e) * kWidth);
          return read_entry();
        }
        loader.add(key, ns, std::move(state));
      }
      read = true;
    }
  }
  for (std::uint64_t e = 0; !read && e < count; ++e) {
    if (Status st = read_entry(); !st.ok()) return st;
    loader.add(key, ns, std::move(state));
  }
  if (const std::optional<std::size_t> dup = loader.finish()) {
    // Read again up to the duplicate, for its offset: every entry before it read well.
    const std::size_t end = r.offset();
    r.seek(begin);
    for (std::size_t e = 0; e < *dup; ++e) (void)read_entry();
    const std::size_t at = r.offset();
    r.seek(end);
    return r.error_at(at, "expected a (key, namespace) not seen before in state \"" + meta().name +
                              "\", found a duplicate");
  }
  COWSTATE_ASSERT(fresh->size() == count, "B2", "decoded map size differs from the count");
  maps_[i] = std::move(fresh);
  generations_[i] = ++next_generation_;
  return Status();
}

template <class KS, class NS, class SS, class KH>
Status StateTable<KS, NS, SS, KH>::apply_delta(ByteReader& r, std::int32_t key_group,
                                               std::uint64_t count) {
  const std::size_t i = index_of(key_group);
  constexpr std::size_t kMinRecord = 1 + serializer_min_size<KS>() + serializer_min_size<NS>();
  if (count > r.remaining() / kMinRecord) {
    return r.error_at(r.offset(), "expected at most " + std::to_string(r.remaining() / kMinRecord) +
                                      " delta records of state \"" + meta().name + "\" in the " +
                                      std::to_string(r.remaining()) +
                                      " bytes left, found a count of " + std::to_string(count));
  }
  const KeyGroupAssigner key_group_of(max_parallelism());
  const std::size_t heap_before =
      maps_[i] != nullptr && !maps_[i]->empty() ? maps_[i]->memory_bytes() : 0;
  K key{};
  N ns{};
  for (std::uint64_t e = 0; e < count; ++e) {
    const std::size_t at = r.offset();
    DeltaRecordKind kind{};
    if (Status st = read_delta_record_kind(r, kind); !st.ok()) return st;
    if (Status st = KS::read(r, key); !st.ok()) return st;
    if (Status st = NS::read(r, ns); !st.ok()) return st;
    const std::int32_t g = key_group_of(KH{}(key));
    if (g != key_group) return wrong_key_group(r, at + 1, key_group, g);
    if (kind == DeltaRecordKind::remove) {
      if (maps_[i] != nullptr) {
        maps_[i]->remove(key, ns);
      } else {
        (void)cold_remove(key_group, key, ns);
      }
      continue;
    }
    S state{};
    if (Status st = SS::read(r, state); !st.ok()) return st;
    if (maps_[i] != nullptr) {
      maps_[i]->put(key, ns, std::move(state));
    } else {
      cold_put(key_group, key, ns, state);
    }
  }
  // The restore's memory limit (spill_tier.h, rule 6) counts what a delta adds to a heap map
  // as it counts a decoded block: the key group that crosses it goes to the cold tier.
  // Planted bug: the delta's records stay in the heap uncounted.
  if (COWSTATE_MUTANT(delta_restore_outside_limit)) return Status();
  SpillContext* ctx = spill_context();
  if (maps_[i] == nullptr || ctx == nullptr || ctx->store == nullptr) return Status();
  const std::size_t heap_after = maps_[i]->memory_bytes();
  ctx->restore_heap_bytes += heap_after - std::min(heap_before, heap_after);
  if (!ctx->restore_to_cold() || maps_[i]->empty()) return Status();
  return spill(key_group);
}

}  // namespace cowstate

#include "cowstate/state_table_cold.h"  // IWYU pragma: export
