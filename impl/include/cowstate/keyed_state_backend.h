// KeyedStateBackend: named keyed states over copy-on-write state maps, after Flink's
// HeapKeyedStateBackend, with checkpoints written asynchronously and restore with
// rescaling.
//
// Model
// -----
// A backend owns the key groups of one KeyGroupRange (key_groups.h) of a job with a fixed
// max parallelism. A user registers named states; each is a StateTable (state_table.h):
// one CowStateMap per key group, keyed by (key, namespace). The backend has a current key
// (set_current_key, which also fixes the current key group); each state handle has a
// current namespace (VoidNamespace for state that is not windowed). Every state operation
// acts on (current key, handle's namespace) in the current key group's map.
//
// States (Flink's names and semantics)
//   ValueState       value() (the default value when absent), update(v), clear()
//   ListState        get(), add(e), add_all(es), update(es) (an empty list clears),
//                    clear(), merge_namespaces(target, sources)
//   MapState         get(k), put(k, v), put_all(m), remove(k) (removing the last entry
//                    clears the namespace), contains(k), entries(), is_empty(), clear()
//   ReducingState    get(), add(v) (reduce(old, v)), clear(), merge_namespaces
//   AggregatingState get() (get_result(acc)), add(in) (acc = add(in, acc)), clear(),
//                    merge_namespaces (merge(acc, acc))
// Merging namespaces (for merging windows) removes each source namespace's state and
// combines all of them into the target's, as Flink's mergeNamespaces does.
//
// Copy-on-write
// -------------
// A state a live snapshot may share is never mutated: handles change states only through
// the map's get_mutable (which copies a shared state first), transform (which builds a new
// state from the old one), put and remove. So a checkpoint's async phase can read its
// frozen snapshot while the writer keeps updating lists and maps in place.
//
// Snapshots and restore
// ---------------------
// snapshot(id) is the sync phase: one map snapshot per (state, key group) with entries,
// returned as a BackendSnapshot for a CheckpointWriter (checkpoint.h) to write on another
// thread in bounded steps. restore(inputs) restores from one or several checkpoint files
// into this backend's range (scale out: a subset of one file's key groups; scale in: the
// union of several files), matching states by name; it is all-or-nothing.
//
// Incremental checkpoints
// -----------------------
// With enable_incremental_checkpoints() every map tracks its changes (cow_state_map.h,
// "Change tracking"), and snapshot(id) writes a delta of the last checkpoint the caller
// reported complete (notify_checkpoint_complete), its parent: per key group a delta block
// when every state's map there has a change base and the delta's size bound is at most
// max_delta_fraction of the key group's entries, else a full block (a spilled key group,
// a map replaced by a spill, load or restore since, a state registered since); the writer
// finds a delta with nothing in it unchanged (checkpoint.h). The checkpoint is full (no
// parent) when none completed yet, when its parent's chain already holds full_every - 1
// deltas, or when the chain's deltas outgrew max_chain_share of its full checkpoint's bytes.
// A completion makes each map snapshot of that checkpoint its map's change base (unless the
// map was replaced since); notify_checkpoint_aborted forgets a checkpoint and resets
// nothing, so a cancelled or failed checkpoint never loses a change (I14, I15). A delta
// since an older base than the parent's is still right on the parent's image: it only
// repeats changes the parent already holds. Checkpoint ids must grow from one snapshot to
// the next.
//
// TTL
// ---
// A state registered with StateOptions::ttl (a StateTtlConfig, ttl.h) stores each value,
// list element or map value with its last-access time, in a table of the TTL form of its
// type (TtlValue). Time comes from the backend's TtlTimeProvider. The same handle types
// serve both; with a TTL every operation first runs incremental cleanup (if configured),
// reads expire lazily (an expired value is removed, and returned only under
// ReturnExpiredIfNotCleanedUp), reads refresh last access under OnReadAndWrite, writes
// stamp the current time. Every change goes through the map's copy-on-write calls (put,
// remove, get_mutable, transform), so lazy expiry, refresh and cleanup never change what a
// live snapshot sees (L3). Full-snapshot cleanup happens in the checkpoint's async phase
// (state_table.h). Checkpoints store the TTL configuration and every last-access time;
// restore keeps them. run_ttl_cleanup(n) on a handle drives incremental cleanup by hand.
//
// Errors
// ------
// Operating errors return a Status: a current key of a key group outside the range (the
// record was routed to the wrong instance), and every restore problem. Programmer errors
// assert: using a state without a current key (B5), re-registering a name with other
// types (B3), restoring or destroying the backend while a snapshot is live (B4, C4).
//
// Thread safety
// -------------
// One writer thread calls everything on the backend and its state handles. A
// BackendSnapshot and the CheckpointWriter writing it may move to one other thread; the
// backend must outlive them. Values returned by reference (MapState::entries) are valid
// until the next call on the backend or any of its states.
//
// Invariants (docs/invariants.md)
//  B3  A state name is registered once, with one kind and one set of serializers.
//  B4  No snapshot of the backend is live when it is destroyed or restored.
//  B5  A state is accessed only with a current key, whose key group is in the range.
//  L1  A TTL configuration is valid; a state's handle and table agree on having one.
//  L3  TTL reads and cleanup change states only through copy-on-write calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cowstate/assert.h"
#include "cowstate/checkpoint.h"
#include "cowstate/cow_state_map.h"
#include "cowstate/key_groups.h"
#include "cowstate/metrics.h"
#include "cowstate/serializers.h"
#include "cowstate/spill_load_manager.h"
#include "cowstate/state_table.h"
#include "cowstate/status.h"
#include "cowstate/ttl.h"

namespace cowstate {

template <class V>
using ReduceFunction = std::function<V(const V&, const V&)>;

// Flink's AggregateFunction: an accumulator built from inputs, merged across namespaces.
template <class IN, class ACC, class OUT>
struct AggregateFunction {
  std::function<ACC()> create_accumulator;
  std::function<ACC(const IN&, ACC)> add;
  std::function<OUT(const ACC&)> get_result;
  std::function<ACC(ACC, const ACC&)> merge;
};

// The part of a state handle the backend owns without knowing its types.
class StateHandleBase {
 public:
  virtual ~StateHandleBase() = default;
  // The backend switched its current key (incremental TTL cleanup on every key switch).
  virtual void key_switched() {}
};

template <class KS, class KH>
class KeyedStateBackend;

namespace detail {

// What every state handle shares: its backend, its table (by registration index, so a
// restore that swaps tables is seen at once), its current namespace, and for a state with
// a TTL the configuration, lazy expiry and the incremental cleanup's position.
//
// A state without TTL stores S in a StateTable of SS (Table); a state with TTL stores the
// TTL form of S (TtlS: the value, each list element or each map value with its last
// access time) in a StateTable of TtlSS (TtlTable). Which one is fixed at registration;
// every operation branches on it once.
template <class Backend, class NS, class SS>
class KeyedStateHandle : public StateHandleBase {
 public:
  using K = typename Backend::key_type;
  using N = typename NS::value_type;
  using S = typename SS::value_type;
  using Table = StateTable<typename Backend::key_serializer, NS, SS, typename Backend::key_hash>;
  using Map = typename Table::Map;
  using TtlSS = typename TtlStored<SS>::type;
  using TtlS = typename TtlSS::value_type;
  using TtlTable =
      StateTable<typename Backend::key_serializer, NS, TtlSS, typename Backend::key_hash>;
  using TtlMap = typename TtlTable::Map;
  using Access = typename Table::Access;
  using TtlAccess = typename TtlTable::Access;

