// Isolation driver: a deterministic, seeded, randomized run of CowStateMap against the
// reference model (model::VersionedMap), one random operation per step, checking after
// every step that the live map and every live snapshot show exactly what the model says.
//
// Who uses it
// -----------
//   tests/isolation_test.cc   every mix over three seeds in the default suite (about 1 s
//                             dev, 5 s asan; COWSTATE_ISOLATION_OPS=10000000 for a long run);
//   sim/src/cli/isolation_main.cc the `cowstate-isolation` demo (--seconds, --seed, --keys);
//   tests/stress_test.cc      the real-thread stress test, which reuses the same ops and
//                             step functions (leveldb's ConcurrentWithoutThreads /
//                             Concurrent pattern): its writer thread draws with draw_op()
//                             and applies with an IsolationLane, and detach_snapshot()
//                             hands a frozen snapshot plus its expected image to a reader
//                             thread that iterates or serializes it and releases it.
//
// Shape of a run
// --------------
// IsolationRun owns one or two *lanes*. A lane is a CowStateMap, a model::VersionedMap and
// the live snapshots of both, for one state type:
//   boxed lane   std::vector<std::int64_t> states: boxed, so state copy-on-write (I4),
//                state sharing between entry copies and retired states are exercised;
//   inline lane  std::int64_t states: stored in the entry (optional, on by default).
// Every step draws one Op from the run's Prng (draw()) and applies it to every lane
// (apply()), so the lanes see the same keys, the same snapshot starts and the same
// releases. The ops: put, put_and_get_old, remove, remove_and_get_old, get, contains,
// get_mutable followed by an in-place mutation (the same mutation is applied to the model's
// get_mutable), transform, snapshot start (bounded number of live snapshots), release of a
// random live snapshot (sometimes twice, sometimes an already released handle again), and
// one incremental-visitor call whose remove/replace decisions are mirrored on the model.
//
// Checks after every step, per lane (each names what broke in the failure text):
//   - the op's result against the model's (returned states, presence, booleans);
//   - the state of the touched key, read without side effects (CowStateMapAccess::find);
//   - size, map version and highest required version against the model;
//   - every `full_compare_every_ops` steps: the whole live map against the model, and
//     every live snapshot (iterated with Snapshot::for_each) against model.image(v) as
//     captured when it started; a snapshot is also checked right after it starts and
//     right before its release, where the captured image is also compared with
//     model.image(v) once more (the model must not have changed it either);
//   - every `deep_check_every_ops` steps: map.check_invariants(), the model's, and the
//     model's size;
//   - whenever the last live snapshot was released: map.retired_count() == 0 (I10).
// The comparisons allocate nothing on success (a per-key visit stamp catches duplicates);
// on a mismatch they build both images and report model::diff.
// The first mismatch stops the run and is kept as an IsolationFailure: seed, step, lane,
// the op, and what differed (model::diff output for images).
//
// Determinism
// -----------
// Every random value comes from the simulator's Prng (cowstate/sim/random.h: xoshiro256**
// seeded through SplitMix64, Lemire's unbiased below(); no std:: distributions), and nothing
// iterates an unordered container, so a seed and its options give the same ops, the same
// checks and the same counters in every build.
//
// Thread safety
// -------------
// An IsolationRun, its lanes and their models belong to one writer thread. The only calls
// allowed on other threads are check_snapshot() / read_snapshot() on a DetachedSnapshot (or
// any snapshot handle) and its release(), as CowStateMap allows. Assertion failures inside
// the map become IsolationFailures only under ScopedThrowingAssertHandler, which installs
// a process-wide handler: install it before starting threads.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cowstate/assert.h"
#include "cowstate/cow_state_map.h"
#include "cowstate/cow_state_map_access.h"
#include "cowstate/model/versioned_map.h"
#include "cowstate/serializers.h"
#include "cowstate/sim/map_ops.h"
#include "cowstate/sim/map_steps.h"
#include "cowstate/sim/random.h"

namespace cowstate::sim {

// ---------------------------------------------------------------------------------------
// Options and ops

struct IsolationOptions {
  std::uint64_t seed = 1;
  // Keys are index * key_stride for index in [0, key_count); namespaces [0, namespace_count).
  // With identity_hash, a stride that is a multiple of the capacity puts every key of a
  // namespace into one chain.
  std::uint32_t key_count = 64;
  std::uint32_t namespace_count = 2;
  std::uint64_t key_stride = 1;
  bool identity_hash = false;  // IdentityHash instead of the default mixing hash
  MapOptions map_options{};
  std::uint32_t live_snapshots_max = 4;
  std::uint32_t state_length_max = 6;    // vector states: at most this many elements
  std::uint32_t visit_entries_max = 12;  // entry budget of one incremental-visitor call
  std::uint32_t double_release_percent = 20;
  bool inline_lane = true;  // also run int64 (inline) states, besides vector (boxed) ones
  OpWeights weights{};
  // Cadences in steps; 0 means automatic: every step when key_count <= 64, else every
  // max(64, key_count * namespace_count / 16) steps, so that on average a step spends about
  // as much on full comparisons as it would on a 16-key map, however large the key space.
  std::uint32_t full_compare_every_ops = 0;
  std::uint32_t deep_check_every_ops = 0;

