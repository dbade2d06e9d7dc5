// The spill tier's side of StateTable (state_table.h): the Access facade the state handles
// use, spill and load of one key group, the cold tier's reads and writes, the snapshot of a
// spilled key group, memory accounting and its recount. spill_tier.h states the rules and
// invariants; this file implements them for one table. Included at the end of state_table.h.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cowstate/cow_state_map_access.h"
#include "cowstate/state_table.h"

namespace cowstate {

namespace detail {
// Sets every last-access time a TTL state holds to `t` (the planted bug
// load_loses_ttl_timestamps).
template <class V>
void stamp_all(TtlValue<V>& v, std::int64_t t) noexcept {
  v.last_access = t;
}
template <class E>
void stamp_all(std::vector<TtlValue<E>>& list, std::int64_t t) noexcept {
  for (TtlValue<E>& e : list) e.last_access = t;
}
template <class UK, class UV>
void stamp_all(std::map<UK, TtlValue<UV>>& map, std::int64_t t) noexcept {
  for (auto& [key, v] : map) v.last_access = t;
}
}  // namespace detail

// A key group's map in either tier: the heap map when there is one (one predictable branch
// per call, the cold tier out of line), else the table's cold-tier calls, which keep the
// heap map's contract: a returned pointer is valid until the next call on the backend, a
// state handed out mutably may be changed in place until then (it is written back before the
// cold tier's next call).
template <class KS, class NS, class SS, class KH>
class StateTable<KS, NS, SS, KH>::Access {
 public:
  using state_type = S;
  Access(Map* heap, StateTable* table, std::int32_t key_group) noexcept
      : heap_(heap), table_(table), key_group_(key_group) {}

  [[gnu::always_inline]] const S* get(const K& key, const N& ns) {
    if (heap_ != nullptr) [[likely]]
      return heap_->get(key, ns);
    return table_->cold_get(key_group_, key, ns);
  }
  S* get_mutable(const K& key, const N& ns) {
    if (heap_ != nullptr) [[likely]]
      return heap_->get_mutable(key, ns);
    return table_->cold_get_mutable(key_group_, key, ns);
  }
  bool contains(const K& key, const N& ns) { return get(key, ns) != nullptr; }
  [[gnu::always_inline]] void put(const K& key, const N& ns, S state) {
    if (heap_ != nullptr) [[likely]]
      return heap_->put(key, ns, std::move(state));
    table_->cold_put(key_group_, key, ns, state);
  }
  bool remove(const K& key, const N& ns) {
    if (heap_ != nullptr) [[likely]]
      return heap_->remove(key, ns);
    return table_->cold_remove(key_group_, key, ns);
  }
  std::optional<S> remove_and_get_old(const K& key, const N& ns) {
    if (heap_ != nullptr) [[likely]]
      return heap_->remove_and_get_old(key, ns);
    const S* s = table_->cold_get(key_group_, key, ns);
    if (s == nullptr) return std::nullopt;
    std::optional<S> old(*s);
    table_->cold_remove(key_group_, key, ns);
    return old;
  }
  // CowStateMap::transform, in both of its forms.
  template <class T, class F>
  void transform(const K& key, const N& ns, const T& value, F&& fn) {
    if (heap_ != nullptr) [[likely]]
      return heap_->transform(key, ns, value, std::forward<F>(fn));
    constexpr bool kInPlace = std::is_invocable_r_v<void, F&, S&, const T&> &&
                              !std::is_invocable_v<F&, const S*, const T&>;
    if constexpr (kInPlace) {
      if (S* s = table_->cold_get_mutable(key_group_, key, ns)) {
        std::invoke(fn, *s, value);  // written back before the cold tier's next call
        return;
      }
      S fresh{};
      std::invoke(fn, fresh, value);
      table_->cold_put(key_group_, key, ns, fresh);
    } else {
      const S* old = table_->cold_get(key_group_, key, ns);
      const S fresh = std::invoke(fn, old, value);
      table_->cold_put(key_group_, key, ns, fresh);
    }
  }