  KeyedStateHandle(Backend* backend, std::size_t index)
      : ttl_(backend->table_at(index).meta().ttl), backend_(backend), index_(index) {
    COWSTATE_ASSERT(!ttl_ || ttl_->valid(), "L1", "a state with an invalid TTL configuration");
  }

  void set_current_namespace(const N& ns) { ns_ = ns; }
  const N& current_namespace() const noexcept { return ns_; }
  // Removes the state of (current key, current namespace).
  void clear() {
    if (ttl_) {
      ttl_accessed();
      ttl_map().remove(key(), ns_);
    } else {
      map().remove(key(), ns_);
    }
  }
  bool has_ttl() const noexcept { return ttl_.has_value(); }
  const std::optional<StateTtlConfig>& ttl_config() const noexcept { return ttl_; }
  // The table behind this handle (tests, the simulator). REQUIRES: !has_ttl().
  Table& table() {
    COWSTATE_ASSERT(!ttl_, "REQUIRES", "table() of a state with TTL: use ttl_table()");
    return static_cast<Table&>(backend_->table_at(index_));
  }
  // The table of a state with TTL. REQUIRES: has_ttl().
  TtlTable& ttl_table() {
    COWSTATE_ASSERT(ttl_.has_value(), "REQUIRES", "ttl_table() of a state without TTL");
    return static_cast<TtlTable&>(backend_->table_at(index_));
  }

  // Incremental TTL cleanup: visits at least `entries` entries (whole chains) from where
  // the last run stopped, key group after key group, and removes what is expired (L3,
  // L4). Returns the entries visited. Runs by itself on every access of the state and,
  // if configured, on every key switch; tests and the simulator may drive it directly.
  // REQUIRES: has_ttl().
  std::size_t run_ttl_cleanup(std::size_t entries) {
    TtlTable& table = ttl_table();
    const KeyGroupRange range = table.range();
    if (range.empty() || entries == 0) return 0;
    const std::int64_t now = this->now();
    const std::int64_t ttl = ttl_->ttl();
    std::size_t visited = 0;
    for (std::size_t groups = 0; visited < entries && groups < kMaxCleanupKeyGroups; ++groups) {
      if (!range.contains(cleanup_key_group_)) {
        cleanup_key_group_ = range.start();
        cleanup_cursor_ = {};
      }
      TtlMap* heap = table.heap_map(cleanup_key_group_);  // a spilled key group is skipped
      if (heap != nullptr && !heap->empty()) {
        TtlMap& m = *heap;
        const VisitCursor before = cleanup_cursor_;
        visited += m.visit_incremental(cleanup_cursor_, entries - visited,
                                       [&](const K&, const N&, const TtlS& s) {
                                         return ttl_filter(s, ttl, now);  // L3, L4
                                       });
        if (!passed_end(m, before, cleanup_cursor_)) break;  // stopped inside this map
      }
      ++cleanup_key_group_;
      cleanup_cursor_ = {};
    }
    return visited;
  }
  void key_switched() override {
    COWSTATE_ASSERT(ttl_ && ttl_->incremental_cleanup, "L3", "key-switch cleanup without TTL");
    run_ttl_cleanup(ttl_->incremental_cleanup->cleanup_size);
  }

 protected:
  // The current key group's map, in whichever tier it is (one request counted).
  // REQUIRES: a current key (B5).
  [[gnu::always_inline]] Access map() { return table().access(backend_->current_key_group()); }
  TtlAccess ttl_map() { return ttl_table().access(backend_->current_key_group()); }
  const K& key() const { return backend_->current_key(); }
  std::int64_t now() const { return backend_->ttl_time_provider().now(); }

  // Every operation on a state with TTL starts here: incremental cleanup, if configured.
  void ttl_accessed() {
    COWSTATE_ASSERT(ttl_.has_value(), "L3", "a TTL access of a state without TTL");
    if (ttl_->incremental_cleanup) run_ttl_cleanup(ttl_->incremental_cleanup->cleanup_size);
  }
  // Whether a stored TTL value may still be used at `now` (live, or expired but visible).
  template <class V>
  bool ttl_visible(const TtlValue<V>& v, std::int64_t now) const {
    return ttl_->return_expired() || !ttl_expired(v.last_access, ttl_->ttl(), now);
  }
  // The time a read under OnReadAndWrite refreshes to, or -1 (no refresh).
  std::int64_t read_refresh(std::int64_t now) const {
    return ttl_->refresh_on_read() && !COWSTATE_MUTANT(ttl_read_no_refresh) ? now : -1;
  }
  // Applies a filter decision to the current (key, namespace) through the map's own
  // copy-on-write put and remove (L3).
  void ttl_apply(VisitResult<TtlS>& r) {
    if (r.kind() == VisitResult<TtlS>::Kind::remove) {
      ttl_map().remove(key(), ns_);
    } else if (r.kind() == VisitResult<TtlS>::Kind::replace) {
      ttl_map().put(key(), ns_, std::move(r.replacement()));
    }
  }

  // Lazy expiry of a value-like state (S stored as TtlValue<S>): the value a read returns,
  // or nullopt. An expired value is removed and returned only under
  // ReturnExpiredIfNotCleanedUp; a live one is refreshed under OnReadAndWrite, through
  // get_mutable (which copies it first when a snapshot shares it).
  [[gnu::always_inline]] std::optional<S> ttl_read_value() {
    ttl_accessed();
    const std::int64_t now = this->now();
    const TtlS* v = ttl_map().get(key(), ns_);
    if (v == nullptr) return std::nullopt;
    // The common read (live, no refresh) inline; expiry and refresh out of line.
    const bool expired = ttl_expired(v->last_access, ttl_->ttl(), now);
    const std::int64_t refresh = read_refresh(now);
    if (!expired && refresh < 0) [[likely]]
      return v->value;
    return expired ? ttl_read_expired(*v) : ttl_read_refreshing(refresh);
  }
  // ttl_read_value() of an expired value `v`: removes it, returns it if visible.
  [[gnu::noinline]] std::optional<S> ttl_read_expired(const TtlS& v) {
    std::optional<S> out;
    if (ttl_->return_expired()) out = v.value;
    ttl_map().remove(key(), ns_);
    return out;
  }
  // ttl_read_value() of a live value under OnReadAndWrite: refreshes it to `refresh`.
  [[gnu::noinline]] std::optional<S> ttl_read_refreshing(std::int64_t refresh) {
    TtlS* w = ttl_map().get_mutable(key(), ns_);
    COWSTATE_ASSERT(w != nullptr, "B5", "a state vanished between get and get_mutable");
    w->last_access = refresh;
    return w->value;
  }

  // Flink's mergeNamespaces over map `m`: removes each source's state, combines those
  // `usable` accepts with merge(accumulated, next) -> T, then combines the result into the
  // target's state (replacing a target state `usable` rejects).
  template <class M, class U, class F>
  void merge_into(M m, const N& target, std::span<const N> sources, U&& usable, F&& merge) {
    using T = typename M::state_type;
    std::optional<T> merged;
    for (const N& source : sources) {
      std::optional<T> s = m.remove_and_get_old(key(), source);
      if (!s || !usable(*s)) continue;
      merged = merged ? merge(std::move(*merged), *s) : std::move(s);
    }
    if (!merged) return;
    m.transform(key(), target, *merged, [&](const T* old, const T& add) {
      return old != nullptr && usable(*old) ? merge(T(*old), add) : add;
    });
  }
  static constexpr auto always = [](const auto&) { return true; };