  std::uint32_t full_compare_cadence() const noexcept {
    return full_compare_every_ops != 0 ? full_compare_every_ops : automatic_cadence();
  }
  std::uint32_t deep_check_cadence() const noexcept {
    return deep_check_every_ops != 0 ? deep_check_every_ops : automatic_cadence();
  }
  std::uint32_t automatic_cadence() const noexcept {
    if (key_count <= 64) return 1;
    const std::uint64_t slots = std::uint64_t{key_count} * namespace_count;
    return static_cast<std::uint32_t>(std::clamp<std::uint64_t>(slots / 16, 64, 1u << 20));
  }
};

inline std::string describe(const IsolationOptions& o) {
  const auto n = [](std::uint64_t v) { return std::to_string(v); };
  const OpWeights& w = o.weights;
  return "seed " + n(o.seed) + ", keys " + n(o.key_count) + " (stride " + n(o.key_stride) +
         "), namespaces " + n(o.namespace_count) + ", hash " +
         (o.identity_hash ? "identity" : "default") + ", capacity initial/min/max " +
         n(o.map_options.initial_capacity) + "/" + n(o.map_options.min_capacity) + "/" +
         n(o.map_options.max_capacity) + ", live snapshots max " + n(o.live_snapshots_max) +
         ", lanes " + (o.inline_lane ? "boxed+inline" : "boxed") + ", weights put " + n(w.put) +
         " put_and_get_old " + n(w.put_and_get_old) + " remove " + n(w.remove) +
         " remove_and_get_old " + n(w.remove_and_get_old) + " get " + n(w.get) + " contains " +
         n(w.contains) + " get_mutable " + n(w.get_mutable) + " transform " + n(w.transform) +
         " snapshot_start " + n(w.snapshot_start) + " snapshot_release " + n(w.snapshot_release) +
         " visit " + n(w.visit) + ", full compare every " + n(o.full_compare_cadence()) +
         ", deep check every " + n(o.deep_check_cadence());
}

// One drawn operation. Which fields matter depends on the kind:
//   put, put_and_get_old   key, ns; the state is made from value and length
//   get_mutable            key, ns; mutation `choice % 3` with value (see StateTraits)
//   transform              key, ns; value is the transform's argument
//   snapshot_release       the live snapshot at `choice % live`; length bit 0: release it
//                          twice; bit 1: first release an already released handle again
//   visit                  `length` is the entry budget; value salts the decisions
struct Op {
  OpKind kind = OpKind::get;
  std::uint64_t key = 0;
  std::int32_t ns = 0;
  std::int64_t value = 0;
  std::uint32_t length = 0;
  std::uint32_t choice = 0;
};

inline std::string to_text(const Op& op) {
  std::string out = to_text(op.kind);
  switch (op.kind) {
    case OpKind::snapshot_start:
      return out;
    case OpKind::snapshot_release:
      return out + " choice=" + std::to_string(op.choice) +
             " twice=" + std::to_string(op.length & 1u) +
             " again=" + std::to_string((op.length >> 1) & 1u);
    case OpKind::visit:
      return out + " budget=" + std::to_string(op.length) + " salt=" + std::to_string(op.value);
    default:
      break;
  }
  out += " key=" + std::to_string(op.key) + " ns=" + std::to_string(op.ns);
  if (op.kind == OpKind::put || op.kind == OpKind::put_and_get_old) {
    out += " value=" + std::to_string(op.value) + " length=" + std::to_string(op.length);
  } else if (op.kind == OpKind::get_mutable) {
    out += " mutation=" + std::to_string(op.choice % 3) + " value=" + std::to_string(op.value);
  } else if (op.kind == OpKind::transform) {
    out += " value=" + std::to_string(op.value);
  }
  return out;
}

// One operation drawn from `rng` by the weights and bounds of `options`, the one way every
// driver of the map draws (the isolation run and the real-thread stress test): a snapshot
// start with `live_snapshots` at the live limit becomes a release, a release with nothing
// live becomes a start. REQUIRES: total_weight(options.weights) > 0.
inline Op draw_op(Prng& rng, const IsolationOptions& options, std::size_t live_snapshots) {
  Op op;
  op.kind = kind_at(options.weights, rng.below(total_weight(options.weights)));
  op.key = rng.below(options.key_count) * options.key_stride;
  op.ns = static_cast<std::int32_t>(rng.below(options.namespace_count));
  op.value = static_cast<std::int64_t>(rng.below(1000));
  op.length = 1 + static_cast<std::uint32_t>(rng.below(options.state_length_max));
  op.choice = static_cast<std::uint32_t>(rng.below(1u << 16));
  if (op.kind == OpKind::snapshot_start && live_snapshots >= options.live_snapshots_max) {
    op.kind = OpKind::snapshot_release;
  } else if (op.kind == OpKind::snapshot_release && live_snapshots == 0) {
    op.kind = OpKind::snapshot_start;
  }
  if (op.kind == OpKind::snapshot_release) {
    op.length = (rng.chance(options.double_release_percent, 100) ? 1u : 0u) |
                (rng.chance(options.double_release_percent, 100) ? 2u : 0u);
  }
  if (op.kind == OpKind::visit) {
    op.length = 1 + static_cast<std::uint32_t>(rng.below(options.visit_entries_max));
  }
  return op;
}

// ---------------------------------------------------------------------------------------
// Hash switch, state kinds, failures

// One map type for both hashes, chosen per run: the default mixing hash, or IdentityHash
// (key + namespace) so chains and collisions can be forced.
struct SwitchHash {
  bool identity = false;
  std::uint32_t operator()(const std::uint64_t& key, const std::int32_t& ns) const noexcept {
    if (identity) return IdentityHash<std::uint64_t, std::int32_t>{}(key, ns);
    return DefaultHash<std::uint64_t, std::int32_t>{}(key, ns);
  }
};

namespace detail {
inline std::int64_t wrap_add(std::int64_t a, std::int64_t b) noexcept {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b));
}
inline std::int64_t wrap_mul(std::int64_t a, std::int64_t b) noexcept {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) * static_cast<std::uint64_t>(b));
}
inline std::uint64_t mix(std::uint64_t a, std::uint64_t b) noexcept {
  return cowstate::detail::mix64(a * 0x9e3779b97f4a7c15ULL + b);
}
}  // namespace detail

