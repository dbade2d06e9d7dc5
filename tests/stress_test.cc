// Real-thread stress test of CowStateMap: one writer and two snapshot threads.
//
// The writer (the test's own thread) runs the isolation driver's operations
// (cowstate/sim/isolation.h: draw_op() and an IsolationLane's step functions, the same the
// deterministic isolation run uses, after leveldb's shared WriteStep/ReadStep): put,
// put_and_get_old, remove, remove_and_get_old, get, contains, get_mutable + mutate,
// transform and incremental visits, each compared with the reference model. Now and then
// it starts a snapshot and detaches it from the lane with the model's image of its
// version, and hands (snapshot, expected image) to the snapshot threads through a queue;
// at most kMaxInFlight snapshots are live at once. Each snapshot thread takes one, either
// iterates it in full or serializes it with the snapshot writer in small steps (yielding
// between steps, so the writer runs concurrently) and restores the bytes, compares with
// the expected image, and releases it on its own thread (sometimes twice).
//
// The run is split into epochs. An epoch starts a fresh map at capacity 4 (sometimes with a
// small maximum capacity), so rehashes happen while snapshots are live. At the end of an
// epoch the writer waits until every snapshot was released, then the lane checks that
// nothing stays retired, check_invariants() and the live map against the model.
//
// Bounded by time (COWSTATE_STRESS_SECONDS, default 2 per test case) and by an operation
// count. Seed from COWSTATE_STRESS_SEED (default: time); thread interleaving is not
// reproducible, the seed only fixes the operation mix. Clean under the tsan preset.
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cowstate/cow_state_map.h"
#include "cowstate/model/versioned_map.h"
#include "cowstate/serializers.h"
#include "cowstate/sim/isolation.h"
#include "cowstate/sim/random.h"
#include "cowstate/snapshot_io.h"
#include "stress_env.h"

namespace {

using Key = std::uint64_t;
using Ns = std::int32_t;
using Clock = std::chrono::steady_clock;

// The project's PRNG (xoshiro256** seeded through SplitMix64), one per thread.
using Rng = cowstate::sim::Prng;

// --- configuration ---------------------------------------------------------------------------

constexpr std::uint64_t kKeys = 512;              // keys 0..511
constexpr std::int32_t kNamespaces = 3;           // namespaces 0..2
constexpr std::size_t kMaxInFlight = 4;           // live snapshots at once
constexpr std::uint64_t kOpsMax = 50'000'000;     // bound besides time
constexpr std::uint32_t kMaxElements = 8;         // vector states stay short
constexpr std::uint32_t kFullCheckEvery = 16384;  // ops between full checks of the live map

// --- shared between threads --------------------------------------------------------------------

// Failures seen on any thread; reported by the test's thread after every thread joined
// (Catch2 assertions are not thread-safe).
class Failures {
 public:
  void add(std::string what) {
    std::lock_guard<std::mutex> lock(mu_);
    ++count_;
    if (messages_.size() < 10) messages_.push_back(std::move(what));
  }
  std::size_t count() const {
    std::lock_guard<std::mutex> lock(mu_);
    return count_;
  }
  std::string text() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::string out;
    for (const std::string& m : messages_) out += m + "\n";
    return out;
  }

 private:
  mutable std::mutex mu_;
  std::size_t count_ = 0;
  std::vector<std::string> messages_;
};

template <class S>
using Image = cowstate::sim::IsolationImage<S>;

template <class S>
using Map = cowstate::sim::IsolationMap<S>;

// A snapshot and the model's image of its version, detached from the writer's lane.
template <class S>
struct Handoff {
  typename Map<S>::Snapshot snapshot;
  Image<S> expected;
  cowstate::MapOptions options;  // of the map it came from, for restoring
  bool rehashing = false;        // started while a rehash was in flight
};