  // mergeNamespaces of a value-like state (S stored as TtlValue<S> with TTL) with
  // f(S, const S&) -> S. With TTL, expired states take no part unless visible, and a
  // combined state is stamped now.
  template <class F>
  void merge_values(const N& target, std::span<const N> sources, F&& f) {
    if (!ttl_) return merge_into(map(), target, sources, always, f);
    ttl_accessed();
    const std::int64_t now = this->now();
    merge_into(
        ttl_map(), target, sources, [&](const TtlS& x) { return ttl_visible(x, now); },
        [&](TtlS a, const TtlS& b) {
          return TtlS{f(std::move(a.value), b.value), now};
        });
  }

  std::optional<StateTtlConfig> ttl_;
  N ns_{};

 private:
  // Empty key groups a cleanup run skips at most, so one access stays bounded however
  // many key groups the backend has.
  static constexpr std::size_t kMaxCleanupKeyGroups = 64;

  // Whether a visit that moved the cursor from `before` to `after` passed the end of the
  // map's bucket order (so this key group was scanned to its end).
  static bool passed_end(const TtlMap& m, VisitCursor before, VisitCursor after) {
    const std::uint32_t cap = m.capacity();
    const bool at_end = after.table == 0 ? after.bucket >= cap && !m.rehashing()
                                         : !m.rehashing() || after.bucket >= 2 * cap;
    const bool went_back = after.table < before.table ||
                           (after.table == before.table && after.bucket <= before.bucket);
    return at_end || went_back;
  }

  Backend* backend_;
  std::size_t index_;
  // Incremental cleanup position (writer thread).
  std::int32_t cleanup_key_group_ = -1;
  VisitCursor cleanup_cursor_;
};

}  // namespace detail

template <class Backend, class NS, class VS>
class ValueState final : public detail::KeyedStateHandle<Backend, NS, VS> {
  using Base = detail::KeyedStateHandle<Backend, NS, VS>;

 public:
  using V = typename VS::value_type;
  ValueState(Backend* b, std::size_t index, V default_value)
      : Base(b, index), default_(std::move(default_value)) {}

  // The value, or the default value when there is none (or it expired).
  [[gnu::always_inline]] V value() {
    if (this->ttl_) {
      std::optional<V> v = this->ttl_read_value();
      return v ? std::move(*v) : default_;
    }
    const V* v = this->map().get(this->key(), this->ns_);
    return v != nullptr ? *v : default_;
  }
  void update(V v) {
    if (this->ttl_) {
      this->ttl_accessed();
      this->ttl_map().put(this->key(), this->ns_, TtlValue<V>{std::move(v), this->now()});
    } else {
      this->map().put(this->key(), this->ns_, std::move(v));
    }
  }

 private:
  V default_;
};

template <class Backend, class NS, class ES>
class ListState final : public detail::KeyedStateHandle<Backend, NS, ListSerializer<ES>> {
  using Base = detail::KeyedStateHandle<Backend, NS, ListSerializer<ES>>;

 public:
  using E = typename ES::value_type;
  using N = typename Base::N;
  using Base::Base;

  // The elements (empty when there are none). With TTL: the live elements (and expired
  // ones not cleaned up yet under ReturnExpiredIfNotCleanedUp); the read removes expired
  // elements and, under OnReadAndWrite, refreshes the live ones.
  std::vector<E> get() {
    if (this->ttl_) return ttl_get();
    const std::vector<E>* l = this->map().get(this->key(), this->ns_);
    return l != nullptr ? *l : std::vector<E>{};
  }
  void add(E e) {
    if (!this->ttl_) return append(this->map(), std::move(e));
    this->ttl_accessed();
    append(this->ttl_map(), TtlValue<E>{std::move(e), this->now()});
  }
  void add_all(const std::vector<E>& es) {
    if (es.empty()) return;
    if (!this->ttl_) return append_all(this->map(), es);
    this->ttl_accessed();
    append_all(this->ttl_map(), stamped(es));
  }
  // Replaces the elements; an empty list clears the state.
  void update(std::vector<E> es) {
    if (es.empty()) {
      this->clear();
    } else if (!this->ttl_) {
      this->map().put(this->key(), this->ns_, std::move(es));
    } else {
      this->ttl_accessed();
      this->ttl_map().put(this->key(), this->ns_, stamped(es));
    }
  }
  // Appends the sources' elements to the target's, removing the sources. Elements keep
  // their last-access times.
  void merge_namespaces(const N& target, std::span<const N> sources) {
    auto concat = [](auto a, const auto& b) {
      a.insert(a.end(), b.begin(), b.end());
      return a;
    };
    if (!this->ttl_) return this->merge_into(this->map(), target, sources, Base::always, concat);
    this->ttl_accessed();
    this->merge_into(this->ttl_map(), target, sources, Base::always, concat);
  }

 private:
  // One lookup through the map's in-place transform: the list as get_mutable would hand
  // it out (copied first when a snapshot shares it), or a new one. The element is moved in
  // through the capture; the transform's own argument is unused.
  template <class M, class T>
  void append(M m, T e) {
    using L = typename M::state_type;
    m.transform(this->key(), this->ns_, 0, [&e](L& l, const int&) { l.push_back(std::move(e)); });
  }
  template <class M, class Es>
  void append_all(M m, Es&& es) {
    using L = typename M::state_type;
    m.transform(this->key(), this->ns_, 0, [&es](L& l, const int&) {
      if (l.empty()) {
        l = L(std::forward<Es>(es));  // a new list (a stored one is never empty)
      } else {
        l.insert(l.end(), es.begin(), es.end());
      }
    });
  }
  std::vector<TtlValue<E>> stamped(const std::vector<E>& es) const {
    const std::int64_t now = this->now();
    std::vector<TtlValue<E>> out;
    out.reserve(es.size());
    for (const E& e : es) out.push_back(TtlValue<E>{e, now});
    return out;
  }
  std::vector<E> ttl_get() {
    this->ttl_accessed();
    const std::int64_t now = this->now();
    const std::vector<TtlValue<E>>* l = this->ttl_map().get(this->key(), this->ns_);
    std::vector<E> out;
    if (l == nullptr) return out;
    for (const TtlValue<E>& e : *l) {
      if (this->ttl_visible(e, now)) out.push_back(e.value);
    }
    auto r = ttl_filter(*l, this->ttl_->ttl(), now, this->read_refresh(now));
    this->ttl_apply(r);
    return out;
  }
};

template <class Backend, class NS, class UKS, class UVS>
class MapState final : public detail::KeyedStateHandle<Backend, NS, MapSerializer<UKS, UVS>> {
  using Base = detail::KeyedStateHandle<Backend, NS, MapSerializer<UKS, UVS>>;

 public:
  using UK = typename UKS::value_type;
  using UV = typename UVS::value_type;
  using UserMap = std::map<UK, UV>;
  using Base::Base;