// How a lane makes, mutates and transforms states of type S. Pure functions of their
// arguments, so the map and the model receive equal values.
template <class S>
struct StateTraits;

template <>
struct StateTraits<std::vector<std::int64_t>> {
  using State = std::vector<std::int64_t>;
  using Serializer = VectorInt64Serializer;  // for drivers that serialize snapshots
  static constexpr const char* kName = "boxed vector<int64> states";
  // [value, value + 1, ...], `length` elements (at least 1).
  static State make(std::int64_t value, std::uint32_t length) {
    State s;
    for (std::uint32_t i = 0; i < std::max(length, 1u); ++i) s.push_back(value + i);
    return s;
  }
  // 0: append (or overwrite when full), 1: overwrite one element, 2: drop the last one.
  static void mutate(State& s, std::uint32_t choice, std::int64_t value, std::uint32_t length_max) {
    const std::uint32_t kind = choice % 3;
    if (kind == 0 && s.size() < length_max) {
      s.push_back(value);
    } else if ((kind == 1 || kind == 0) && !s.empty()) {
      s[(choice / 3) % s.size()] = value;
    } else if (s.size() > 1) {
      s.pop_back();
    } else {
      s.push_back(value);
    }
  }
  // The old state's last length_max - 1 elements followed by value.
  static State transform(const State* old, std::int64_t value, std::uint32_t length_max) {
    State s;
    if (old != nullptr) {
      const std::size_t keep = std::min<std::size_t>(old->size(), length_max - 1);
      s.assign(old->end() - static_cast<std::ptrdiff_t>(keep), old->end());
    }
    s.push_back(value);
    return s;
  }
  static State replacement(const State& old, std::int64_t salt) {
    return State{static_cast<std::int64_t>(old.size()), salt};
  }
};

template <>
struct StateTraits<std::int64_t> {
  using State = std::int64_t;
  using Serializer = Int64Serializer;
  static constexpr const char* kName = "inline int64 states";
  static State make(std::int64_t value, std::uint32_t length) {
    return detail::wrap_add(value, std::int64_t{length} << 20);
  }
  static void mutate(State& s, std::uint32_t choice, std::int64_t value, std::uint32_t) {
    switch (choice % 3) {
      case 0:
        s = detail::wrap_add(s, value);
        break;
      case 1:
        s = value;
        break;
      default:
        s ^= value;
        break;
    }
  }
  static State transform(const State* old, std::int64_t value, std::uint32_t) {
    return detail::wrap_add(detail::wrap_mul(old != nullptr ? *old : 0, 31), value);
  }
  static State replacement(const State& old, std::int64_t salt) {
    return detail::wrap_add(old, salt);
  }
};

struct IsolationFailure {
  std::uint64_t seed = 0;
  std::uint64_t step = 0;  // 1-based number of the failing step (the last one for finish())
  std::string lane;        // which lane (state kind) saw it
  std::string op;          // to_text(Op) of the failing step
  std::string what;        // what differed; image differences in model::diff's format
  std::string options;     // describe(IsolationOptions)

  std::string message() const {
    return "isolation failure: seed " + std::to_string(seed) + ", step " + std::to_string(step) +
           ", lane " + lane + "\n  op: " + op + "\n  " + what + "\n  options: " + options;
  }
};

// A COWSTATE_ASSERT that fired inside the map while ScopedThrowingAssertHandler was active.
class AssertionFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Turns COWSTATE_ASSERT failures into AssertionFailure exceptions for its lifetime, so a
// broken invariant inside the map becomes an IsolationFailure naming the invariant (and the
// seed and step) instead of an abort. Process-wide: create it before starting threads.
class ScopedThrowingAssertHandler {
 public:
  ScopedThrowingAssertHandler() noexcept : previous_(set_assert_handler(&handler)) {}
  ~ScopedThrowingAssertHandler() { set_assert_handler(previous_); }
  ScopedThrowingAssertHandler(const ScopedThrowingAssertHandler&) = delete;
  ScopedThrowingAssertHandler& operator=(const ScopedThrowingAssertHandler&) = delete;

 private:
  [[noreturn]] static void handler(const char* expr, const char* invariant, const char* message,
                                   const char* file, int line) {
    throw AssertionFailure(std::string("cowstate invariant ") + invariant + " violated: " +
                           message + " (" + expr + ") at " + file + ":" + std::to_string(line));
  }
  AssertHandler previous_;
};

// Counters of what a run checked; everything but `ops` and `ops_mid_rehash` is summed over
// the lanes (a step with both lanes deep-checks twice).
struct IsolationCounters {
  std::uint64_t ops = 0;  // steps applied
  std::uint64_t snapshots_started = 0;
  std::uint64_t snapshots_released = 0;  // first releases only
  std::uint64_t entries_compared = 0;    // live-map and snapshot entries compared to the model
  std::uint64_t full_compares = 0;       // whole live map against the model
  std::uint64_t snapshot_compares = 0;   // whole snapshot against the image of its version
  std::uint64_t deep_checks = 0;         // map.check_invariants() + model.check_invariants()
  std::uint64_t ops_mid_rehash = 0;      // steps after which the boxed map was mid-rehash

