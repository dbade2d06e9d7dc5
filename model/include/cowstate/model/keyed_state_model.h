#ifndef COWSTATE_MODEL_KEYED_STATE_MODEL_H_
#define COWSTATE_MODEL_KEYED_STATE_MODEL_H_

// KeyedStateModel<K, N> is the reference semantics of keyed state: what each operation on
// Flink's five state kinds returns and what it leaves stored, with namespace merging and
// time-to-live at logical time. apply() is the oracle the backend simulation and the keyed
// state behaviour suite judge KeyedStateBackend's states by; the versioned values, the
// checkpoints and the restores are its BackendModel's (backend()).
//
// Values. Every state's value is stored in one canonical form, a vector of int64:
//   value        [v]                  with TTL [v, t]
//   list         [e1, e2, ...]        with TTL [e1, t1, e2, t2, ...]
//   map          [k1, v1, k2, v2, ...] by user key; with TTL [k1, v1, t1, ...]
//   reducing     [r]
//   aggregating  the accumulator, whatever the AggregateSpec makes it
// where t is an element's last-access time (TtlModel). A list or map with no element left
// is not stored: an empty update, removing the last user key and reading away the last
// live element remove the entry.
//
// Results. A read returns a StateResult: nullopt for "absent" (a map's missing user key, a
// reducing or aggregating state with nothing added), else the values: a value state's value
// (its default when unset), a list's elements (none when unset), a map user key's value, a
// reduced value, an aggregate's result. apply() answers with every result the semantics
// allow: one for each read without TTL; under ReturnExpiredIfNotCleanedUp an expired
// element may be returned or not, depending on whether cleanup removed it first, so both
// are allowed. Writes answer nothing.
//
// TTL (a TtlModel, for value, list and map states registered with ttl). Writes stamp the
// written elements with `now`; a read of a live element returns it (refreshing it under
// OnReadAndWrite); a read of an expired one removes it. clear and merge do the same as
// without TTL (merged elements keep their times). Cleanup inside production calls is not
// an operation here: the caller adopts what it did through backend().
//
// Thread safety. None; one thread.
//
// Invariants (checked by require()):
//   KS1. Each operation is one its state's kind has (get/update/clear for value;
//        get/add/add_all/update/clear/merge for list; get/put/remove/clear for map;
//        get/add/clear/merge for reducing and aggregating).
//   KS2. Only value, list and map states have a TTL; every stored value is in its kind's
//        canonical form and no list or map is stored empty.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cowstate/model/backend_model.h"
#include "cowstate/model/state_kind.h"
#include "cowstate/model/ttl_model.h"
#include "cowstate/model/versioned_map.h"

namespace cowstate::model {

// One operation at the current (key, namespace).
template <class N>
struct StateCall {
  StateOp op = StateOp::get;
  std::int64_t x = 0;                // the value, element, input, or user key
  std::int64_t y = 0;                // put: the user value
  std::vector<std::int64_t> values;  // add_all, list update: the elements
  std::vector<N> sources;            // merge: the source namespaces, in order
};

using StateResult = std::optional<std::vector<std::int64_t>>;

// Every result a read may return; none for a write.
struct Allowed {
  std::vector<StateResult> results;
  bool is_read() const { return !results.empty(); }
  bool allows(const StateResult& r) const {
    for (const StateResult& a : results) {
      if (a == r) return true;
    }
    return false;
  }
};

// An aggregate function over int64 inputs with a canonical accumulator.
struct AggregateSpec {
  std::vector<std::int64_t> initial;
  std::function<std::vector<std::int64_t>(std::vector<std::int64_t>, std::int64_t)> add;
  std::function<std::vector<std::int64_t>(std::vector<std::int64_t>,
                                          const std::vector<std::int64_t>&)>
      merge;
  std::function<std::int64_t(const std::vector<std::int64_t>&)> result;