  // With TTL, reads of one user key expire, return and refresh it as a value state does;
  // entries() and is_empty() do so for every user key.
  std::optional<UV> get(const UK& k) {
    if (this->ttl_) return ttl_get(k);
    const UserMap* m = this->map().get(this->key(), this->ns_);
    if (m == nullptr) return std::nullopt;
    auto it = m->find(k);
    return it != m->end() ? std::optional<UV>(it->second) : std::nullopt;
  }
  bool contains(const UK& k) {
    if (this->ttl_) return ttl_get(k).has_value();
    const UserMap* m = this->map().get(this->key(), this->ns_);
    return m != nullptr && m->count(k) != 0;
  }
  void put(UK k, UV v) {
    if (!this->ttl_) return put_in(this->map(), std::move(k), std::move(v));
    this->ttl_accessed();
    put_in(this->ttl_map(), std::move(k), TtlValue<UV>{std::move(v), this->now()});
  }
  void put_all(const UserMap& entries) {
    if (entries.empty()) return;
    if (!this->ttl_) {
      if (UserMap* m = this->map().get_mutable(this->key(), this->ns_)) {
        for (const auto& [k, v] : entries) (*m)[k] = v;
      } else {
        this->map().put(this->key(), this->ns_, entries);
      }
      return;
    }
    this->ttl_accessed();
    const std::int64_t now = this->now();
    for (const auto& [k, v] : entries) put_in(this->ttl_map(), k, TtlValue<UV>{v, now});
  }
  // Removes one user key; removing the last one clears the namespace.
  void remove(const UK& k) {
    if (!this->ttl_) return remove_in(this->map(), k);
    this->ttl_accessed();
    remove_in(this->ttl_map(), k);
  }
  bool is_empty() {
    if (this->ttl_) return entries().empty();
    return this->map().get(this->key(), this->ns_) == nullptr;
  }
  // The user map (empty when there is none). Valid until the next call on the backend.
  const UserMap& entries() {
    static const UserMap kEmpty;
    if (this->ttl_) return ttl_entries();
    const UserMap* m = this->map().get(this->key(), this->ns_);
    return m != nullptr ? *m : kEmpty;
  }

 private:
  template <class M, class T>
  void put_in(M m, UK k, T v) {
    if (auto* um = m.get_mutable(this->key(), this->ns_)) {
      (*um)[std::move(k)] = std::move(v);
    } else {
      typename M::state_type fresh;
      fresh.emplace(std::move(k), std::move(v));
      m.put(this->key(), this->ns_, std::move(fresh));
    }
  }
  template <class M>
  void remove_in(M m, const UK& k) {
    const auto* current = m.get(this->key(), this->ns_);
    if (current == nullptr || current->count(k) == 0) return;  // no copy for a no-op
    auto* um = m.get_mutable(this->key(), this->ns_);
    COWSTATE_ASSERT(um != nullptr, "B5", "a map state vanished between get and get_mutable");
    um->erase(k);
    if (um->empty()) m.remove(this->key(), this->ns_);
  }
  std::optional<UV> ttl_get(const UK& k) {
    this->ttl_accessed();
    const std::int64_t now = this->now();
    auto m = this->ttl_map();
    const auto* um = m.get(this->key(), this->ns_);
    if (um == nullptr) return std::nullopt;
    auto it = um->find(k);
    if (it == um->end()) return std::nullopt;
    if (ttl_expired(it->second.last_access, this->ttl_->ttl(), now)) {
      std::optional<UV> out;
      if (this->ttl_->return_expired()) out = it->second.value;
      remove_in(m, k);
      return out;
    }
    const std::int64_t refresh = this->read_refresh(now);
    if (refresh < 0) return it->second.value;
    auto* w = m.get_mutable(this->key(), this->ns_);
    COWSTATE_ASSERT(w != nullptr && w->count(k) == 1, "B5", "a user key vanished");
    TtlValue<UV>& v = w->find(k)->second;
    v.last_access = refresh;
    return v.value;
  }
  const UserMap& ttl_entries() {
    this->ttl_accessed();
    const std::int64_t now = this->now();
    scratch_.clear();
    const auto* um = this->ttl_map().get(this->key(), this->ns_);
    if (um == nullptr) return scratch_;
    for (const auto& [k, v] : *um) {
      if (this->ttl_visible(v, now)) scratch_.emplace_hint(scratch_.end(), k, v.value);
    }
    auto r = ttl_filter(*um, this->ttl_->ttl(), now, this->read_refresh(now));
    this->ttl_apply(r);
    return scratch_;
  }

  UserMap scratch_;  // what ttl_entries() returned last
};

template <class Backend, class NS, class VS>
class ReducingState final : public detail::KeyedStateHandle<Backend, NS, VS> {
  using Base = detail::KeyedStateHandle<Backend, NS, VS>;

 public:
  using V = typename VS::value_type;
  using N = typename Base::N;
  ReducingState(Backend* b, std::size_t index, ReduceFunction<V> reduce)
      : Base(b, index), reduce_(std::move(reduce)) {
    COWSTATE_ASSERT(static_cast<bool>(reduce_), "REQUIRES", "a reducing state needs a function");
  }

  std::optional<V> get() {
    if (this->ttl_) return this->ttl_read_value();
    const V* v = this->map().get(this->key(), this->ns_);
    return v != nullptr ? std::optional<V>(*v) : std::nullopt;
  }
  // With TTL an expired value (unless visible) is not reduced with: the input starts over.
  void add(const V& v) {
    if (!this->ttl_) {
      this->map().transform(this->key(), this->ns_, v, [this](const V* old, const V& in) {
        return old != nullptr ? reduce_(*old, in) : in;
      });
      return;
    }
    this->ttl_accessed();
    const std::int64_t now = this->now();
    this->ttl_map().transform(this->key(), this->ns_, v, [&](const TtlValue<V>* old, const V& in) {
      return TtlValue<V>{
          old != nullptr && this->ttl_visible(*old, now) ? reduce_(old->value, in) : in, now};
    });
  }
  void merge_namespaces(const N& target, std::span<const N> sources) {
    this->merge_values(target, sources, [this](V a, const V& b) { return reduce_(a, b); });
  }

 private:
  ReduceFunction<V> reduce_;
};

template <class Backend, class NS, class ACCS, class IN, class OUT>
class AggregatingState final : public detail::KeyedStateHandle<Backend, NS, ACCS> {
  using Base = detail::KeyedStateHandle<Backend, NS, ACCS>;

 public:
  using ACC = typename ACCS::value_type;
  using N = typename Base::N;
  using Function = AggregateFunction<IN, ACC, OUT>;
  AggregatingState(Backend* b, std::size_t index, Function fn)
      : Base(b, index), fn_(std::move(fn)) {
    COWSTATE_ASSERT(fn_.create_accumulator && fn_.add && fn_.get_result && fn_.merge, "REQUIRES",
                    "an aggregate function needs all four parts");
  }