  IsolationCounters& operator+=(const IsolationCounters& o) noexcept {
    ops += o.ops;
    snapshots_started += o.snapshots_started;
    snapshots_released += o.snapshots_released;
    entries_compared += o.entries_compared;
    full_compares += o.full_compares;
    snapshot_compares += o.snapshot_compares;
    deep_checks += o.deep_checks;
    ops_mid_rehash += o.ops_mid_rehash;
    return *this;
  }
};

// ---------------------------------------------------------------------------------------
// Snapshot reading, usable on any thread

template <class S>
using IsolationMap = CowStateMap<std::uint64_t, std::int32_t, S, SwitchHash>;
template <class S>
using IsolationModel = model::VersionedMap<std::uint64_t, std::int32_t, S>;
template <class S>
using IsolationImage = model::ImageOf<std::uint64_t, std::int32_t, S>;

template <class S>
struct SnapshotReading {
  IsolationImage<S> image;
  std::size_t visited = 0;     // entries for_each called back with
  std::size_t duplicates = 0;  // (key, ns) seen more than once
};

// Iterates a snapshot with for_each. Any thread. REQUIRES: the snapshot is valid().
template <class S>
SnapshotReading<S> read_snapshot(const typename IsolationMap<S>::Snapshot& snapshot) {
  SnapshotReading<S> r;
  snapshot.for_each([&r](const std::uint64_t& key, const std::int32_t& ns, const S& state) {
    ++r.visited;
    if (!r.image.emplace(std::make_pair(key, ns), state).second) ++r.duplicates;
  });
  return r;
}

// nullopt when the snapshot shows exactly `expected`: every entry once, size() agreeing.
// Any thread. REQUIRES: the snapshot is valid().
template <class S>
std::optional<std::string> check_snapshot(const typename IsolationMap<S>::Snapshot& snapshot,
                                          const IsolationImage<S>& expected) {
  const SnapshotReading<S> r = read_snapshot<S>(snapshot);
  const std::string name = "snapshot v" + std::to_string(snapshot.version());
  if (r.duplicates != 0) {
    return name + " visits " + std::to_string(r.duplicates) + " entries more than once";
  }
  if (auto d = model::diff(expected, r.image)) {
    return name + " differs from the model image of its version: " + *d;
  }
  if (snapshot.size() != expected.size()) {
    return name + " reports size " + std::to_string(snapshot.size()) + " but the model image has " +
           std::to_string(expected.size()) + " entries";
  }
  return std::nullopt;
}

// A live snapshot handed out of a lane for another thread to check and release.
template <class S>
struct DetachedSnapshot {
  typename IsolationMap<S>::Snapshot handle;  // release() on any thread; also on destruction
  std::uint32_t version = 0;
  IsolationImage<S> expected;  // the model image of `version`, captured on the writer thread
};

// ---------------------------------------------------------------------------------------
// One lane: a map, its model and their snapshots, for one state type.

template <class S>
class IsolationLane {
 public:
  using Map = IsolationMap<S>;
  using Model = IsolationModel<S>;
  using Image = IsolationImage<S>;
  using Traits = StateTraits<S>;

  explicit IsolationLane(const IsolationOptions& options)
      : options_(options),
        slots_(std::size_t{options.key_count} * options.namespace_count),
        map_(options.map_options, SwitchHash{options.identity_hash}),
        seen_(slots_, 0) {}
  IsolationLane(const IsolationLane&) = delete;
  IsolationLane& operator=(const IsolationLane&) = delete;

  static constexpr const char* name() noexcept { return Traits::kName; }

  // Applies `op` to the map and the model and checks the outcome. `check_images` asks for
  // the full comparison of the live map and every live snapshot, `deep_check` for
  // check_invariants(). Returns what differed, or nullopt.
  std::optional<std::string> apply(const Op& op, bool check_images, bool deep_check,
                                   IsolationCounters& counters) {
    if (auto bad = apply_op(op, counters)) return bad;
    return check_after(op, check_images, deep_check, counters);
  }

  // Releases every live snapshot (map and model), then checks everything once more and
  // that nothing stays retired. REQUIRES: every detached snapshot was released.
  std::optional<std::string> release_all(IsolationCounters& counters) {
    while (!live_.empty()) {
      if (auto bad = release_at(live_.size() - 1, false, counters)) return bad;
    }
    detached_ = 0;
    if (map_.highest_required_version() != 0) {
      return "highest required version " + std::to_string(map_.highest_required_version()) +
             " with every snapshot released (I2)";
    }
    return check_after(Op{OpKind::snapshot_release}, true, true, counters);
  }

  // Moves the newest live snapshot out of the lane, with the model image of its version,
  // and releases that version in the model (its image is captured). The caller releases
  // the handle, possibly on another thread. nullopt when no snapshot is live.
  std::optional<DetachedSnapshot<S>> detach_snapshot() {
    if (live_.empty()) return std::nullopt;
    LiveSnapshot s = std::move(*live_.back());
    live_.pop_back();
    DetachedSnapshot<S> d{std::move(s.handle), s.version, model_.image(s.version)};
    model_.release_snapshot(s.version);
    ++detached_;
    return d;
  }

  // A live snapshot and the model image of its version, captured at its start.
  struct LiveSnapshot {
    typename Map::Snapshot handle;
    std::uint32_t version = 0;
    Image expected;
  };

  // The live snapshot of `version`, for a caller that reads it itself (a cursor held
  // across steps, a serializer); nullptr when that version is not live in this lane. It
  // stays at this address, and a cursor of its handle stays valid, until it is released.
  const LiveSnapshot* live_snapshot(std::uint32_t version) const noexcept {
    for (const auto& s : live_) {
      if (s->version == version) return s.get();
    }
    return nullptr;
  }
  std::size_t live_snapshots() const noexcept { return live_.size(); }
  Map& map() noexcept { return map_; }
  const Model& model() const noexcept { return model_; }