  // The integer mean: accumulator [sum, count], result sum / count (0 for no inputs).
  static AggregateSpec average() {
    using V = std::vector<std::int64_t>;
    return {V{0, 0},
            [](V acc, std::int64_t in) {
              acc[0] += in;
              acc[1] += 1;
              return acc;
            },
            [](V a, const V& b) {
              a[0] += b[0];
              a[1] += b[1];
              return a;
            },
            [](const V& acc) { return acc[1] == 0 ? 0 : acc[0] / acc[1]; }};
  }
};

// A state: its kind, and what the kind needs.
struct StateSpec {
  StateKind kind = StateKind::value;
  bool ttl = false;                // REQUIRES (KS2): a value, list or map state
  std::int64_t default_value = 0;  // value: what get returns when unset
  std::function<std::int64_t(std::int64_t, std::int64_t)> reduce =  // reducing
      [](std::int64_t a, std::int64_t b) { return a + b; };
  AggregateSpec aggregate = AggregateSpec::average();  // aggregating
};

template <class K, class N>
class KeyedStateModel {
 public:
  using Value = std::vector<std::int64_t>;
  using Backend = BackendModel<K, N, Value>;

  // `ttl`: the rules of the states registered with ttl (none: registering one fails).
  explicit KeyedStateModel(std::optional<TtlModel> ttl = std::nullopt) : ttl_(std::move(ttl)) {}

  // Registers state `name`. REQUIRES: a new name; KS2.
  void register_state(const std::string& name, StateSpec spec) {
    detail::require(!spec.ttl || (ttl_.has_value() && spec.kind != StateKind::reducing &&
                                  spec.kind != StateKind::aggregating),
                    "KS2: a TTL state is a value, list or map state of a model with TTL rules");
    backend_.register_state(name, spec.kind);
    specs_[name] = std::move(spec);
  }
  const StateSpec& spec(const std::string& name) const {
    const auto it = specs_.find(name);
    detail::require(it != specs_.end(), "a registered state");
    return it->second;
  }
  bool has_ttl(const std::string& name) const { return spec(name).ttl; }
  const std::optional<TtlModel>& ttl() const { return ttl_; }
  // The numbers per element of a TTL state's canonical form (a map's: 3).
  std::size_t stride(const std::string& name) const {
    return spec(name).kind == StateKind::map ? 3 : 2;
  }

  // The versioned values, checkpoints and restores.
  Backend& backend() { return backend_; }
  const Backend& backend() const { return backend_; }

  // Applies `call` to state `name` at (key, ns) at logical time `now` (read by TTL states
  // only): changes what it stores as the semantics say and answers what it may return.
  // REQUIRES: KS1.
  Allowed apply(const std::string& name, const K& key, const N& ns, const StateCall<N>& call,
                std::int64_t now) {
    const StateSpec& s = spec(name);
    At at{backend_.state(name), key, ns};
    if (call.op == StateOp::clear) {
      at.map.remove(key, ns);
      return {};
    }
    if (s.ttl && call.op != StateOp::merge) return apply_ttl(s, at, call, now);
    switch (s.kind) {
      case StateKind::value:
        return apply_value(s, at, call);
      case StateKind::list:
        return apply_list(at, call);
      case StateKind::map:
        return apply_map(at, call, false, now);
      case StateKind::reducing:
        return apply_reducing(s, at, call);
      case StateKind::aggregating:
        return apply_aggregating(s, at, call);
    }
    return {};
  }

 private:
  // Where an operation applies.
  struct At {
    typename Backend::Map& map;
    const K& key;
    const N& ns;
    const Value* get() const { return map.get(key, ns); }
    // Puts `v`, or removes the entry when it has no element left (KS2).
    void store(const Value& v) const {
      if (v.empty()) {
        map.remove(key, ns);
      } else {
        map.put(key, ns, v);
      }
    }
  };

  static Allowed one(StateResult r) { return Allowed{{std::move(r)}}; }
  static void bad_op() { detail::require(false, "KS1: an operation its state's kind has"); }