  std::optional<OUT> get() {
    if (this->ttl_) {
      std::optional<ACC> acc = this->ttl_read_value();
      return acc ? std::optional<OUT>(fn_.get_result(*acc)) : std::nullopt;
    }
    const ACC* acc = this->map().get(this->key(), this->ns_);
    return acc != nullptr ? std::optional<OUT>(fn_.get_result(*acc)) : std::nullopt;
  }
  // With TTL an expired accumulator (unless visible) is not added to: it starts over.
  void add(const IN& in) {
    if (!this->ttl_) {
      this->map().transform(this->key(), this->ns_, in, [this](const ACC* old, const IN& value) {
        return fn_.add(value, old != nullptr ? ACC(*old) : fn_.create_accumulator());
      });
      return;
    }
    this->ttl_accessed();
    const std::int64_t now = this->now();
    this->ttl_map().transform(
        this->key(), this->ns_, in, [&](const TtlValue<ACC>* old, const IN& value) {
          const bool usable = old != nullptr && this->ttl_visible(*old, now);
          return TtlValue<ACC>{fn_.add(value, usable ? ACC(old->value) : fn_.create_accumulator()),
                               now};
        });
  }
  void merge_namespaces(const N& target, std::span<const N> sources) {
    this->merge_values(target, sources,
                       [this](ACC a, const ACC& b) { return fn_.merge(std::move(a), b); });
  }

 private:
  Function fn_;
};

// How a backend writes incremental checkpoints ("Incremental checkpoints" above).
struct IncrementalCheckpointOptions {
  // A key group is a delta when its delta holds at most this share of its entries (counted
  // at the sync phase as an upper bound: every change since the base); else it is full.
  double max_delta_fraction = 0.5;
  // Every full_every-th checkpoint of a chain is full: a chain holds at most full_every - 1
  // deltas. 1: every checkpoint is full.
  std::uint32_t full_every = 10;
  // A checkpoint is full when its parent's chain holds more delta bytes than this share of
  // the bytes of the chain's full checkpoint (as notify_checkpoint_complete reported them;
  // with no bytes reported the rule does not apply).
  double max_chain_share = 1.0;
  bool valid() const noexcept {
    return max_delta_fraction >= 0 && full_every >= 1 && max_chain_share >= 0;
  }
};

template <class KS, class KH = KeyHash<typename KS::value_type>>
class KeyedStateBackend {
 public:
  using key_type = typename KS::value_type;
  using key_serializer = KS;
  using key_hash = KH;
  using K = key_type;

  // `clock` is the time of every state with a TTL, of the request rates and of the spill
  // manager's intervals (default: the system clock). `spill.memory_budget_bytes` > 0 gives the
  // backend a cold tier and a spill/load manager (spill_tier.h); opening the cold tier's LMDB
  // environment may fail (no room for its directory): the constructor then throws
  // ColdStoreError.
  // REQUIRES: K1 and K2 for (range, max_parallelism): range within [0, max_parallelism);
  // `clock`, if given, outlives the backend and every snapshot of it;
  // SpillLoadManager::validate(spill) is ok when a budget is given.
  explicit KeyedStateBackend(KeyGroupRange range,
                             std::int32_t max_parallelism = kDefaultMaxParallelism,
                             MapOptions map_options = {}, const TtlTimeProvider* clock = nullptr,
                             SpillOptions spill = {})
      : range_(range),
        key_groups_(max_parallelism),
        map_options_(map_options),
        clock_(clock != nullptr ? clock : &SystemTtlClock::instance()),
        spill_options_(std::move(spill)) {
    COWSTATE_ASSERT(max_parallelism >= 1 && max_parallelism <= kUpperBoundMaxParallelism, "K1",
                    "max parallelism out of [1, 32768]");
    COWSTATE_ASSERT(range.empty() || range.end() < max_parallelism, "K2",
                    "key group range beyond max parallelism");
    if (spill_options_.memory_budget_bytes > 0) open_spill_tier();
  }
  ~KeyedStateBackend() {
    for (const auto& t : tables_) t->release_retired_maps();
    for (const auto& t : tables_) {
      COWSTATE_ASSERT(!t->has_live_snapshot(), "B4",
                      "backend destroyed while a snapshot of it is live");
    }
    spill_.closing = true;  // the cold store goes whole (declared before the tables)
  }
  KeyedStateBackend(const KeyedStateBackend&) = delete;
  KeyedStateBackend& operator=(const KeyedStateBackend&) = delete;

  KeyGroupRange range() const noexcept { return range_; }
  std::int32_t max_parallelism() const noexcept { return key_groups_.max_parallelism(); }
  const TtlTimeProvider& ttl_time_provider() const noexcept { return *clock_; }
  std::int32_t key_group_of(const K& key) const { return key_groups_(KH{}(key)); }

  // Makes `key` the current key. An error, leaving the current key as it was, when its key
  // group is outside this backend's range. Runs the incremental cleanup of every state
  // with a TTL configured to run on every key switch.
  [[gnu::always_inline]] Status set_current_key(const K& key) {
    const std::int32_t g = key_group_of(key);
    if (!range_.contains(g)) [[unlikely]]
      return key_outside_range(g);
    current_key_ = key;
    current_key_group_ = g;
    COWSTATE_ASSERT(range_.contains(current_key_group_), "B5", "current key group in range");
    for (StateHandleBase* h : key_switch_handles_) h->key_switched();
    if (--check_countdown_ == 0) [[unlikely]]
      memory_check_tick();
    return Status();
  }
  bool has_current_key() const noexcept { return current_key_.has_value(); }
  // REQUIRES: has_current_key() (B5).
  const K& current_key() const {
    COWSTATE_ASSERT(current_key_.has_value(), "B5", "state accessed without a current key");
    return *current_key_;
  }
  std::int32_t current_key_group() const {
    COWSTATE_ASSERT(current_key_.has_value(), "B5", "state accessed without a current key");
    return current_key_group_;
  }

  // Registration: returns the state named `name`, registering it on first use. With
  // options.ttl the state's values expire (ttl.h).
  // REQUIRES: a non-empty name of at most 65535 bytes; a name already registered has the
  // same kind, serializers and TTL configuration (B3); a TTL configuration is valid (L1).
  template <class NS, class VS>
  ValueState<KeyedStateBackend, NS, VS>& value_state(const std::string& name,
                                                     typename VS::value_type default_value = {},
                                                     StateOptions options = {}) {
    using Handle = ValueState<KeyedStateBackend, NS, VS>;
    return register_state<Handle, NS, VS>(name, StateKind::value, options, [&](std::size_t i) {
      return std::make_unique<Handle>(this, i, std::move(default_value));
    });
  }
  template <class NS, class ES>
  ListState<KeyedStateBackend, NS, ES>& list_state(const std::string& name,
                                                   StateOptions options = {}) {
    using Handle = ListState<KeyedStateBackend, NS, ES>;
    return register_state<Handle, NS, ListSerializer<ES>>(
        name, StateKind::list, options,
        [&](std::size_t i) { return std::make_unique<Handle>(this, i); });
  }
  template <class NS, class UKS, class UVS>
  MapState<KeyedStateBackend, NS, UKS, UVS>& map_state(const std::string& name,
                                                       StateOptions options = {}) {
    using Handle = MapState<KeyedStateBackend, NS, UKS, UVS>;
    return register_state<Handle, NS, MapSerializer<UKS, UVS>>(
        name, StateKind::map, options,
        [&](std::size_t i) { return std::make_unique<Handle>(this, i); });
  }
  template <class NS, class VS>
  ReducingState<KeyedStateBackend, NS, VS>& reducing_state(
      const std::string& name, ReduceFunction<typename VS::value_type> reduce,
      StateOptions options = {}) {
    using Handle = ReducingState<KeyedStateBackend, NS, VS>;
    return register_state<Handle, NS, VS>(name, StateKind::reducing, options, [&](std::size_t i) {
      return std::make_unique<Handle>(this, i, std::move(reduce));
    });
  }
  template <class NS, class ACCS, class IN, class OUT>
  AggregatingState<KeyedStateBackend, NS, ACCS, IN, OUT>& aggregating_state(
      const std::string& name, AggregateFunction<IN, typename ACCS::value_type, OUT> fn,
      StateOptions options = {}) {
    using Handle = AggregatingState<KeyedStateBackend, NS, ACCS, IN, OUT>;
    return register_state<Handle, NS, ACCS>(
        name, StateKind::aggregating, options,
        [&](std::size_t i) { return std::make_unique<Handle>(this, i, std::move(fn)); });
  }