 private:
  static constexpr std::size_t kReleasedKept = 2;

  // The keyed kinds through the shared step functions (map_steps.h), counting what they
  // add to or take from the model; snapshots and the visitor here.
  std::optional<std::string> apply_op(const Op& op, IsolationCounters& counters) {
    if (!names_key(op.kind)) return snapshot_step(op, counters);
    const bool existed = model_.contains(op.key, op.ns);
    std::optional<std::string> bad = keyed_step(op);
    const bool exists = model_.contains(op.key, op.ns);
    if (exists != existed) size_ = exists ? size_ + 1 : size_ - 1;
    return bad;
  }

  std::optional<std::string> keyed_step(const Op& op) {
    MapSteps<Map, Model> steps(map_, model_);
    const std::uint64_t k = op.key;
    const std::int32_t ns = op.ns;
    const std::uint32_t length_max = options_.state_length_max;
    switch (op.kind) {
      case OpKind::put:
        return steps.put(k, ns, Traits::make(op.value, op.length));
      case OpKind::put_and_get_old:
        return steps.put_and_get_old(k, ns, Traits::make(op.value, op.length));
      case OpKind::remove:
        return steps.remove(k, ns);
      case OpKind::remove_and_get_old:
        return steps.remove_and_get_old(k, ns);
      case OpKind::get:
        return steps.get(k, ns);
      case OpKind::contains:
        return steps.contains(k, ns);
      case OpKind::get_mutable:
        return steps.get_mutable(
            k, ns, [&op, length_max](S& s) { Traits::mutate(s, op.choice, op.value, length_max); });
      case OpKind::transform: {
        auto fn = [length_max](const S* old, const std::int64_t& v) {
          return Traits::transform(old, v, length_max);
        };
        return steps.transform(k, ns, op.value, fn, fn);
      }
      case OpKind::snapshot_start:
      case OpKind::snapshot_release:
      case OpKind::visit:
        break;
    }
    return std::nullopt;
  }

  // The kinds that name no key: a snapshot start or release, or one visitor call.
  std::optional<std::string> snapshot_step(const Op& op, IsolationCounters& counters) {
    switch (op.kind) {
      case OpKind::snapshot_start:
        return start_snapshot(counters);
      case OpKind::snapshot_release:
        if (live_.empty()) return std::nullopt;
        if ((op.length & 2u) != 0 && !released_.empty()) {
          // Releasing an already released handle again changes nothing.
          released_[op.choice % released_.size()].release();
        }
        return release_at(op.choice % live_.size(), (op.length & 1u) != 0, counters);
      case OpKind::visit:
        return visit(op);
      default:
        return std::nullopt;
    }
  }

  std::optional<std::string> start_snapshot(IsolationCounters& counters) {
    typename Map::Snapshot handle = map_.snapshot();
    const std::uint32_t version = model_.start_snapshot();
    ++counters.snapshots_started;
    if (handle.version() != version) {
      return "snapshot started at map version " + std::to_string(handle.version()) +
             ", the model's is " + std::to_string(version);
    }
    live_.push_back(std::make_unique<LiveSnapshot>(
        LiveSnapshot{std::move(handle), version, model_.image(version)}));
    return check_one_snapshot(*live_.back(), counters);
  }

  // Checks the snapshot at live_[i] in full, and that the model's image of its version did
  // not change since its start; releases it (twice if asked) in the map and the model, and
  // keeps the released handle to release again later.
  std::optional<std::string> release_at(std::size_t i, bool twice, IsolationCounters& counters) {
    if (auto bad = check_one_snapshot(*live_[i], counters)) return bad;
    if (auto d = model::diff(live_[i]->expected, model_.image(live_[i]->version))) {
      return "the model's image of v" + std::to_string(live_[i]->version) +
             " changed while it was live: " + *d;
    }
    LiveSnapshot s = std::move(*live_[i]);
    live_.erase(live_.begin() + static_cast<std::ptrdiff_t>(i));
    s.handle.release();
    if (twice) s.handle.release();
    model_.release_snapshot(s.version);
    if (twice) model_.release_snapshot(s.version);
    ++counters.snapshots_released;
    if (!s.handle.released()) return std::string("a released snapshot handle is not released()");
    if (released_.size() == kReleasedKept) released_.erase(released_.begin());
    released_.push_back(std::move(s.handle));
    return std::nullopt;
  }

  // One incremental-visitor call. Decisions are a pure function of (key, ns, salt); each is
  // mirrored on the model when the callback makes it, after checking the visited state.
  // The map applies a chain's decisions after the chain, but keys within a chain are
  // distinct, so the model is in step whenever the map calls back.
  std::optional<std::string> visit(const Op& op) {
    std::optional<std::string> bad;
    const std::int64_t salt = op.value;
    auto fn = [&](const std::uint64_t& key, const std::int32_t& ns, const S& state) {
      if (!bad) {
        bad = compare("visited state of " + key_text(key, ns), std::optional<S>(state),
                      optional_of(model_.get(key, ns)));
      }
      const std::uint64_t h =
          detail::mix(key, static_cast<std::uint64_t>(salt) ^ static_cast<std::uint32_t>(ns)) % 8;
      if (h < 2) {
        if (model_.remove(key, ns)) --size_;
        return VisitResult<S>::remove();
      }
      if (h == 2) {
        S fresh = Traits::replacement(state, salt);
        model_.put(key, ns, fresh);
        return VisitResult<S>::replace(std::move(fresh));
      }
      return VisitResult<S>::keep();
    };
    map_.visit_incremental(cursor_, op.length, fn);
    return bad;
  }

