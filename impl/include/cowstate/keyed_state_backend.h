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
// TTL
// ---
// StateOptions::ttl is recorded in the state's metadata and in checkpoints; expiry itself
// is not implemented yet (values are not wrapped with access times).
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
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
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
#include "cowstate/serializers.h"
#include "cowstate/state_table.h"
#include "cowstate/status.h"

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
};

template <class KS, class KH>
class KeyedStateBackend;

namespace detail {

// What every state handle shares: its backend, its table (by registration index, so a
// restore that swaps tables is seen at once) and its current namespace.
template <class Backend, class NS, class SS>
class KeyedStateHandle : public StateHandleBase {
 public:
  using K = typename Backend::key_type;
  using N = typename NS::value_type;
  using S = typename SS::value_type;
  using Table = StateTable<typename Backend::key_serializer, NS, SS, typename Backend::key_hash>;
  using Map = typename Table::Map;

  KeyedStateHandle(Backend* backend, std::size_t index) : backend_(backend), index_(index) {}

  void set_current_namespace(const N& ns) { ns_ = ns; }
  const N& current_namespace() const noexcept { return ns_; }
  // Removes the state of (current key, current namespace).
  void clear() { map().remove(key(), ns_); }
  // The table behind this handle (tests, the simulator).
  Table& table() { return static_cast<Table&>(backend_->table_at(index_)); }

 protected:
  // The current key group's map. REQUIRES: a current key (B5).
  Map& map() { return table().map(backend_->current_key_group()); }
  const K& key() const { return backend_->current_key(); }

  // Flink's mergeNamespaces: removes each source's state, combines them with `merge`
  // (merge(accumulated, next) -> S), then combines the result into the target's state.
  template <class F>
  void merge_into(const N& target, std::span<const N> sources, F&& merge) {
    Map& m = map();
    std::optional<S> merged;
    for (const N& source : sources) {
      std::optional<S> s = m.remove_and_get_old(key(), source);
      if (!s) continue;
      merged = merged ? merge(std::move(*merged), *s) : std::move(s);
    }
    if (!merged) return;
    m.transform(key(), target, *merged,
                [&merge](const S* old, const S& add) { return old ? merge(S(*old), add) : add; });
  }

  N ns_{};

 private:
  Backend* backend_;
  std::size_t index_;
};

}  // namespace detail

template <class Backend, class NS, class VS>
class ValueState final : public detail::KeyedStateHandle<Backend, NS, VS> {
  using Base = detail::KeyedStateHandle<Backend, NS, VS>;

 public:
  using V = typename VS::value_type;
  ValueState(Backend* b, std::size_t index, V default_value)
      : Base(b, index), default_(std::move(default_value)) {}

  // The value, or the default value when there is none.
  V value() {
    const V* v = this->map().get(this->key(), this->ns_);
    return v != nullptr ? *v : default_;
  }
  void update(V v) { this->map().put(this->key(), this->ns_, std::move(v)); }

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