 private:
  Map* heap_;
  StateTable* table_;
  std::int32_t key_group_;
};

template <class KS, class NS, class SS, class KH>
inline auto StateTable<KS, NS, SS, KH>::access(std::int32_t key_group) -> Access {
  const std::size_t i = index_of(key_group);
  hit(i);
  return Access(maps_[i].get(), this, key_group);
}

template <class KS, class NS, class SS, class KH>
StateTable<KS, NS, SS, KH>::~StateTable() {
  for (const RetiredMap& r : retired_maps_) {
    COWSTATE_ASSERT(r.map->highest_required_version() == 0, "B4",
                    "a table destroyed while a snapshot reads one of its spilled maps");
  }
  SpillContext* ctx = spill_context();
  if (ctx != nullptr) --ctx->tables;
  if (ctx == nullptr || ctx->store == nullptr || ctx->closing) return;
  for (std::size_t i = 0; i < maps_.size(); ++i) {
    if (maps_[i] != nullptr || cold_entries_[i] == 0) continue;
    try {
      ctx->store->erase_range(
          cold_prefix(cold_id_, range().start() + static_cast<std::int32_t>(i)));
    } catch (const ColdStoreError&) {
      // Left in the store: its id is never handed out again, so nothing reads it.
    }
  }
}

template <class KS, class NS, class SS, class KH>
KeyGroupMemory StateTable<KS, NS, SS, KH>::memory(std::int32_t key_group) const {
  const std::size_t i = index_of(key_group);
  KeyGroupMemory m;
  if (maps_[i] != nullptr) {
    m.entries = maps_[i]->size();
    m.bytes = maps_[i]->memory_bytes();
    m.retired_bytes = maps_[i]->retired_bytes();
  } else {
    m.entries = cold_entries_[i];
    m.tier = Tier::cold;
  }
  for (const RetiredMap& r : retired_maps_) {  // spill_tier.h, rule 2
    if (r.key_group != key_group || COWSTATE_MUTANT(accounting_forgets_retired)) continue;
    const std::size_t b = r.map->memory_bytes();
    m.bytes += b;
    m.retired_bytes += b;
  }
  COWSTATE_ASSERT(m.retired_bytes <= m.bytes, "M1", "more retired bytes than bytes");
  return m;
}

template <class KS, class NS, class SS, class KH>
template <class F>
void StateTable<KS, NS, SS, KH>::for_each_in_tier(std::int32_t key_group, F&& fn) {
  const std::size_t i = index_of(key_group);
  if (maps_[i] != nullptr) {
    maps_[i]->for_each(fn);
    return;
  }
  std::vector<const Slot*> slots;  // the key group's cached entries, newer than the range's
  cache_.for_each([&](const Slot& s) {
    if (s.key_group == key_group) slots.push_back(&s);
  });
  K key{};
  N ns{};
  S state{};
  store().scan(cold_prefix(cold_id_, key_group),
               [&](std::span<const std::byte> k, std::span<const std::byte> v) {
                 ByteReader kr(k);
                 ByteReader vr(v);
                 state = S{};
                 const bool ok = KS::read(kr, key).ok() && NS::read(kr, ns).ok() &&
                                 SS::read(vr, state).ok() && kr.remaining() == 0;
                 COWSTATE_ASSERT(ok, "P2", "a cold record that does not decode");
                 const auto c = std::find_if(slots.begin(), slots.end(), [&](const Slot* s) {
                   return s->key == key && s->ns == ns;
                 });
                 fn(key, ns, c != slots.end() ? (*c)->state : state);
               });
  for (const Slot* s : slots) {
    if (!s->in_store) fn(s->key, s->ns, s->state);
  }
}

template <class KS, class NS, class SS, class KH>
std::span<const std::byte> StateTable<KS, NS, SS, KH>::cold_key(std::int32_t key_group,
                                                                const K& key, const N& ns) {
  key_buf_.clear();
  key_buf_.put_bytes(cold_prefix(cold_id_, key_group));
  KS::write(key_buf_, key);
  NS::write(key_buf_, ns);
  return key_buf_.written();
}

template <class KS, class NS, class SS, class KH>
void StateTable<KS, NS, SS, KH>::write_back(Slot& slot) {
  COWSTATE_ASSERT(slot.used && slot.dirty, "SP5", "writing back a clean or free slot");
  write_back_key_.clear();
  write_back_key_.put_bytes(cold_prefix(cold_id_, slot.key_group));
  KS::write(write_back_key_, slot.key);
  NS::write(write_back_key_, slot.ns);
  value_buf_.clear();
  SS::write(value_buf_, slot.state);
  if (slot.in_store) {
    store().overwrite(write_back_key_.written(), value_buf_.written());
  } else {
    const bool inserted = store().insert(write_back_key_.written(), value_buf_.written());
    COWSTATE_ASSERT(inserted, "M2", "a key written while spilled was in the cold tier already");
  }
  slot.dirty = false;
  slot.in_store = true;
}

template <class KS, class NS, class SS, class KH>
auto StateTable<KS, NS, SS, KH>::cache_insert(std::int32_t key_group, const K& key, const N& ns,
                                              S state, bool dirty, bool in_store) -> Slot& {
  cache_.set_limit(spill_context()->cache_limit_per_table());
  return cache_.insert(key, ns, key_group, std::move(state), dirty, in_store,
                       [this](Slot& victim) { write_back(victim); });
}

template <class KS, class NS, class SS, class KH>
void StateTable<KS, NS, SS, KH>::make_cache_room() {
  cache_.set_limit(spill_context()->cache_limit_per_table());
  cache_.make_room([this](Slot& victim) { write_back(victim); });
}

template <class KS, class NS, class SS, class KH>
auto StateTable<KS, NS, SS, KH>::cached(std::int32_t key_group, const K& key, const N& ns)
    -> Slot* {
  COWSTATE_ASSERT(maps_[index_of(key_group)] == nullptr, "B1", "a cold access of a heap key group");
  if (Slot* hit = cache_.find(key, ns)) [[likely]]
    return hit;
  make_cache_room();
  std::span<const std::byte> value;
  if (!store().get(cold_key(key_group, key, ns), value)) return nullptr;
  S state{};
  ByteReader r(value);
  const Status st = SS::read(r, state);
  COWSTATE_ASSERT(st.ok() && r.remaining() == 0, "P2",
                  "a cold value that does not decode (written by this table)");
  return &cache_insert(key_group, key, ns, std::move(state), false, true);
}

template <class KS, class NS, class SS, class KH>
auto StateTable<KS, NS, SS, KH>::cold_get(std::int32_t key_group, const K& key, const N& ns)
    -> const S* {
  Slot* s = cached(key_group, key, ns);
  return s != nullptr ? &s->state : nullptr;
}

template <class KS, class NS, class SS, class KH>
auto StateTable<KS, NS, SS, KH>::cold_get_mutable(std::int32_t key_group, const K& key, const N& ns)
    -> S* {
  Slot* s = cached(key_group, key, ns);
  if (s == nullptr) return nullptr;
  s->dirty = true;  // written back when evicted or flushed (SP5)
  cache_.hand_out(*s);
  return &s->state;
}

template <class KS, class NS, class SS, class KH>
void StateTable<KS, NS, SS, KH>::cold_put(std::int32_t key_group, const K& key, const N& ns,
                                          const S& state) {
  const std::size_t i = index_of(key_group);
  COWSTATE_ASSERT(maps_[i] == nullptr, "B1", "a cold write of a heap key group");
  if (Slot* s = cache_.find(key, ns)) {
    cache_.hand_out(*s);
    s->state = state;
    s->dirty = true;
    return;
  }
  make_cache_room();
  std::span<const std::byte> old;
  const bool existed = store().get(cold_key(key_group, key, ns), old);  // does the count grow
  if (!existed) ++cold_entries_[i];
  cache_insert(key_group, key, ns, state, true, existed);
}

template <class KS, class NS, class SS, class KH>
bool StateTable<KS, NS, SS, KH>::cold_remove(std::int32_t key_group, const K& key, const N& ns) {
  const std::size_t i = index_of(key_group);
  COWSTATE_ASSERT(maps_[i] == nullptr, "B1", "a cold remove in a heap key group");
  bool present = false;
  bool in_store = true;
  if (Slot* s = cache_.find(key, ns)) {
    present = true;
    in_store = s->in_store;
    cache_.erase(*s);
  }
  if (in_store) present = store().erase(cold_key(key_group, key, ns)) || present;
  if (!present) return false;
  COWSTATE_ASSERT(cold_entries_[i] > 0, "M2", "a cold remove below zero entries");
  --cold_entries_[i];
  return true;
}

template <class KS, class NS, class SS, class KH>
void StateTable<KS, NS, SS, KH>::flush_cached(std::int32_t key_group) {
  if (cache_.size() == 0) return;
  cache_.for_each([&](Slot& s) {
    if (s.dirty && (key_group < 0 || s.key_group == key_group)) write_back(s);
  });
}

template <class KS, class NS, class SS, class KH>
void StateTable<KS, NS, SS, KH>::write_cold(std::int32_t key_group, const Map& m) {
  ColdBatch batch;
  batch.records.reserve(m.size());
  m.for_each([&](const K& key, const N& ns, const S& state) {
    add_cold(batch, key_group, key, ns, state, 0);
    COWSTATE_YIELD("spill.entry");
  });
  const bool twice = sort_cold(batch).has_value();
  COWSTATE_ASSERT(!twice, "B2", "a heap map holding one (key, namespace) twice");
  const std::size_t stored = store_cold(batch);
  COWSTATE_ASSERT(stored == batch.records.size(), "P2",
                  "a spilled key group's range was not empty");
}

template <class KS, class NS, class SS, class KH>
void StateTable<KS, NS, SS, KH>::add_cold(ColdBatch& batch, std::int32_t key_group, const K& key,
                                          const N& ns, const S& state, std::size_t file_offset) {
  ByteWriter& buf = batch.buf;
  typename ColdBatch::Record d{buf.size(), 0, 0, 0, file_offset};
  buf.put_bytes(cold_prefix(cold_id_, key_group));
  KS::write(buf, key);
  NS::write(buf, ns);
  d.key_size = buf.size() - d.key_at;
  d.value_at = buf.size();
  SS::write(buf, state);
  d.value_size = buf.size() - d.value_at;
  batch.records.push_back(d);
}

template <class KS, class NS, class SS, class KH>
std::optional<std::size_t> StateTable<KS, NS, SS, KH>::sort_cold(ColdBatch& batch) {
  const std::span<const std::byte> bytes = batch.buf.written();
  // The cold tier's order (cold_store.cc): bytes, then the shorter first.
  auto less = [&](const typename ColdBatch::Record& a, const typename ColdBatch::Record& b) {
    const int c = std::memcmp(bytes.data() + a.key_at, bytes.data() + b.key_at,
                              std::min(a.key_size, b.key_size));
    return c != 0 ? c < 0 : a.key_size < b.key_size;
  };
  std::sort(batch.records.begin(), batch.records.end(), less);
  for (std::size_t e = 1; e < batch.records.size(); ++e) {
    if (!less(batch.records[e - 1], batch.records[e])) return e;
  }
  return std::nullopt;
}

template <class KS, class NS, class SS, class KH>
std::size_t StateTable<KS, NS, SS, KH>::store_cold(const ColdBatch& batch) {
  const std::span<const std::byte> bytes = batch.buf.written();
  std::vector<ColdStore::Record> records;
  records.reserve(batch.records.size());
  for (const typename ColdBatch::Record& d : batch.records) {
    records.push_back(
        {bytes.subspan(d.key_at, d.key_size), bytes.subspan(d.value_at, d.value_size)});
  }
  return store().insert_sorted(records);
}

template <class KS, class NS, class SS, class KH>
Status StateTable<KS, NS, SS, KH>::spill(std::int32_t key_group) {
  const std::size_t i = index_of(key_group);
  COWSTATE_ASSERT(maps_[i] != nullptr, "B1", "spilling a key group that is spilled");
  COWSTATE_ASSERT(cold_entries_[i] == 0, "M2", "a heap key group with cold entries");
  const ColdPrefix prefix = cold_prefix(cold_id_, key_group);
  try {
    write_cold(key_group, *maps_[i]);
    store().commit();
  } catch (const ColdStoreError& e) {
    try {
      store().erase_range(prefix);
    } catch (const ColdStoreError&) {  // left behind: nothing counts or reads it
    }
    return Status::error("spilling key group " + std::to_string(key_group) + " of state \"" +
                         meta().name + "\": " + e.what());
  }
  COWSTATE_PROBE("tier.spill");
  COWSTATE_YIELD("spill.swap");
  cold_entries_[i] = maps_[i]->size();
  std::unique_ptr<Map> old = std::move(maps_[i]);
  generations_[i] = ++next_generation_;
  // Rule 2: a map a live snapshot reads is retired, not freed.
  if (old->highest_required_version() != 0) {
    COWSTATE_PROBE("tier.spill_under_snapshot");
    if (COWSTATE_MUTANT(spill_frees_snapshot_map)) {
      quarantine_freed(std::move(old));
    } else {
      retired_maps_.push_back(RetiredMap{key_group, std::move(old)});
    }
  }
  ++spill_context()->spills;
  COWSTATE_ASSERT(maps_[i] == nullptr, "B1", "a spilled key group kept its heap map");
  return Status();
}

// The planted bug spill_frees_snapshot_map frees a map its snapshots still read. Freed memory
// would crash the kill matrix, so the map is emptied in place instead, as a reuse of its
// memory would leave it, and kept uncounted until the table goes.
template <class KS, class NS, class SS, class KH>
void StateTable<KS, NS, SS, KH>::quarantine_freed(std::unique_ptr<Map> map) {
  map->for_each([](const K&, const N&, const S& state) { const_cast<S&>(state) = S{}; });
  freed_maps_.push_back(std::move(map));
}

template <class KS, class NS, class SS, class KH>
Status StateTable<KS, NS, SS, KH>::load(std::int32_t key_group) {
  const std::size_t i = index_of(key_group);
  COWSTATE_ASSERT(maps_[i] == nullptr, "B1", "loading a key group that is in the heap");
  const ColdPrefix prefix = cold_prefix(cold_id_, key_group);
  auto fresh = std::make_unique<Map>(options_);
  std::size_t n = 0;
  try {
    // Rule 4: every write made while spilled is in the range.
    if (!COWSTATE_MUTANT(load_drops_spilled_writes)) flush_cached(key_group);
    cache_.for_each([&](Slot& s) {
      if (s.key_group == key_group) cache_.erase(s);
    });
    typename Map::Loader loader = fresh->load(cold_entries_[i]);
    K key{};
    N ns{};
    S state{};
    store().scan(prefix, [&](std::span<const std::byte> k, std::span<const std::byte> v) {
      ByteReader kr(k);
      ByteReader vr(v);
      state = S{};
      const bool ok = KS::read(kr, key).ok() && NS::read(kr, ns).ok() && SS::read(vr, state).ok();
      COWSTATE_ASSERT(ok && kr.remaining() == 0, "P2", "a cold record that does not decode");
      if constexpr (detail::kIsTtlStored<SS>) {
        if (COWSTATE_MUTANT(load_loses_ttl_timestamps)) detail::stamp_all(state, 0);
      }
      loader.add(key, ns, std::move(state));
      ++n;
      COWSTATE_YIELD("load.entry");
    });
    COWSTATE_ASSERT(!loader.finish().has_value(), "P2", "a cold range holding a key twice");
    COWSTATE_PROBE("tier.load");
    COWSTATE_YIELD("load.swap");
    store().erase_range(prefix);
  } catch (const ColdStoreError& e) {
    return Status::error("loading key group " + std::to_string(key_group) + " of state \"" +
                         meta().name + "\": " + e.what());
  }
  COWSTATE_ASSERT(n == cold_entries_[i], "M2",
                  "a cold range holding another number of entries than counted");
  maps_[i] = std::move(fresh);
  generations_[i] = ++next_generation_;
  cold_entries_[i] = 0;
  ++spill_context()->loads;
  return Status();
}

template <class KS, class NS, class SS, class KH>
std::size_t StateTable<KS, NS, SS, KH>::release_retired_maps() {
  // A map whose highest required version is 0 has no live snapshot; its destructor takes
  // the map's lock, so a releasing thread still inside release() is waited for.
  std::erase_if(retired_maps_,
                [](const RetiredMap& r) { return r.map->highest_required_version() == 0; });
  for (const auto& m : maps_) {
    if (m != nullptr) (void)m->retired_count();  // reclaims what released snapshots held
  }
  return retired_maps_.size();
}

template <class KS, class NS, class SS, class KH>
Status StateTable<KS, NS, SS, KH>::read_entries_cold(ByteReader& r, std::size_t i,
                                                     std::int32_t key_group, std::uint64_t count) {
  maps_[i].reset();  // the key group is cold from here on, whatever happens
  generations_[i] = ++next_generation_;
  K key{};
  N ns{};
  S state{};
  const KeyGroupAssigner key_group_of(max_parallelism());
  // The records are decoded into one buffer of cold keys and values, then stored in key
  // order (ColdBatch).
  ColdBatch batch;
  batch.records.reserve(count);
  for (std::uint64_t e = 0; e < count; ++e) {
    const std::size_t at = r.offset();
    state = S{};
    if (Status st = read_record<KS, NS, SS>(r, key, ns, state); !st.ok()) return st;
    if (const std::int32_t g = key_group_of(KH{}(key)); g != key_group) {
      return wrong_key_group(r, at, key_group, g);
    }
    add_cold(batch, key_group, key, ns, state, at);
  }
  const std::string duplicate = "expected a (key, namespace) not seen before in state \"" +
                                meta().name + "\", found a duplicate";
  if (const std::optional<std::size_t> e = sort_cold(batch)) {
    return r.error_at(std::max(batch.records[*e - 1].file_offset, batch.records[*e].file_offset),
                      duplicate);
  }
  try {
    const std::size_t stored = store_cold(batch);
    cold_entries_[i] += stored;
    if (stored < batch.records.size()) {
      return r.error_at(batch.records[stored].file_offset, duplicate);
    }
  } catch (const ColdStoreError& e) {
    return Status::error("restoring key group " + std::to_string(key_group) + " of state \"" +
                         meta().name + "\" into the cold tier: " + e.what());
  }
  ++spill_context()->spills;
  return Status();
}

template <class KS, class NS, class SS, class KH>
bool StateTable<KS, NS, SS, KH>::check_accounting(std::string* why) const {
  auto fail = [&](std::int32_t g, const std::string& what) {
    const std::string msg =
        "M1/M2: state \"" + meta().name + "\" key group " + std::to_string(g) + ": " + what;
    if (why != nullptr) *why = msg;
    return false;
  };
  if (cache_.bytes() != cache_.recount_bytes()) {
    return fail(range().start(), "the cold cache accounts " + std::to_string(cache_.bytes()) +
                                     " bytes, a recount finds " +
                                     std::to_string(cache_.recount_bytes()));
  }
  for (std::int32_t g = range().start(); g <= range().end(); ++g) {
    const std::size_t i = index_of(g);
    const KeyGroupMemory m = memory(g);
    KeyGroupMemory recount;
    if (maps_[i] != nullptr) {
      const auto c = CowStateMapAccess::recount_memory(*maps_[i]);
      recount.bytes = c.bytes;
      recount.retired_bytes = c.retired_bytes;
    } else if (spill_context() != nullptr && spill_context()->store != nullptr) {
      std::uint64_t n = 0;
      spill_context()->store->scan(
          cold_prefix(cold_id_, g),
          [&n](std::span<const std::byte>, std::span<const std::byte>) { ++n; });
      const_cast<ColdCache<K, N, S>&>(cache_).for_each([&](const Slot& s) {
        if (s.key_group == g && !s.in_store) ++n;  // written while spilled, not yet stored
      });
      if (n != cold_entries_[i]) {
        return fail(g, "counted " + std::to_string(cold_entries_[i]) +
                           " cold entries, the cold tier holds " + std::to_string(n));
      }
    }
    for (const RetiredMap& r : retired_maps_) {
      if (r.key_group != g) continue;
      const auto c = CowStateMapAccess::recount_memory(*r.map);
      recount.bytes += c.bytes;
      recount.retired_bytes += c.bytes;
    }
    if (m.bytes != recount.bytes || m.retired_bytes != recount.retired_bytes) {
      return fail(g, "accounted " + std::to_string(m.bytes) + " bytes (" +
                         std::to_string(m.retired_bytes) + " retired), a recount finds " +
                         std::to_string(recount.bytes) + " (" +
                         std::to_string(recount.retired_bytes) + " retired)");
    }
  }
  return true;
}

// The snapshot of a spilled key group: a cursor over its range in the sync phase's read
// transaction (spill_tier.h, rule 3). Its records are a checkpoint's records already; with
// full-snapshot TTL cleanup each state is decoded and judged by the clock as it is written.
template <class KS, class NS, class SS, class KH>
class StateTable<KS, NS, SS, KH>::ColdSnapshot final : public KeyGroupStateSnapshot {
 public:
  // `live`: the store itself, read only under the planted bug cold_snapshot_reads_live.
  ColdSnapshot(std::shared_ptr<ColdReadTxn> txn, ColdPrefix prefix, std::size_t size,
               const StateTtlConfig* ttl, const TtlTimeProvider* clock, ColdStore* live = nullptr)
      : txn_(std::move(txn)), live_(live), prefix_(prefix), size_(size), ttl_(ttl), clock_(clock) {
    COWSTATE_ASSERT(txn_ != nullptr, "B2", "a cold snapshot without a read transaction");
    COWSTATE_ASSERT(ttl_ == nullptr || clock_ != nullptr, "L5", "TTL cleanup without a clock");
  }
  std::size_t size() const noexcept override { return size_; }
  std::size_t emitted() const noexcept override { return emitted_; }
  bool done() const noexcept override { return written_ == size_; }
  void release() noexcept override {
    if (released_.exchange(true, std::memory_order_acq_rel)) return;
    cursor_.reset();  // closed before its transaction
    txn_.reset();
  }
  bool released() const noexcept override { return released_.load(std::memory_order_acquire); }