  std::size_t state_count() const noexcept { return tables_.size(); }
  // The table of the i-th registered state. REQUIRES: i < state_count().
  StateTableBase& table_at(std::size_t i) {
    COWSTATE_ASSERT(i < tables_.size(), "REQUIRES", "state index out of range");
    return *tables_[i];
  }
  // The table of state `name`, or nullptr.
  StateTableBase* find_table(std::string_view name) {
    for (auto& t : tables_) {
      if (t->meta().name == name) return t.get();
    }
    return nullptr;
  }

  // Incremental checkpoints from now on: every map tracks its changes, and snapshot() writes
  // deltas of the last completed checkpoint ("Incremental checkpoints").
  // REQUIRES: no state registered yet; options.valid().
  void enable_incremental_checkpoints(IncrementalCheckpointOptions options = {}) {
    COWSTATE_ASSERT(tables_.empty(), "REQUIRES",
                    "incremental checkpoints enabled after a state was registered");
    COWSTATE_ASSERT(options.valid(), "REQUIRES", "invalid incremental checkpoint options");
    incremental_ = options;
    map_options_.track_changes = true;
  }
  bool incremental_checkpoints() const noexcept { return incremental_.has_value(); }
  // Checkpoint `checkpoint_id` is complete (durable): later checkpoints may be deltas of it.
  // `bytes`: its file's size (0: unknown), for max_chain_share. A checkpoint older than the
  // last completed one, or unknown, changes nothing. Writer thread.
  void notify_checkpoint_complete(std::uint64_t checkpoint_id, std::uint64_t bytes = 0) {
    auto it = pending_.find(checkpoint_id);
    if (it == pending_.end() || checkpoint_id <= last_completed_.id) return;
    const PendingCheckpoint& p = it->second;
    for (const PendingMap& m : p.maps) {
      tables_[m.table]->checkpoint_completed(m.key_group, m.changes);
    }
    last_completed_ = p.parent != 0 ? CompletedCheckpoint{checkpoint_id, p.depth, p.full_bytes,
                                                          p.chain_bytes + bytes}
                                    : CompletedCheckpoint{checkpoint_id, 0, bytes, 0};
    pending_.erase(pending_.begin(), std::next(it));  // older ones can no longer be parents
  }
  // Checkpoint `checkpoint_id` was cancelled or failed: forgotten. The change tracking is
  // not reset: the next delta still reaches back to the last completed checkpoint.
  void notify_checkpoint_aborted(std::uint64_t checkpoint_id) {
    auto it = pending_.find(checkpoint_id);
    if (it == pending_.end()) return;
    // Planted bug: the maps take the dead checkpoint's snapshots as their change base, as if
    // it had completed, while the next delta is still of the last completed checkpoint.
    if (COWSTATE_MUTANT(cancelled_checkpoint_resets_tracking)) {
      for (const PendingMap& m : it->second.maps) {
        tables_[m.table]->checkpoint_completed(m.key_group, m.changes);
      }
    }
    pending_.erase(it);
  }
  // The checkpoint the next snapshot() writes a delta of; 0 when it will be full.
  std::uint64_t next_parent_checkpoint() const noexcept {
    if (!incremental_ || last_completed_.id == 0) return 0;
    if (last_completed_.depth + 1 >= incremental_->full_every) return 0;
    if (last_completed_.full_bytes > 0 &&
        static_cast<double>(last_completed_.chain_bytes) >
            incremental_->max_chain_share * static_cast<double>(last_completed_.full_bytes)) {
      return 0;
    }
    return last_completed_.id;
  }

  // Sync phase of a checkpoint: a map snapshot of every state in every key group that has
  // entries (with incremental checkpoints, of every heap map). Cheap (a version bump and a
  // copy of the directories per map). Writer thread.
  // REQUIRES: with incremental checkpoints, checkpoint ids grow from call to call.
  std::unique_ptr<BackendSnapshot> snapshot(std::uint64_t checkpoint_id) {
    for (const auto& t : tables_) {
      t->release_retired_maps();
      t->flush_cold_cache();  // before the read transaction begins: it sees every write
    }
    CheckpointHeader header;
    header.checkpoint_id = checkpoint_id;
    header.max_parallelism = max_parallelism();
    header.range = range_;
    header.key_serializer = KS::id;
    header.parent_checkpoint_id = next_parent_checkpoint();
    for (const auto& t : tables_) header.states.push_back(t->meta());
    std::vector<std::vector<BackendSnapshot::Section>> key_groups(
        static_cast<std::size_t>(range_.size()));
    std::vector<BlockKind> kinds;
    PendingCheckpoint pending{header.parent_checkpoint_id,
                              last_completed_.depth + 1,
                              last_completed_.full_bytes,
                              last_completed_.chain_bytes,
                              {}};
    if (incremental_) {
      COWSTATE_ASSERT(checkpoint_id > last_snapshot_id_, "REQUIRES",
                      "incremental checkpoint ids that do not grow");
      last_snapshot_id_ = checkpoint_id;
      kinds.reserve(key_groups.size());
      pending.maps.reserve(key_groups.size() * tables_.size());
    }
    for (std::int32_t g = range_.start(); g <= range_.end(); ++g) {
      auto& sections = key_groups[static_cast<std::size_t>(g - range_.start())];
      for (std::size_t i = 0; i < tables_.size(); ++i) {
        if (auto s = tables_[i]->snapshot_key_group(g, incremental_.has_value())) {
          sections.push_back({static_cast<std::uint32_t>(i), std::move(s)});
        }
      }
      if (!incremental_) continue;
      for (const auto& s : sections) {
        const KeyGroupChanges c = s.snapshot->changes();
        if (c.tracked) pending.maps.push_back({s.state, g, c});
      }
      kinds.push_back(header.parent_checkpoint_id != 0 && delta_fits(sections) ? BlockKind::delta
                                                                               : BlockKind::full);
      if (kinds.back() == BlockKind::delta) {
        for (const auto& s : sections) s.snapshot->write_delta();
      }
    }
    spill_.sync_txn.reset();  // each cold section holds it; the next checkpoint begins its own
    if (incremental_) pending_[checkpoint_id] = std::move(pending);
    return std::make_unique<BackendSnapshot>(std::move(header), std::move(key_groups),
                                             std::move(kinds));
  }