  // The elements (empty when there are none).
  std::vector<E> get() {
    const std::vector<E>* l = this->map().get(this->key(), this->ns_);
    return l != nullptr ? *l : std::vector<E>{};
  }
  void add(E e) {
    if (std::vector<E>* l = this->map().get_mutable(this->key(), this->ns_)) {
      l->push_back(std::move(e));  // get_mutable copied it first if a snapshot shares it
    } else {
      this->map().put(this->key(), this->ns_, std::vector<E>{std::move(e)});
    }
  }
  void add_all(const std::vector<E>& es) {
    if (es.empty()) return;
    if (std::vector<E>* l = this->map().get_mutable(this->key(), this->ns_)) {
      l->insert(l->end(), es.begin(), es.end());
    } else {
      this->map().put(this->key(), this->ns_, es);
    }
  }
  // Replaces the elements; an empty list clears the state.
  void update(std::vector<E> es) {
    if (es.empty()) {
      this->clear();
    } else {
      this->map().put(this->key(), this->ns_, std::move(es));
    }
  }
  // Appends the sources' elements to the target's, removing the sources.
  void merge_namespaces(const N& target, std::span<const N> sources) {
    this->merge_into(target, sources, [](std::vector<E> a, const std::vector<E>& b) {
      a.insert(a.end(), b.begin(), b.end());
      return a;
    });
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

  std::optional<UV> get(const UK& k) {
    const UserMap* m = this->map().get(this->key(), this->ns_);
    if (m == nullptr) return std::nullopt;
    auto it = m->find(k);
    return it != m->end() ? std::optional<UV>(it->second) : std::nullopt;
  }
  bool contains(const UK& k) {
    const UserMap* m = this->map().get(this->key(), this->ns_);
    return m != nullptr && m->count(k) != 0;
  }
  void put(UK k, UV v) {
    if (UserMap* m = this->map().get_mutable(this->key(), this->ns_)) {
      (*m)[std::move(k)] = std::move(v);
    } else {
      UserMap fresh;
      fresh.emplace(std::move(k), std::move(v));
      this->map().put(this->key(), this->ns_, std::move(fresh));
    }
  }
  void put_all(const UserMap& entries) {
    if (entries.empty()) return;
    if (UserMap* m = this->map().get_mutable(this->key(), this->ns_)) {
      for (const auto& [k, v] : entries) (*m)[k] = v;
    } else {
      this->map().put(this->key(), this->ns_, entries);
    }
  }
  // Removes one user key; removing the last one clears the namespace.
  void remove(const UK& k) {
    const UserMap* current = this->map().get(this->key(), this->ns_);
    if (current == nullptr || current->count(k) == 0) return;  // no copy for a no-op
    UserMap* m = this->map().get_mutable(this->key(), this->ns_);
    COWSTATE_ASSERT(m != nullptr, "B5", "a map state vanished between get and get_mutable");
    m->erase(k);
    if (m->empty()) this->clear();
  }
  bool is_empty() { return this->map().get(this->key(), this->ns_) == nullptr; }
  // The user map (empty when there is none). Valid until the next call on the backend.
  const UserMap& entries() {
    static const UserMap kEmpty;
    const UserMap* m = this->map().get(this->key(), this->ns_);
    return m != nullptr ? *m : kEmpty;
  }
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
    const V* v = this->map().get(this->key(), this->ns_);
    return v != nullptr ? std::optional<V>(*v) : std::nullopt;
  }
  void add(const V& v) {
    this->map().transform(this->key(), this->ns_, v, [this](const V* old, const V& in) {
      return old != nullptr ? reduce_(*old, in) : in;
    });
  }
  void merge_namespaces(const N& target, std::span<const N> sources) {
    this->merge_into(target, sources, [this](V a, const V& b) { return reduce_(a, b); });
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
    const ACC* acc = this->map().get(this->key(), this->ns_);
    return acc != nullptr ? std::optional<OUT>(fn_.get_result(*acc)) : std::nullopt;
  }
  void add(const IN& in) {
    this->map().transform(this->key(), this->ns_, in, [this](const ACC* old, const IN& value) {
      return fn_.add(value, old != nullptr ? ACC(*old) : fn_.create_accumulator());
    });
  }
  void merge_namespaces(const N& target, std::span<const N> sources) {
    this->merge_into(target, sources, [this](ACC a, const ACC& b) { return fn_.merge(a, b); });
  }

 private:
  Function fn_;
};

template <class KS, class KH = KeyHash<typename KS::value_type>>
class KeyedStateBackend {
 public:
  using key_type = typename KS::value_type;
  using key_serializer = KS;
  using key_hash = KH;
  using K = key_type;

  // REQUIRES: K1 and K2 for (range, max_parallelism): range within [0, max_parallelism).
  explicit KeyedStateBackend(KeyGroupRange range,
                             std::int32_t max_parallelism = kDefaultMaxParallelism,
                             MapOptions map_options = {})
      : range_(range), max_parallelism_(max_parallelism), map_options_(map_options) {
    COWSTATE_ASSERT(max_parallelism >= 1 && max_parallelism <= kUpperBoundMaxParallelism, "K1",
                    "max parallelism out of [1, 32768]");
    COWSTATE_ASSERT(range.empty() || range.end() < max_parallelism, "K2",
                    "key group range beyond max parallelism");
  }
  ~KeyedStateBackend() {
    for (const auto& t : tables_) {
      COWSTATE_ASSERT(!t->has_live_snapshot(), "B4",
                      "backend destroyed while a snapshot of it is live");
    }
  }
  KeyedStateBackend(const KeyedStateBackend&) = delete;
  KeyedStateBackend& operator=(const KeyedStateBackend&) = delete;