  // Flink's mergeNamespaces: each source's state removed and combined in order, then
  // combined into the target's.
  template <class F>
  static Allowed merge(const At& at, const std::vector<N>& sources, F&& combine) {
    std::optional<Value> merged;
    for (const N& source : sources) {
      std::optional<Value> v = at.map.remove_and_get_old(at.key, source);
      if (!v) continue;
      merged = merged ? combine(std::move(*merged), *v) : std::move(v);
    }
    if (!merged) return {};
    const Value* old = at.get();
    at.map.put(at.key, at.ns, old != nullptr ? combine(*old, *merged) : *merged);
    return {};
  }
  static Value concat(Value x, const Value& y) {
    x.insert(x.end(), y.begin(), y.end());
    return x;
  }

  Allowed apply_value(const StateSpec& s, const At& at, const StateCall<N>& call) {
    const Value* cur = at.get();
    if (call.op == StateOp::update) {
      at.map.put(at.key, at.ns, {call.x});
    } else if (call.op == StateOp::get) {
      return one(Value{cur != nullptr ? (*cur)[0] : s.default_value});
    } else {
      bad_op();
    }
    return {};
  }

  Allowed apply_list(const At& at, const StateCall<N>& call) {
    const Value* cur = at.get();
    Value v = cur != nullptr ? *cur : Value{};
    switch (call.op) {
      case StateOp::add:
        v.push_back(call.x);
        at.store(v);
        return {};
      case StateOp::add_all:
        if (!call.values.empty()) at.store(concat(std::move(v), call.values));
        return {};
      case StateOp::update:
        at.store(call.values);
        return {};
      case StateOp::get:
        return one(v);
      case StateOp::merge:
        return merge(at, call.sources, concat);
      default:
        bad_op();
        return {};
    }
  }

  Allowed apply_reducing(const StateSpec& s, const At& at, const StateCall<N>& call) {
    const Value* cur = at.get();
    auto combine = [&s](Value a, const Value& b) { return Value{s.reduce(a[0], b[0])}; };
    switch (call.op) {
      case StateOp::add:
        at.map.put(at.key, at.ns, cur != nullptr ? combine(*cur, {call.x}) : Value{call.x});
        return {};
      case StateOp::get:
        return one(cur != nullptr ? StateResult(Value{(*cur)[0]}) : std::nullopt);
      case StateOp::merge:
        return merge(at, call.sources, combine);
      default:
        bad_op();
        return {};
    }
  }

  Allowed apply_aggregating(const StateSpec& s, const At& at, const StateCall<N>& call) {
    const Value* cur = at.get();
    switch (call.op) {
      case StateOp::add:
        at.map.put(at.key, at.ns,
                   s.aggregate.add(cur != nullptr ? *cur : s.aggregate.initial, call.x));
        return {};
      case StateOp::get:
        return one(cur != nullptr ? StateResult(Value{s.aggregate.result(*cur)}) : std::nullopt);
      case StateOp::merge:
        return merge(at, call.sources, s.aggregate.merge);
      default:
        bad_op();
        return {};
    }
  }

  // --- TTL ---------------------------------------------------------------------------------

  // A read of one element stored as `element` (or nothing) whose last access is `last`:
  // what it may return, and whether it is live.
  Allowed read_element(const StateResult& stored, std::int64_t last, std::int64_t now,
                       const StateResult& otherwise) const {
    if (!stored) return one(otherwise);
    if (!ttl_->expired_at(last, now)) return one(stored);
    Allowed out = one(otherwise);
    if (ttl_->return_expired()) out.results.push_back(stored);
    return out;
  }

  Allowed apply_ttl(const StateSpec& s, const At& at, const StateCall<N>& call, std::int64_t t) {
    switch (s.kind) {
      case StateKind::value:
        return apply_ttl_value(s, at, call, t);
      case StateKind::list:
        return apply_ttl_list(at, call, t);
      default:
        return apply_map(at, call, true, t);
    }
  }