  // Restores every registered state from `inputs` (one or several checkpoint files),
  // keeping the key groups of this backend's range. All-or-nothing (C4).
  // REQUIRES: no snapshot of this backend is live (B4).
  // With a memory budget the restored heap maps stay under the high watermark: the key
  // group that crosses it is spilled at once and every later one is decoded straight into
  // the cold tier (spill_tier.h, rule 6).
  Status restore(std::span<const CheckpointInput> inputs, const RestoreOptions& options = {}) {
    for (const auto& t : tables_) {
      t->release_retired_maps();
      COWSTATE_ASSERT(!t->has_live_snapshot(), "B4", "restore while a snapshot is live");
    }
    if (manager_) {
      spill_.restore_heap_limit = manager_->high_watermark_bytes();
      spill_.restore_heap_bytes = 0;
    }
    Status st = restore_state_tables(tables_, max_parallelism(), range_, KS::id, inputs, options);
    spill_.restore_heap_limit = std::numeric_limits<std::size_t>::max();
    if (st.ok()) {  // fresh maps: no change base; the next checkpoint is full
      pending_.clear();
      last_completed_ = {};
    }
    return st;
  }

  // ---- Memory accounting and the spill tier (spill_tier.h). Writer thread. ----

  const SpillOptions& spill_options() const noexcept { return spill_options_; }
  bool has_spill_tier() const noexcept { return cold_ != nullptr; }
  // Bytes the states hold in memory (the budget's measure). O(states x key groups).
  std::uint64_t memory_bytes() const {
    std::uint64_t bytes = 0;
    for (const auto& t : tables_) {
      bytes += t->cache_bytes();
      for (std::int32_t g = range_.start(); g <= range_.end(); ++g) bytes += t->memory(g).bytes;
    }
    return bytes;
  }
  // Per (state, key group) and per backend; folds the request rates up to now.
  BackendMetrics metrics() {
    fold_rates();
    for (const auto& t : tables_) t->release_retired_maps();
    BackendMetrics m;
    m.budget_bytes = spill_options_.memory_budget_bytes;
    m.spills = spill_.spills;
    m.loads = spill_.loads;
    for (const auto& t : tables_) {
      m.cold_cache_bytes += t->cache_bytes();
      m.cold_cache_hits += t->cache_hits();
      m.cold_cache_misses += t->cache_misses();
      m.bytes += t->cache_bytes();
      for (std::int32_t g = range_.start(); g <= range_.end(); ++g) {
        const KeyGroupMemory k = t->memory(g);
        m.key_groups.push_back(KeyGroupMetrics{t->meta().name, g, k.entries, k.bytes,
                                               k.retired_bytes, k.tier, t->rate(g).value()});
        m.entries += k.entries;
        m.bytes += k.bytes;
        m.retired_bytes += k.retired_bytes;
        if (k.tier == Tier::cold) {
          ++m.spilled_key_groups;
          m.cold_entries += k.entries;
        }
      }
    }
    return m;
  }
  // Moves one (state, key group) to the cold tier / back. REQUIRES: has_spill_tier(); the
  // key group is in the other tier; state < state_count().
  Status spill(std::size_t state, std::int32_t key_group) {
    return table_at(state).spill(key_group);
  }
  Status load(std::size_t state, std::int32_t key_group) { return table_at(state).load(key_group); }
  // Runs the spill/load manager now (FLIP-50's check, without waiting for the resource-check
  // interval; the trigger interval still applies). Returns what it decided; an error when a
  // move failed. REQUIRES: has_spill_tier().
  Result<SpillDecision> check_memory() {
    COWSTATE_ASSERT(manager_.has_value(), "REQUIRES", "check_memory without a memory budget");
    return run_manager(clock_->now());
  }
  // The last decision the manager took that left memory over the watermark (why), or empty.
  const std::string& last_spill_shortfall() const noexcept { return shortfall_; }
  // Recounts every (state, key group)'s memory from scratch (deep, O(n)).
  bool check_accounting(std::string* why = nullptr) const {
    for (const auto& t : tables_) {
      if (!t->check_accounting(why)) return false;
    }
    return true;
  }

  bool check_invariants(std::string* why = nullptr) const {
    for (const auto& t : tables_) {
      if (!t->check_invariants(why)) return false;
    }
    return true;
  }

 private:
  // set_current_key's error: `g` is outside this backend's range. Out of line, so that the
  // key switch every record makes inlines to the hash, the range check and two stores
  // (a call returning its Status through memory would sit on every access's path).
  [[gnu::noinline, gnu::cold]] Status key_outside_range(std::int32_t g) const {
    return Status::error("key group " + std::to_string(g) + " of the key is outside this " +
                         "backend's key-group range " + range_.to_string() + " (max parallelism " +
                         std::to_string(max_parallelism()) +
                         "): the record was routed to the wrong instance");
  }

  template <class Handle, class NS, class SS, class Make>
  Handle& register_state(const std::string& name, StateKind kind, const StateOptions& options,
                         Make&& make) {
    COWSTATE_ASSERT(!name.empty() && name.size() <= 0xffff, "B3",
                    "a state name must be 1..65535 bytes");
    StateMetaInfo meta{name,
                       kind,
                       NS::id,
                       SS::id,
                       detail::ElementSerializerIds<SS>::element,
                       detail::ElementSerializerIds<SS>::value,
                       options.ttl};
    for (std::size_t i = 0; i < tables_.size(); ++i) {
      if (tables_[i]->meta().name != name) continue;
      COWSTATE_ASSERT(tables_[i]->meta() == meta, "B3",
                      "state re-registered with another kind, serializers or TTL");
      auto* h = dynamic_cast<Handle*>(handles_[i].get());
      COWSTATE_ASSERT(h != nullptr, "B3", "state re-registered with other C++ types");
      return *h;
    }
    COWSTATE_ASSERT(!options.ttl || options.ttl->valid(), "L1",
                    "a TTL must be in [1, INT64_MAX] ms with a positive cleanup size");
    const std::size_t index = tables_.size();
    if (options.ttl) {  // values stored with their last-access times
      tables_.push_back(
          std::make_unique<StateTable<KS, NS, typename detail::TtlStored<SS>::type, KH>>(
              std::move(meta), range_, max_parallelism(), map_options_, clock_, &spill_));
    } else {
      tables_.push_back(std::make_unique<StateTable<KS, NS, SS, KH>>(
          std::move(meta), range_, max_parallelism(), map_options_, nullptr, &spill_));
    }
    std::unique_ptr<Handle> handle = make(index);
    Handle& ref = *handle;
    COWSTATE_ASSERT(ref.has_ttl() == options.ttl.has_value(), "L1",
                    "handle and table agree on TTL");
    if (options.ttl && options.ttl->incremental_cleanup &&
        options.ttl->incremental_cleanup->run_on_every_key_switch) {
      key_switch_handles_.push_back(&ref);
    }
    handles_.push_back(std::move(handle));
    COWSTATE_ASSERT(handles_.size() == tables_.size(), "B3", "one handle per table");
    return ref;
  }