// Hands snapshots from the writer to the snapshot threads. `in_flight` counts snapshots
// started and not yet released; the writer starts one only below kMaxInFlight and waits
// for zero at the end of an epoch.
template <class S>
class HandoffQueue {
 public:
  bool can_start() {
    std::lock_guard<std::mutex> lock(mu_);
    return in_flight_ < kMaxInFlight;
  }
  void push(Handoff<S> h) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++in_flight_;
      items_.push_back(std::move(h));
    }
    cv_.notify_all();
  }
  // Blocks until a snapshot is queued or the queue is closed and empty.
  std::optional<Handoff<S>> pop() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return !items_.empty() || closed_; });
    if (items_.empty()) return std::nullopt;
    Handoff<S> h = std::move(items_.front());
    items_.pop_front();
    return h;
  }
  // Called by a snapshot thread after it released (and destroyed) a popped snapshot.
  void done_one() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      --in_flight_;
    }
    cv_.notify_all();
  }
  // Blocks until every started snapshot was released: the map may then be destroyed.
  void wait_all_released() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return in_flight_ == 0; });
  }
  void close() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Handoff<S>> items_;
  std::size_t in_flight_ = 0;
  bool closed_ = false;
};

struct SnapshotStats {
  std::uint64_t iterated = 0;
  std::uint64_t serialized = 0;
  std::uint64_t entries_compared = 0;
  std::uint64_t double_releases = 0;
  std::uint64_t serializer_steps = 0;
  std::uint64_t during_rehash = 0;
};

// --- snapshot threads --------------------------------------------------------------------------

template <class S>
std::string describe_difference(const Image<S>& expected, const Image<S>& actual) {
  auto d = cowstate::model::diff(expected, actual);
  return d.has_value() ? *d : std::string("no difference");
}

// Iterates the snapshot in full, yielding now and then so the writer runs in between, and
// compares with the expected image.
template <class S>
void check_by_iteration(const Handoff<S>& h, Rng& rng, Failures& failures, SnapshotStats& stats) {
  Image<S> seen;
  std::uint64_t until_yield = 1 + rng.below(64);
  for (auto c = h.snapshot.cursor(); !c.done(); c.next()) {
    if (--until_yield == 0) {
      std::this_thread::yield();
      until_yield = 1 + rng.below(64);
    }
    const auto e = c.get();
    if (!seen.emplace(std::make_pair(e.key, e.ns), e.state).second) {
      failures.add("snapshot " + std::to_string(h.snapshot.version()) + " emitted (" +
                   std::to_string(e.key) + "," + std::to_string(e.ns) + ") twice");
    }
  }
  if (h.snapshot.size() != h.expected.size()) {
    failures.add("snapshot " + std::to_string(h.snapshot.version()) + " size " +
                 std::to_string(h.snapshot.size()) + ", writer recorded " +
                 std::to_string(h.expected.size()));
  }
  if (seen != h.expected) {
    failures.add("iterating snapshot " + std::to_string(h.snapshot.version()) + ": " +
                 describe_difference(h.expected, seen));
  }
  ++stats.iterated;
  stats.entries_compared += h.expected.size();
}