  KeyGroupRange range() const noexcept { return range_; }
  std::int32_t max_parallelism() const noexcept { return max_parallelism_; }
  std::int32_t key_group_of(const K& key) const {
    return key_group_for_hash(KH{}(key), max_parallelism_);
  }

  // Makes `key` the current key. An error, leaving the current key as it was, when its key
  // group is outside this backend's range.
  Status set_current_key(const K& key) {
    const std::int32_t g = key_group_of(key);
    if (!range_.contains(g)) {
      return Status::error("key group " + std::to_string(g) + " of the key is outside this " +
                           "backend's key-group range " + range_.to_string() +
                           " (max parallelism " + std::to_string(max_parallelism_) +
                           "): the record was routed to the wrong instance");
    }
    current_key_ = key;
    current_key_group_ = g;
    COWSTATE_ASSERT(range_.contains(current_key_group_), "B5", "current key group in range");
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

  // Registration: returns the state named `name`, registering it on first use.
  // REQUIRES: a non-empty name of at most 65535 bytes; a name already registered has the
  // same kind and serializers (B3).
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

  // Sync phase of a checkpoint: a map snapshot of every state in every key group that has
  // entries. Cheap (a version bump and a copy of the bucket heads per map). Writer thread.
  std::unique_ptr<BackendSnapshot> snapshot(std::uint64_t checkpoint_id) {
    CheckpointHeader header;
    header.checkpoint_id = checkpoint_id;
    header.max_parallelism = max_parallelism_;
    header.range = range_;
    header.key_serializer = KS::id;
    for (const auto& t : tables_) header.states.push_back(t->meta());
    std::vector<std::vector<BackendSnapshot::Section>> key_groups(
        static_cast<std::size_t>(range_.size()));
    for (std::int32_t g = range_.start(); g <= range_.end(); ++g) {
      auto& sections = key_groups[static_cast<std::size_t>(g - range_.start())];
      for (std::size_t i = 0; i < tables_.size(); ++i) {
        if (auto s = tables_[i]->snapshot_key_group(g)) {
          sections.push_back({static_cast<std::uint32_t>(i), std::move(s)});
        }
      }
    }
    return std::make_unique<BackendSnapshot>(std::move(header), std::move(key_groups));
  }

  // Restores every registered state from `inputs` (one or several checkpoint files),
  // keeping the key groups of this backend's range. All-or-nothing (C4).
  // REQUIRES: no snapshot of this backend is live (B4).
  Status restore(std::span<const CheckpointInput> inputs, const RestoreOptions& options = {}) {
    for (const auto& t : tables_) {
      COWSTATE_ASSERT(!t->has_live_snapshot(), "B4", "restore while a snapshot is live");
    }
    return restore_state_tables(tables_, max_parallelism_, range_, KS::id, inputs, options);
  }

  bool check_invariants(std::string* why = nullptr) const {
    for (const auto& t : tables_) {
      if (!t->check_invariants(why)) return false;
    }
    return true;
  }

 private:
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
    const std::size_t index = tables_.size();
    tables_.push_back(std::make_unique<StateTable<KS, NS, SS, KH>>(std::move(meta), range_,
                                                                   max_parallelism_, map_options_));
    std::unique_ptr<Handle> handle = make(index);
    Handle& ref = *handle;
    handles_.push_back(std::move(handle));
    COWSTATE_ASSERT(handles_.size() == tables_.size(), "B3", "one handle per table");
    return ref;
  }

  // Set at construction.
  KeyGroupRange range_;
  std::int32_t max_parallelism_;
  MapOptions map_options_;

  // Writer thread only.
  std::vector<std::unique_ptr<StateTableBase>> tables_;  // registration order
  std::vector<std::unique_ptr<StateHandleBase>> handles_;
  std::optional<K> current_key_;
  std::int32_t current_key_group_ = -1;
};

}  // namespace cowstate