  std::optional<std::string> check_after(const Op& op, bool check_images, bool deep_check,
                                         IsolationCounters& counters) {
    if (names_key(op.kind)) {
      // The touched key, read without an operation (no rehash step, no reclaim).
      const CowStateMapAccess::EntryInfo e = CowStateMapAccess::find(map_, op.key, op.ns);
      const S* got = e.index == 0 ? nullptr : static_cast<const S*>(e.state);
      if (auto bad = compare("after the op, the state of " + key_text(op.key, op.ns) + " is",
                             optional_of(got), optional_of(model_.get(op.key, op.ns)))) {
        return bad;
      }
      ++counters.entries_compared;
    }
    if (map_.size() != size_) {
      return "map size " + std::to_string(map_.size()) + ", model size " + std::to_string(size_);
    }
    if (map_.map_version() != model_.map_version()) {
      return "map version " + std::to_string(map_.map_version()) + ", model's " +
             std::to_string(model_.map_version());
    }
    const std::uint32_t h = map_.highest_required_version();
    // A detached snapshot may still be live in the map after its model version went.
    if (detached_ == 0 ? h != model_.highest_required_version()
                       : h < model_.highest_required_version()) {
      return "highest required version " + std::to_string(h) + ", the model's is " +
             std::to_string(model_.highest_required_version()) + " (I2)";
    }
    if (check_images) {
      if (auto bad = check_live(counters)) return bad;
      for (const auto& s : live_) {
        if (auto bad = check_one_snapshot(*s, counters)) return bad;
      }
    }
    if (deep_check) {
      ++counters.deep_checks;
      if (auto bad = deep_check_map()) return bad;
      if (!model_.check_invariants()) {
        return std::string("model.check_invariants() failed (stderr)");
      }
      if (model_.size() != size_) {
        return "model size " + std::to_string(model_.size()) + " but tracked " +
               std::to_string(size_);
      }
    }
    if (live_.empty() && detached_ == 0 && op.kind == OpKind::snapshot_release) {
      const std::size_t retired = map_.retired_count();
      if (retired != 0) {
        return std::to_string(retired) + " entries/states stay retired with no live snapshot (I10)";
      }
    }
    return std::nullopt;
  }

  // The live map against the model: every entry for_each visits is a distinct key of the
  // key space whose state equals the model's, and there are as many as the model holds.
  // On a mismatch, builds both images for model::diff.
  std::optional<std::string> check_live(IsolationCounters& counters) {
    ++counters.full_compares;
    ++stamp_;
    std::size_t visited = 0;
    bool same = true;
    map_.for_each([&](const std::uint64_t& key, const std::int32_t& ns, const S& state) {
      ++visited;
      if (!same) return;
      const S* want = model_.get(key, ns);
      same = first_visit(key, ns) && want != nullptr && *want == state;
    });
    counters.entries_compared += visited;
    if (same && visited == size_) return std::nullopt;
    Image got;
    std::size_t duplicates = 0;
    map_.for_each([&](const std::uint64_t& key, const std::int32_t& ns, const S& state) {
      if (!got.emplace(std::make_pair(key, ns), state).second) ++duplicates;
    });
    if (duplicates != 0) {
      return "the live map holds " + std::to_string(duplicates) + " keys more than once (I7)";
    }
    if (auto d = model::diff(model_.live(), got))
      return "the live map differs from the model: " + *d;
    return "the live map visits " + std::to_string(visited) + " entries, the model holds " +
           std::to_string(size_);
  }

  // A live snapshot against the image captured at its start, the same way (no allocation).
  std::optional<std::string> check_one_snapshot(const LiveSnapshot& s,
                                                IsolationCounters& counters) {
    if (!s.handle.valid()) return "snapshot v" + std::to_string(s.version) + " is not valid()";
    ++counters.snapshot_compares;
    ++stamp_;
    std::size_t visited = 0;
    bool same = true;
    s.handle.for_each([&](const std::uint64_t& key, const std::int32_t& ns, const S& state) {
      ++visited;
      if (!same) return;
      const auto want = s.expected.find(std::make_pair(key, ns));
      same = first_visit(key, ns) && want != s.expected.end() && want->second == state;
    });
    counters.entries_compared += visited;
    if (same && visited == s.expected.size() && s.handle.size() == s.expected.size()) {
      return std::nullopt;
    }
    if (auto bad = check_snapshot<S>(s.handle, s.expected)) return bad;
    return "snapshot v" + std::to_string(s.version) + " visits " + std::to_string(visited) +
           " entries, its image has " + std::to_string(s.expected.size());
  }

  // map.check_invariants(), with its reason when the map can say it.
  std::optional<std::string> deep_check_map() const {
    std::string why;
    if constexpr (requires(const Map& m) { m.check_invariants(&why); }) {
      if (!map_.check_invariants(&why)) return "map.check_invariants() failed: invariant " + why;
    } else {
      if (!map_.check_invariants()) return std::string("map.check_invariants() failed (stderr)");
    }
    return std::nullopt;
  }

  // Index of (key, ns) in [0, slots_), or kNoSlot for a pair outside the key space.
  std::size_t slot_of(std::uint64_t key, std::int32_t ns) const noexcept {
    if (key % options_.key_stride != 0 || ns < 0) return kNoSlot;
    const std::uint64_t index = key / options_.key_stride;
    const auto n = static_cast<std::uint32_t>(ns);
    if (index >= options_.key_count || n >= options_.namespace_count) return kNoSlot;
    return static_cast<std::size_t>(index) * options_.namespace_count + n;
  }