// Serializes the snapshot in small steps, yielding between them, restores the bytes into a
// fresh map and compares with the expected image.
template <class S>
void check_by_serialization(const Handoff<S>& h, Rng& rng, Failures& failures,
                            SnapshotStats& stats) {
  using KS = cowstate::UInt64Serializer;
  using NS = cowstate::Int32Serializer;
  using SS = typename cowstate::sim::StateTraits<S>::Serializer;
  const std::string name = "snapshot " + std::to_string(h.snapshot.version());
  std::vector<std::byte> bytes;
  {
    cowstate::MapSnapshotWriter<Map<S>, KS, NS, SS> writer(h.snapshot);
    std::size_t written = 0;
    while (!writer.step(1 + rng.below(64),
                        [&written](const Key&, const Ns&, const S&) { ++written; })) {
      ++stats.serializer_steps;
      if (rng.chance(1, 8)) {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      } else {
        std::this_thread::yield();
      }
    }
    if (written != h.expected.size() || writer.entries_written() != h.expected.size()) {
      failures.add(name + ": wrote " + std::to_string(written) + " entries, expected " +
                   std::to_string(h.expected.size()));
    }
    bytes = writer.take_bytes();
  }
  auto restored = cowstate::read_map_snapshot<Map<S>, KS, NS, SS>(bytes, h.options);
  if (!restored.ok()) {
    failures.add(name + ": reading back failed: " + restored.status().message());
    return;
  }
  Map<S>& fresh = *restored.value();
  Image<S> seen;
  fresh.for_each(
      [&seen](const Key& k, const Ns& n, const S& s) { seen.emplace(std::make_pair(k, n), s); });
  if (seen != h.expected || fresh.size() != h.expected.size()) {
    failures.add(name + " restored: " + describe_difference(h.expected, seen));
  }
  if (std::string why; !fresh.check_invariants(&why)) failures.add(name + " restored: " + why);
  ++stats.serialized;
  stats.entries_compared += h.expected.size();
}

template <class S>
void snapshot_thread(HandoffQueue<S>& queue, std::uint64_t seed, Failures& failures,
                     SnapshotStats& stats) {
  Rng rng(seed);
  while (std::optional<Handoff<S>> h = queue.pop()) {
    if (!h->snapshot.valid()) failures.add("a handed-off snapshot is not valid");
    if (h->rehashing) ++stats.during_rehash;
    if (rng.chance(1, 2)) {
      check_by_iteration(*h, rng, failures, stats);
    } else {
      check_by_serialization(*h, rng, failures, stats);
    }
    h->snapshot.release();
    if (rng.chance(1, 4)) {
      h->snapshot.release();  // idempotent
      ++stats.double_releases;
    }
    if (!h->snapshot.released()) failures.add("a released snapshot is not released");
    h.reset();  // nothing refers to the map any more
    queue.done_one();
  }
}

// --- the writer --------------------------------------------------------------------------------

struct WriterStats {
  std::uint64_t ops = 0;
  std::uint64_t snapshots = 0;
  std::uint64_t epochs = 0;
  std::uint64_t full_checks = 0;
};