  void open_spill_tier() {
    const Status valid = SpillLoadManager::validate(spill_options_);
    COWSTATE_ASSERT(valid.ok(), "REQUIRES", valid.message().c_str());
    Result<std::unique_ptr<ColdStore>> store = ColdStore::open(spill_options_.cold);
    if (!store.ok()) throw ColdStoreError(store.status().message());
    cold_ = std::move(store.value());
    spill_.store = cold_.get();
    spill_.cold_cache_bytes = static_cast<std::size_t>(
        spill_options_.cold_cache_ratio * static_cast<double>(spill_options_.memory_budget_bytes));
    manager_.emplace(spill_options_);
    check_countdown_ = spill_options_.check_every_key_switches;
  }
  void fold_rates() {
    const std::int64_t now = clock_->now();
    for (const auto& t : tables_) {
      for (std::int32_t g = range_.start(); g <= range_.end(); ++g) {
        t->rate(g).fold(now, spill_options_.request_rate_half_life_ms);
      }
    }
  }
  // Every check_every_key_switches key switches: a look at the clock, and a check when due.
  [[gnu::noinline]] void memory_check_tick() {
    check_countdown_ = manager_ ? spill_options_.check_every_key_switches
                                : std::numeric_limits<std::uint32_t>::max();
    if (!manager_) return;
    const std::int64_t now = clock_->now();
    if (!manager_->check_due(now)) return;
    // On the record path there is no Status to return: a failed move throws, as the cold
    // tier's own calls do.
    if (Result<SpillDecision> d = run_manager(now); !d.ok()) {
      throw ColdStoreError(d.status().message());
    }
  }
  // A key group's sections can be written as a delta: every state has a heap map there
  // with a change base, and the delta's bound is within max_delta_fraction of the entries.
  bool delta_fits(const std::vector<BackendSnapshot::Section>& sections) const {
    if (sections.size() != tables_.size()) return false;  // an empty spilled key group
    std::size_t bound = 0;
    std::size_t entries = 0;
    for (const auto& s : sections) {
      const KeyGroupChanges c = s.snapshot->changes();
      if (!c.has_base) return false;
      bound += c.bound;
      entries += s.snapshot->size();
    }
    return static_cast<double>(bound) <= incremental_->max_delta_fraction *
                                             static_cast<double>(std::max<std::size_t>(entries, 1));
  }
  // One check: candidates of both tiers, the decision, and the moves it chose.
  Result<SpillDecision> run_manager(std::int64_t now);
  std::vector<SpillCandidate> spill_candidates();

  // Set at construction.
  KeyGroupRange range_;
  KeyGroupAssigner key_groups_;  // key_group_for_hash at the max parallelism
  MapOptions map_options_;
  const TtlTimeProvider* clock_;
  SpillOptions spill_options_;
  // The cold tier, before the tables: it outlives them (their destructors erase their ranges).
  std::unique_ptr<ColdStore> cold_;
  SpillContext spill_;

  // Incremental checkpoints: the last completed checkpoint (id 0: none) with its chain, and
  // the map snapshots of every checkpoint not yet completed or aborted, by id.
  struct CompletedCheckpoint {
    std::uint64_t id = 0;
    std::uint32_t depth = 0;        // deltas in its chain
    std::uint64_t full_bytes = 0;   // bytes of the chain's full checkpoint (0: unknown)
    std::uint64_t chain_bytes = 0;  // bytes of the chain's deltas
  };
  struct PendingMap {
    std::uint32_t table;
    std::int32_t key_group;
    KeyGroupChanges changes;
  };
  struct PendingCheckpoint {
    std::uint64_t parent;  // 0: full
    std::uint32_t depth;   // deltas in its chain, when it has a parent
    std::uint64_t full_bytes;
    std::uint64_t chain_bytes;  // its parent's
    std::vector<PendingMap> maps;
  };

  // Writer thread only.
  std::optional<IncrementalCheckpointOptions> incremental_;
  CompletedCheckpoint last_completed_;
  std::map<std::uint64_t, PendingCheckpoint> pending_;
  std::uint64_t last_snapshot_id_ = 0;
  std::optional<SpillLoadManager> manager_;
  std::uint32_t check_countdown_ = std::numeric_limits<std::uint32_t>::max();
  std::string shortfall_;
  std::vector<std::unique_ptr<StateTableBase>> tables_;  // registration order
  std::vector<std::unique_ptr<StateHandleBase>> handles_;
  std::vector<StateHandleBase*> key_switch_handles_;  // TTL cleanup on every key switch
  std::optional<K> current_key_;
  std::int32_t current_key_group_ = -1;
};

template <class KS, class KH>
std::vector<SpillCandidate> KeyedStateBackend<KS, KH>::spill_candidates() {
  fold_rates();
  std::vector<SpillCandidate> out;
  for (std::size_t i = 0; i < tables_.size(); ++i) {
    StateTableBase& t = *tables_[i];
    // A cold key group's size once loaded: its entries at the bytes per entry of the state's
    // heap key groups.
    std::uint64_t heap_bytes = 0;
    std::uint64_t heap_entries = 0;
    const std::size_t first = out.size();
    for (std::int32_t g = range_.start(); g <= range_.end(); ++g) {
      const KeyGroupMemory m = t.memory(g);
      if (m.tier == Tier::heap) {
        heap_bytes += m.bytes - m.retired_bytes;
        heap_entries += m.entries;
        out.push_back({i, g, m.bytes - m.retired_bytes, t.rate(g).value(), Tier::heap});
      } else if (m.entries > 0) {
        out.push_back({i, g, m.entries, t.rate(g).value(), Tier::cold});
      }
    }
    const double per_entry =
        heap_entries > 0 ? static_cast<double>(heap_bytes) / static_cast<double>(heap_entries)
                         : 64.0;
    for (std::size_t c = first; c < out.size(); ++c) {
      if (out[c].tier == Tier::cold) {
        out[c].bytes = static_cast<std::uint64_t>(static_cast<double>(out[c].bytes) * per_entry);
      }
    }
  }
  return out;
}

template <class KS, class KH>
Result<SpillDecision> KeyedStateBackend<KS, KH>::run_manager(std::int64_t now) {
  manager_->checked(now);
  for (const auto& t : tables_) t->release_retired_maps();
  const std::uint64_t before = memory_bytes();
  std::vector<SpillCandidate> candidates = spill_candidates();
  SpillDecision d = manager_->decide(now, before, candidates);
  if (d.action == SpillAction::spill && spill_options_.cancel_checkpoint &&
      spill_options_.cancel_checkpoints) {
    spill_options_.cancel_checkpoints();  // FLIP-50's cancel.checkpoint
    for (const auto& t : tables_) t->release_retired_maps();
  }
  for (const SpillCandidate& c : d.chosen) {
    StateTableBase& t = *tables_[c.state];
    Status st = c.tier == Tier::heap ? t.spill(c.key_group) : t.load(c.key_group);
    if (!st.ok()) return st;
  }
  if (d.action != SpillAction::none) manager_->acted(now);
  const std::uint64_t after = memory_bytes();
  if (d.action == SpillAction::spill && after > manager_->high_watermark_bytes() && d.why.empty()) {
    std::uint64_t retired = 0;
    for (const auto& t : tables_) {
      for (std::int32_t g = range_.start(); g <= range_.end(); ++g) {
        retired += t->memory(g).retired_bytes;
      }
    }
    d.why = std::to_string(after) + " bytes accounted after the spill, watermark " +
            std::to_string(manager_->high_watermark_bytes()) + ": " + std::to_string(retired) +
            " bytes are retired, held for live snapshots (spilled maps among them)";
  }
  shortfall_ = d.why;
  if (spill_options_.on_decision) spill_options_.on_decision(d, candidates, before, after);
  return d;
}

}  // namespace cowstate