  // False when (key, ns) is outside the key space or was visited before in this pass.
  bool first_visit(std::uint64_t key, std::int32_t ns) noexcept {
    const std::size_t slot = slot_of(key, ns);
    if (slot == kNoSlot || seen_[slot] == stamp_) return false;
    seen_[slot] = stamp_;
    return true;
  }

  static std::string key_text(std::uint64_t key, std::int32_t ns) {
    return model::to_text(std::make_pair(key, ns));
  }
  template <class T>
  static std::optional<std::string> compare(const std::string& what, const T& got, const T& want) {
    if (got == want) return std::nullopt;
    return what + " " + model::to_text(got) + ", the model " + model::to_text(want);
  }

  static constexpr std::size_t kNoSlot = ~std::size_t{0};

  // Set at construction.
  const IsolationOptions& options_;
  const std::size_t slots_;  // key_count * namespace_count

  // Declared before the snapshots so every handle is released before the map goes.
  Map map_;
  Model model_;
  std::size_t size_ = 0;  // the model's size, tracked from the model's own answers
  VisitCursor cursor_;
  std::vector<std::unique_ptr<LiveSnapshot>> live_;  // each stays at one address while live
  std::vector<typename Map::Snapshot> released_;     // a few released handles, to release again
  std::size_t detached_ = 0;                         // handed out by detach_snapshot()
  std::vector<std::uint64_t> seen_;  // per slot: the pass (stamp_) that last visited it
  std::uint64_t stamp_ = 0;
};

// ---------------------------------------------------------------------------------------
// A run: the PRNG, the lanes, the cadences and the first failure.

class IsolationRun {
 public:
  using BoxedState = std::vector<std::int64_t>;
  using InlineState = std::int64_t;

  explicit IsolationRun(IsolationOptions options)
      : options_(normalized(std::move(options))), rng_(options_.seed), boxed_(options_) {
    COWSTATE_ASSERT(total_weight(options_.weights) > 0, "sim", "every operation weight is 0");
    if (options_.inline_lane) inline_.emplace(options_);
  }
  IsolationRun(const IsolationRun&) = delete;
  IsolationRun& operator=(const IsolationRun&) = delete;

  // The next operation, drawn from the run's PRNG (draw_op).
  Op draw() { return draw_op(rng_, options_, boxed_.live_snapshots()); }

  // Applies `op` to every lane and runs the checks due at this step. False on a failure
  // (then failure() says what); a failed run applies nothing more.
  bool apply(const Op& op) {
    if (failure_) return false;
    ++step_;
    ++counters_.ops;
    const bool images = step_ % options_.full_compare_cadence() == 0;
    const bool deep = step_ % options_.deep_check_cadence() == 0;
    if (!apply_to(boxed_, op, images, deep)) return false;
    if (inline_ && !apply_to(*inline_, op, images, deep)) return false;
    if (boxed_.map().rehashing()) ++counters_.ops_mid_rehash;
    return true;
  }

  bool step() { return apply(draw()); }

  // Up to `ops` steps; stops at the first failure.
  bool run(std::uint64_t ops) {
    for (std::uint64_t i = 0; i < ops; ++i) {
      if (!step()) return false;
    }
    return true;
  }

  // Steps until `deadline` (checked every 256 steps) or `ops_max` steps.
  bool run_until(std::chrono::steady_clock::time_point deadline, std::uint64_t ops_max) {
    for (std::uint64_t i = 0; i < ops_max; ++i) {
      if (i % 256 == 0 && std::chrono::steady_clock::now() >= deadline) return true;
      if (!step()) return false;
    }
    return true;
  }

  // Releases every live snapshot, then checks the live map, the invariants and that
  // nothing stays retired. REQUIRES: every detached snapshot was released (threads joined).
  bool finish() {
    if (failure_) return false;
    if (!finish_lane(boxed_)) return false;
    if (inline_ && !finish_lane(*inline_)) return false;
    return true;
  }

  // Detaches the newest live snapshot of every lane (see IsolationLane::detach_snapshot).
  struct Detached {
    std::optional<DetachedSnapshot<BoxedState>> boxed;
    std::optional<DetachedSnapshot<InlineState>> inlined;
  };
  Detached detach_snapshot() {
    Detached d;
    d.boxed = boxed_.detach_snapshot();
    if (inline_) d.inlined = inline_->detach_snapshot();
    return d;
  }

  const std::optional<IsolationFailure>& failure() const noexcept { return failure_; }
  const IsolationCounters& counters() const noexcept { return counters_; }
  const IsolationOptions& options() const noexcept { return options_; }
  std::uint64_t steps() const noexcept { return step_; }
  IsolationLane<BoxedState>& boxed_lane() noexcept { return boxed_; }
  IsolationLane<InlineState>* inline_lane() noexcept { return inline_ ? &*inline_ : nullptr; }

 private:
  template <class S>
  using Lane = IsolationLane<S>;

  static IsolationOptions normalized(IsolationOptions o) {
    o.key_count = std::max(o.key_count, 1u);
    o.namespace_count = std::max(o.namespace_count, 1u);
    o.key_stride = std::max<std::uint64_t>(o.key_stride, 1);
    o.state_length_max = std::max(o.state_length_max, 1u);
    o.visit_entries_max = std::max(o.visit_entries_max, 1u);
    return o;
  }

  template <class S>
  bool apply_to(Lane<S>& lane, const Op& op, bool images, bool deep) {
    std::optional<std::string> bad;
    try {
      bad = lane.apply(op, images, deep, counters_);
    } catch (const std::exception& e) {
      bad = std::string("exception: ") + e.what();
    }
    if (!bad) return true;
    fail(Lane<S>::name(), to_text(op), std::move(*bad));
    return false;
  }