template <class S>
void run_stress(const char* label) {
  const double seconds = stress_env::seconds();
  const std::uint64_t seed = stress_env::seed();
  INFO("COWSTATE_STRESS_SEED=" << seed << " COWSTATE_STRESS_SECONDS=" << seconds);

  Failures failures;
  HandoffQueue<S> queue;
  SnapshotStats snap_stats[2];
  std::thread readers[2];
  for (std::size_t i = 0; i < 2; ++i) {
    readers[i] =
        std::thread(snapshot_thread<S>, std::ref(queue), cowstate::sim::derive_seed(seed, 1 + i),
                    std::ref(failures), std::ref(snap_stats[i]));
  }

  Rng rng(seed);
  WriterStats w;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(seconds));
  bool stop = false;
  while (!stop) {
    // One epoch: a fresh map at capacity 4, a third of the time with a small maximum.
    const cowstate::MapOptions options{
        .initial_capacity = 4,
        .min_capacity = 4,
        .max_capacity = rng.chance(1, 3) ? 64u : (1u << 30),
    };
    // The writer's operations are the isolation driver's: drawn by draw_op() and applied
    // with the lane's step functions, which compare every result with the model and, at
    // the full-check cadence, the whole live map and the model's invariants. Snapshots are
    // not drawn: the writer starts them itself and detaches them to the snapshot threads.
    cowstate::sim::IsolationOptions o;
    o.key_count = kKeys;
    o.namespace_count = kNamespaces;
    o.map_options = options;
    o.state_length_max = kMaxElements;
    o.weights.snapshot_start = 0;
    o.weights.snapshot_release = 0;
    o.full_compare_every_ops = kFullCheckEvery;
    cowstate::sim::IsolationLane<S> lane(o);
    cowstate::sim::IsolationCounters counters;
    auto record = [&](const std::string& what, const std::optional<std::string>& bad) {
      if (bad) failures.add("epoch " + std::to_string(w.epochs) + ", " + what + ": " + *bad);
      return !bad;
    };
    const std::uint64_t epoch_ops = 5'000 + rng.below(30'000);
    for (std::uint64_t i = 0; i < epoch_ops && !stop; ++i) {
      const cowstate::sim::Op op = cowstate::sim::draw_op(rng, o, 0);
      const bool full = (i + 1) % o.full_compare_cadence() == 0;
      if (!record(cowstate::sim::to_text(op), lane.apply(op, full, full, counters))) stop = true;
      w.full_checks += full ? 1 : 0;
      ++w.ops;
      // Snapshots are denser while a rehash is in flight (the map grows early in an epoch).
      const bool rehashing = lane.map().rehashing();
      if (!stop && rng.chance(1, rehashing ? 8 : 64) && queue.can_start()) {
        const cowstate::sim::Op start{cowstate::sim::OpKind::snapshot_start};
        if (!record("snapshot start", lane.apply(start, false, false, counters))) stop = true;
        if (auto d = lane.detach_snapshot()) {
          queue.push(Handoff<S>{std::move(d->handle), std::move(d->expected), options, rehashing});
          ++w.snapshots;
        }
      }
      if ((i & 4095) == 4095) {
        if (Clock::now() >= deadline || w.ops >= kOpsMax || failures.count() > 0) stop = true;
      }
    }
    // The writer keeps the map until every snapshot of it was released; then nothing may
    // stay retired and the live map must equal the model.
    queue.wait_all_released();
    record("the end of the epoch", lane.release_all(counters));
    ++w.full_checks;
    ++w.epochs;
  }
  queue.close();
  for (std::thread& t : readers) t.join();

  SnapshotStats total;
  for (const SnapshotStats& s : snap_stats) {
    total.iterated += s.iterated;
    total.serialized += s.serialized;
    total.entries_compared += s.entries_compared;
    total.double_releases += s.double_releases;
    total.serializer_steps += s.serializer_steps;
    total.during_rehash += s.during_rehash;
  }
  std::printf(
      "stress %s: seed %llu, %.1f s: %llu ops in %llu epochs, %llu snapshots (%llu during a "
      "rehash): %llu iterated, %llu serialized in %llu steps; %llu entries compared; %llu double "
      "releases; %llu full checks of the live map\n",
      label, static_cast<unsigned long long>(seed), seconds, static_cast<unsigned long long>(w.ops),
      static_cast<unsigned long long>(w.epochs), static_cast<unsigned long long>(w.snapshots),
      static_cast<unsigned long long>(total.during_rehash),
      static_cast<unsigned long long>(total.iterated),
      static_cast<unsigned long long>(total.serialized),
      static_cast<unsigned long long>(total.serializer_steps),
      static_cast<unsigned long long>(total.entries_compared),
      static_cast<unsigned long long>(total.double_releases),
      static_cast<unsigned long long>(w.full_checks));
  std::fflush(stdout);

  INFO(failures.text());
  CHECK(failures.count() == 0);
  CHECK(w.snapshots == total.iterated + total.serialized);
  CHECK(w.snapshots > 0);
}

}  // namespace

TEST_CASE(
    "snapshots iterated and serialized on two threads while the writer writes boxed vector "
    "states see exactly what the writer recorded at their start",
    "[stress][threads]") {
  run_stress<std::vector<std::int64_t>>("vector<int64> (boxed)");
}

TEST_CASE(
    "snapshots iterated and serialized on two threads while the writer writes inline int64 "
    "states see exactly what the writer recorded at their start",
    "[stress][threads]") {
  run_stress<std::int64_t>("int64 (inline)");
}