  Allowed apply_ttl_value(const StateSpec& s, const At& at, const StateCall<N>& call,
                          std::int64_t t) {
    const Value* cur = at.get();
    if (call.op == StateOp::update) {
      at.map.put(at.key, at.ns, {call.x, t});
      return {};
    }
    if (call.op != StateOp::get) bad_op();
    if (cur == nullptr) return one(Value{s.default_value});
    const Value stored = *cur;
    Allowed out = read_element(Value{stored[0]}, stored[1], t, Value{s.default_value});
    if (ttl_->expired_at(stored[1], t)) {
      at.map.remove(at.key, at.ns);
    } else if (ttl_->refresh_on_read()) {
      at.map.put(at.key, at.ns, {stored[0], t});
    }
    return out;
  }

  Allowed apply_ttl_list(const At& at, const StateCall<N>& call, std::int64_t t) {
    const Value* cur = at.get();
    Value v = cur != nullptr ? *cur : Value{};
    auto stamped = [t](const Value& elements) {
      Value out;
      for (std::int64_t e : elements) {
        out.push_back(e);
        out.push_back(t);
      }
      return out;
    };
    auto values = [](const Value& flat) {
      Value out;
      for (std::size_t i = 0; i < flat.size(); i += 2) out.push_back(flat[i]);
      return out;
    };
    switch (call.op) {
      case StateOp::add:
        at.store(concat(std::move(v), stamped({call.x})));
        return {};
      case StateOp::add_all:
        if (!call.values.empty()) at.store(concat(std::move(v), stamped(call.values)));
        return {};
      case StateOp::update:
        at.store(stamped(call.values));
        return {};
      case StateOp::get: {
        // Cleanup inside the call either filtered this list (only live elements are
        // left) or did not (all of them are there to be returned).
        Allowed out = one(values(ttl_->live_part(2, v, t, false)));
        if (ttl_->return_expired()) out.results.push_back(values(v));
        if (cur != nullptr) at.store(ttl_->after_read(2, v, t));
        return out;
      }
      default:
        bad_op();
        return {};
    }
  }

  // A map state's operation; `timed`: with TTL, each user key's last access kept after
  // its value (stride 3).
  Allowed apply_map(const At& at, const StateCall<N>& call, bool timed, std::int64_t t) {
    const std::size_t stride = timed ? 3 : 2;
    std::map<std::int64_t, std::pair<std::int64_t, std::int64_t>> um;  // -> (value, last)
    if (const Value* cur = at.get(); cur != nullptr) {
      for (std::size_t i = 0; i + stride <= cur->size(); i += stride) {
        um[(*cur)[i]] = {(*cur)[i + 1], timed ? (*cur)[i + 2] : 0};
      }
    }
    auto flat = [&um, timed] {
      Value out;
      for (const auto& [uk, vt] : um) {
        out.push_back(uk);
        out.push_back(vt.first);
        if (timed) out.push_back(vt.second);
      }
      return out;
    };
    switch (call.op) {
      case StateOp::put:
        um[call.x] = {call.y, t};
        at.store(flat());
        return {};
      case StateOp::remove:
        if (um.erase(call.x) != 0) at.store(flat());
        return {};
      case StateOp::get: {
        const auto it = um.find(call.x);
        if (it == um.end()) return one(std::nullopt);
        if (!timed) return one(Value{it->second.first});
        Allowed out = read_element(Value{it->second.first}, it->second.second, t, std::nullopt);
        if (ttl_->expired_at(it->second.second, t)) {
          um.erase(it);
          at.store(flat());
        } else if (ttl_->refresh_on_read()) {
          it->second.second = t;
          at.store(flat());
        }
        return out;
      }
      default:
        bad_op();
        return {};
    }
  }

  // --- Touched by the owning thread only ---
  std::optional<TtlModel> ttl_;
  Backend backend_;
  std::map<std::string, StateSpec> specs_;
};

}  // namespace cowstate::model

#endif  // COWSTATE_MODEL_KEYED_STATE_MODEL_H_