  template <class S>
  bool finish_lane(Lane<S>& lane) {
    std::optional<std::string> bad;
    try {
      bad = lane.release_all(counters_);
    } catch (const std::exception& e) {
      bad = std::string("exception: ") + e.what();
    }
    if (!bad) return true;
    fail(Lane<S>::name(), "finish (release every snapshot)", std::move(*bad));
    return false;
  }

  void fail(const char* lane, std::string op, std::string what) {
    failure_ = IsolationFailure{options_.seed, step_,           lane,
                                std::move(op), std::move(what), describe(options_)};
  }

  // Set at construction; lanes keep a reference to options_.
  const IsolationOptions options_;

  // Writer thread only.
  Prng rng_;
  Lane<BoxedState> boxed_;
  std::optional<Lane<InlineState>> inline_;
  std::uint64_t step_ = 0;
  IsolationCounters counters_;
  std::optional<IsolationFailure> failure_;
};

// ---------------------------------------------------------------------------------------
// The option mixes the default test suite and the demo cycle through (swarm testing: each
// stresses one corner; some switch operations off entirely).

struct IsolationMix {
  const char* name;
  IsolationOptions options;   // seed left at 1; callers set it
  std::uint64_t default_ops;  // operations per seed in the default test suite
};

// Long because it is a table: one entry per mix, each a handful of option assignments.
inline std::vector<IsolationMix> isolation_mixes() {
  std::vector<IsolationMix> out;
  {
    IsolationOptions o;  // 64 keys x 2 namespaces, default capacities
    out.push_back({"default map, 64 keys", o, 1200});
  }
  {
    IsolationOptions o;
    o.map_options = MapOptions{.initial_capacity = 1, .min_capacity = 1, .max_capacity = 1u << 30};
    out.push_back({"tiny capacity, 64 keys", o, 1000});
  }
  {
    IsolationOptions o;
    o.key_count = 48;
    o.identity_hash = true;
    o.map_options = MapOptions{.initial_capacity = 4, .min_capacity = 4, .max_capacity = 4};
    out.push_back({"identity hash, maximum capacity 4: long chains", o, 1200});
  }
  {
    IsolationOptions o;
    o.key_count = 24;
    o.key_stride = 1u << 12;  // with the identity hash every key of a namespace collides
    o.identity_hash = true;
    o.map_options = MapOptions{.initial_capacity = 2, .min_capacity = 2, .max_capacity = 1u << 30};
    out.push_back({"colliding keys through rehashes", o, 1200});
  }
  {
    IsolationOptions o;
    o.key_count = 2048;
    o.namespace_count = 3;
    o.map_options = MapOptions{.initial_capacity = 4, .min_capacity = 4, .max_capacity = 1u << 30};
    // A snapshot costs O(n) to capture and check in full at its start and release: fewer
    // snapshots that live longer (about one start per 90 steps).
    o.weights = OpWeights{.put = 20,
                          .put_and_get_old = 12,
                          .remove = 4,
                          .remove_and_get_old = 2,
                          .get = 12,
                          .contains = 6,
                          .get_mutable = 16,
                          .transform = 12,
                          .snapshot_start = 1,
                          .snapshot_release = 1,
                          .visit = 4};
    out.push_back({"large key space, growing through many rehashes", o, 1500});
  }
  {
    // Insert-heavy growth from capacity 1 over a key space it never fills: the map doubles
    // about a dozen times, and a rehash is in flight after about one step in six (each
    // keyed op moves at least 4 entries, so no workload keeps one in flight much longer).
    // Few snapshots (about one start per 170 steps), for the same reason as above.
    IsolationOptions o;
    o.key_count = 1u << 15;
    o.namespace_count = 1;
    o.map_options = MapOptions{.initial_capacity = 1, .min_capacity = 1, .max_capacity = 1u << 30};
    o.weights = OpWeights{.put = 80,
                          .put_and_get_old = 24,
                          .remove = 4,
                          .remove_and_get_old = 4,
                          .get = 8,
                          .contains = 4,
                          .get_mutable = 16,
                          .transform = 24,
                          .snapshot_start = 1,
                          .snapshot_release = 1,
                          .visit = 4};
    out.push_back({"tiny capacity, insert-heavy growth: rehashes in flight", o, 1500});
  }
  {
    IsolationOptions o;  // swarm: no removals at all, many snapshots, heavy mutation
    o.key_count = 32;
    o.map_options = MapOptions{.initial_capacity = 2, .min_capacity = 2, .max_capacity = 1u << 30};
    o.live_snapshots_max = 8;
    o.weights.remove = 0;
    o.weights.remove_and_get_old = 0;
    o.weights.visit = 0;
    o.weights.get_mutable = 20;
    o.weights.snapshot_start = 6;
    out.push_back({"swarm: no removals, heavy get_mutable, up to 8 snapshots", o, 1000});
  }
  {
    IsolationOptions o;  // swarm: removal and visitor heavy, one snapshot at a time
    o.key_count = 16;
    o.namespace_count = 1;
    o.map_options = MapOptions{.initial_capacity = 1, .min_capacity = 1, .max_capacity = 8};
    o.live_snapshots_max = 1;
    o.weights.get = 0;
    o.weights.contains = 0;
    o.weights.remove = 10;
    o.weights.visit = 8;
    out.push_back({"swarm: removals and visitor, one snapshot at a time", o, 2000});
  }
  return out;
}

}  // namespace cowstate::sim
