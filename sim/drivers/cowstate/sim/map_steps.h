// The step functions of the keyed map operations (map_ops.h), written once for every driver
// that applies an operation to a CowStateMap beside its model (model::VersionedMap): the
// isolation lane (isolation.h: the isolation run, the RapidCheck property and the
// real-thread stress test's writer) and the map simulator's writer (sim/src/map/). Each
// step calls the model and the map with the same arguments and compares what they
// returned. What goes in (the keys, the states, how a hand-out is changed) and what a
// driver checks around a step (the simulator's minimal-copy check, the isolation lane's
// image comparisons) stay the driver's own.
//
// Every step calls the model before the map, so that a map call stopped part-way, at a
// yield point (a scenario's `pause at`) or by a failed assertion, never finds the model
// behind the operation it is in. A step returns what differed, as
// "<op> (key,ns) returned <map's>, the model <model's>", or nullopt.
//
// Thread safety: a MapSteps is the writer's; it holds references to its map and model.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "cowstate/model/versioned_map.h"

namespace cowstate::sim {

// The state behind a pointer a map or model returned, as a value to compare; nullopt for
// none.
template <class S>
std::optional<S> optional_of(const S* p) {
  return p == nullptr ? std::nullopt : std::optional<S>(*p);
}

template <class Map, class Model>
class MapSteps {
 public:
  using K = typename Map::key_type;
  using N = typename Map::namespace_type;
  using S = typename Map::state_type;
  using Mismatch = std::optional<std::string>;

  MapSteps(Map& map, Model& model) noexcept : map_(map), model_(model) {}

  Mismatch put(const K& k, const N& n, S state) {
    model_.put(k, n, state);
    map_.put(k, n, std::move(state));
    return std::nullopt;
  }

  Mismatch put_and_get_old(const K& k, const N& n, S state) {
    const std::optional<S> want = model_.put_and_get_old(k, n, state);
    const std::optional<S> got = map_.put_and_get_old(k, n, std::move(state));
    return differ("put_and_get_old", k, n, got, want);
  }

  Mismatch remove(const K& k, const N& n) {
    const bool want = model_.remove(k, n);
    const bool got = map_.remove(k, n);
    return differ("remove", k, n, got, want);
  }

  Mismatch remove_and_get_old(const K& k, const N& n) {
    const std::optional<S> want = model_.remove_and_get_old(k, n);
    const std::optional<S> got = map_.remove_and_get_old(k, n);
    return differ("remove_and_get_old", k, n, got, want);
  }

  Mismatch get(const K& k, const N& n) {
    const std::optional<S> want = optional_of(model_.get(k, n));
    const std::optional<S> got = optional_of(map_.get(k, n));
    return differ("get", k, n, got, want);
  }

  Mismatch contains(const K& k, const N& n) {
    const bool want = model_.contains(k, n);
    const bool got = map_.contains(k, n);
    return differ("contains", k, n, got, want);
  }

  // Compares the two hand-outs, then applies `mutate(S&)` to each: the change a caller
  // makes through get_mutable, which must reach the map's state and no snapshot's.
  template <class Mutate>
  Mismatch get_mutable(const K& k, const N& n, Mutate&& mutate) {
    S* want = model_.get_mutable(k, n);
    S* got = map_.get_mutable(k, n);
    if (Mismatch bad = differ("get_mutable", k, n, optional_of(got), optional_of(want))) {
      return bad;
    }
    if (want != nullptr) mutate(*want);
    if (got != nullptr) mutate(*got);
    return std::nullopt;
  }

  // The model takes `model_fn` (S fn(const S*, const T&)); the map takes `map_fn`, the same
  // function or its in-place form (void fn(S&, const T&)). Transform returns nothing, so
  // there is nothing to compare: the driver's checks after the step read the new state.
  template <class T, class MapFn, class ModelFn>
  Mismatch transform(const K& k, const N& n, const T& x, MapFn&& map_fn, ModelFn&& model_fn) {
    model_.transform(k, n, x, std::forward<ModelFn>(model_fn));
    map_.transform(k, n, x, std::forward<MapFn>(map_fn));
    return std::nullopt;
  }

 private:
  template <class T>
  static Mismatch differ(const char* op, const K& k, const N& n, const T& got, const T& want) {
    if (got == want) return std::nullopt;
    return std::string(op) + " " + model::to_text(std::make_pair(k, n)) + " returned " +
           model::to_text(got) + ", the model " + model::to_text(want);
  }

  Map& map_;
  Model& model_;
};

}  // namespace cowstate::sim