  std::size_t write(ByteWriter& out, std::size_t max_entries) override {
    COWSTATE_ASSERT(!released(), "B2", "writing a released key-group snapshot");
    if (!cursor_) {
#if defined(COWSTATE_MUTANTS) && COWSTATE_MUTANTS
      if (COWSTATE_MUTANT(cold_snapshot_reads_live) && live_ != nullptr) txn_ = live_->read_txn();
#endif
      cursor_.emplace(txn_, prefix_);
    }
    const std::size_t budget = std::min(max_entries, size_ - written_);
    std::span<const std::byte> k;
    std::span<const std::byte> v;
    for (std::size_t n = 0; n < budget; ++n) {
      const bool more = cursor_->next(k, v);
      COWSTATE_ASSERT(more, "B2", "a cold range with fewer entries than its snapshot's size");
      const std::size_t at = out.size();
      out.put_bytes(k);
      if (write_state(out, v)) {
        ++emitted_;
      } else {
        out.truncate(at);  // nothing of it is live: left out
      }
      ++written_;
      if (n + 1 < budget) COWSTATE_YIELD("checkpoint_writer.entry");
    }
    COWSTATE_ASSERT(written_ < size_ || !cursor_->next(k, v), "B2",
                    "a cold range with more entries than its snapshot's size");
    return budget;
  }

 private:
  // Appends the state `v` (its stored bytes, or with TTL cleanup what of it is live now).
  bool write_state(ByteWriter& out, std::span<const std::byte> v) {
    if constexpr (detail::kIsTtlStored<SS>) {
      if (ttl_ != nullptr) {
        S s{};
        ByteReader r(v);
        COWSTATE_ASSERT(SS::read(r, s).ok(), "P2", "a cold value that does not decode");
        return ttl_write_live<SS>(out, s, ttl_->ttl(), clock_->now());  // L5
      }
    }
    out.put_bytes(v);
    return true;
  }

  std::shared_ptr<ColdReadTxn> txn_;
  ColdStore* live_;
  std::optional<ColdCursor> cursor_;
  ColdPrefix prefix_;
  std::size_t size_;
  const StateTtlConfig* ttl_;
  const TtlTimeProvider* clock_;
  std::size_t written_ = 0;
  std::size_t emitted_ = 0;
  std::atomic<bool> released_{false};
};

}  // namespace cowstate
