// ttl_bench: what state TTL costs on the backend's hot paths — value get, value put and
// list add at n keys — as a ratio to the same state without TTL, measured in the same run.
//
// A benchmark, never a test: it prints numbers and checks only that each timed loop did
// what its row claims (every get found its value, every list grew to eight elements).
//
// Workload
// --------
// One backend per contender, all in this process and filled alike: n keys (u64, key
// groups of max parallelism 128, VoidNamespace), one value state (int64) and one list
// state (int64 elements). A list-add sample grows every list from one element to eight, one
// timed pass per element: "list add 1->2" is the first pass alone (every add reallocates),
// "list add 1->8" the mean of all seven (reallocation only where std::vector's doubling
// runs out of room). Contenders:
//   plain         the states without TTL
//   ttl           a TTL of one day, no background cleanup: the cost of the timestamp
//                 (clock read, expiry check, bigger entries)
//   ttl+cleanup   the same with Flink's default incremental cleanup: 5 entries visited on
//                 every state access
//   ttl sysclock  "ttl" on SystemTtlClock, the backend's default clock (the vDSO's
//                 clock_gettime(CLOCK_REALTIME) on every access)
//   ttl ticking   "ttl" on TickingTtlClock (a thread stores the system clock's ms in an
//                 atomic every ms; a read is one load)
// The first three read a ManualTtlClock (one relaxed atomic load) standing still; the
// system clocks move, but a TTL of a day lets nothing expire, so every contender does the
// same logical work. The target is judged on the "ttl" column. An operation
// is set_current_key + the state call, in an order shuffled by our own Fisher-Yates on
// splitmix64 (the same order for every contender).
//
// Method
// ------
// Every figure is a median of `--reps` samples after a discarded warm-up round. Within a
// repetition the contenders run one after the other, rotating who goes first, and each
// TTL/plain ratio is the median of the per-repetition quotients (paired, so a noisy
// neighbour slows both sides of a pair alike). Time is the thread's CPU time. Each contender
// runs on a thread of its own, one contender at a time, so that each has a malloc arena of
// its own (see Worker); --one-thread runs them all on the main thread, sharing one arena.
// The value rows run all their repetitions before the list rows run theirs.
#include <time.h>

#include <algorithm>
#include <array>
#include <cinttypes>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cowstate/keyed_state_backend.h"
#include "cowstate/ttl.h"

namespace {

using Backend = cowstate::KeyedStateBackend<cowstate::UInt64Serializer>;
using Value =
    cowstate::ValueState<Backend, cowstate::VoidNamespaceSerializer, cowstate::Int64Serializer>;
using List =
    cowstate::ListState<Backend, cowstate::VoidNamespaceSerializer, cowstate::Int64Serializer>;

struct SplitMix64 {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
};

double thread_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

volatile std::int64_t g_sink;  // keeps every read's result alive

void expect(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "ttl_bench: a timed loop did not do what it claims: %s\n", what);
    std::exit(1);
  }
}

// A thread that runs one contender's work, one job at a time, while the caller waits. A
// contender that is filled and timed only on a thread of its own gets a glibc arena of its
// own (its backend is destroyed on the main thread, untimed), as a backend driven by its own task
// thread does in a deployment: the chunks one contender frees never serve, or fragment around,
// another's allocations. (With every contender on one thread, the next contender's lists grow out
// of the chunks the last one freed, so its cost depends on who ran before it; `--one-thread`
// runs them that way.)
class Worker {
 public:
  Worker() : thread_([this] { loop(); }) {}
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  ~Worker() {
    run([this] { stop_ = true; });
    thread_.join();
  }
  // Runs job() on this worker's thread; returns when it has returned.
  void run(std::function<void()> job) {
    std::unique_lock lock(mu_);
    job_ = std::move(job);
    cv_.notify_all();
    cv_.wait(lock, [this] { return !job_; });
  }

 private:
  void loop() {
    std::unique_lock lock(mu_);
    while (!stop_) {
      cv_.wait(lock, [this] { return static_cast<bool>(job_); });
      job_();  // with the lock held: the caller is waiting for it anyway
      job_ = nullptr;
      cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> job_;
  bool stop_ = false;
  std::thread thread_;  // last: it starts running loop() at construction
};

struct Contender {
  const char* name;
  std::optional<cowstate::StateTtlConfig> ttl;
  const cowstate::TtlTimeProvider* clock;
  std::unique_ptr<Backend> backend{};
  Value* value = nullptr;
  List* list = nullptr;
  std::unique_ptr<Worker> worker{};  // null under --one-thread: the work runs on main's thread
  void run(const std::function<void()>& job) {
    if (worker) {
      worker->run(job);
    } else {
      job();
    }
  }
};

constexpr std::int64_t kDay = 24 * 3600 * 1000;
constexpr std::size_t kGrowTo = 8;  // list-add samples grow every list from 1 to 8 elements

std::optional<cowstate::StateTtlConfig> ttl_config(bool cleanup) {
  cowstate::StateTtlConfig c;
  c.ttl_ms = kDay;
  if (!cleanup) c.incremental_cleanup = std::nullopt;  // else Flink's default: 5, no key switch
  return c;
}

void fill(Contender& c, const std::vector<std::uint64_t>& keys) {
  c.backend = std::make_unique<Backend>(cowstate::KeyGroupRange::all(128), 128,
                                        cowstate::MapOptions{}, c.clock);
  const cowstate::StateOptions options{c.ttl};
  c.value = &c.backend->value_state<cowstate::VoidNamespaceSerializer, cowstate::Int64Serializer>(
      "value", -1, options);
  c.list = &c.backend->list_state<cowstate::VoidNamespaceSerializer, cowstate::Int64Serializer>(
      "list", options);
  for (std::uint64_t k : keys) {
    expect(c.backend->set_current_key(k).ok(), "set_current_key");
    c.value->update(static_cast<std::int64_t>(k));
    c.list->add(static_cast<std::int64_t>(k));
  }
}

// One timed pass of `op` over `order`; returns ns per operation.
template <class Op>
double timed_pass(Contender& c, const std::vector<std::uint64_t>& order, Op op) {
  const double t0 = thread_seconds();
  for (std::uint64_t k : order) {
    (void)c.backend->set_current_key(k);
    op(c, k);
  }
  const double t1 = thread_seconds();
  return (t1 - t0) * 1e9 / static_cast<double>(order.size());
}

struct Row {
  std::string op;
  std::vector<std::vector<double>> ns;  // [contender][rep]
};

}  // namespace

int main(int argc, char** argv) {
  std::size_t n = 1000000;
  int reps = 5;
  bool one_thread = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--n" && i + 1 < argc) {
      n = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (a == "--one-thread") {
      one_thread = true;
    } else if (a == "--quick") {
      n = 10000;
      reps = 3;
    } else {
      std::fprintf(stderr,
                   "usage: cowstate_ttl_bench [--n KEYS] [--reps N] [--quick] [--one-thread]\n");
      return 2;
    }
  }
  if (n == 0 || reps < 1) return 2;

  SplitMix64 rng{0x77715eedULL};
  std::vector<std::uint64_t> keys(n);
  for (std::uint64_t& k : keys) k = rng.next();
  std::vector<std::uint64_t> order = keys;
  for (std::size_t i = order.size() - 1; i > 0; --i) {  // Fisher-Yates on splitmix64
    std::swap(order[i], order[rng.next() % (i + 1)]);
  }

  const cowstate::ManualTtlClock clock(1'700'000'000'000);
  const cowstate::TickingTtlClock ticking;
  std::vector<Contender> cs;
  cs.push_back({.name = "plain", .ttl = std::nullopt, .clock = &clock});
  cs.push_back({.name = "ttl", .ttl = ttl_config(false), .clock = &clock});
  cs.push_back({.name = "ttl+cleanup", .ttl = ttl_config(true), .clock = &clock});
  cs.push_back({.name = "ttl sysclock",
                .ttl = ttl_config(false),
                .clock = &cowstate::SystemTtlClock::instance()});
  cs.push_back({.name = "ttl ticking", .ttl = ttl_config(false), .clock = &ticking});
  for (Contender& c : cs) {
    if (!one_thread) c.worker = std::make_unique<Worker>();
    c.run([&] { fill(c, keys); });
  }

  auto get = [](Contender& c, std::uint64_t k) {
    const std::int64_t v = c.value->value();
    expect(v == static_cast<std::int64_t>(k), "value get found its value");
    g_sink = g_sink + v;
  };
  auto put = [](Contender& c, std::uint64_t k) { c.value->update(static_cast<std::int64_t>(k)); };
  auto add = [](Contender& c, std::uint64_t k) { c.list->add(static_cast<std::int64_t>(k)); };
  // Between list-add samples: every list back to one element (untimed).
  auto reset_lists = [&](Contender& c) {
    for (std::uint64_t k : keys) {
      (void)c.backend->set_current_key(k);
      c.list->update({static_cast<std::int64_t>(k)});
    }
  };
  auto check_lists = [&](Contender& c, std::size_t length) {
    for (std::size_t i = 0; i < keys.size(); i += keys.size() / 16 + 1) {
      (void)c.backend->set_current_key(keys[i]);
      expect(c.list->get().size() == length, "list add grew every list to its length");
    }
  };

  std::vector<Row> rows = {{"value get", {}},
                           {"value put", {}},
                           {"list add 1->2", {}},
                           {"list add 1->" + std::to_string(kGrowTo), {}}};
  for (Row& r : rows) r.ns.assign(cs.size(), {});
  // Runs `sample(c)` for every contender, rotating who goes first, in a discarded warm-up
  // round and then `reps` rounds; its two figures go to rows `row` and `row + 1`.
  auto rounds = [&](std::size_t row,
                    const std::function<std::array<double, 2>(Contender&)>& sample) {
    for (int rep = -1; rep < reps; ++rep) {  // rep -1: warm-up, discarded
      for (std::size_t j = 0; j < cs.size(); ++j) {
        Contender& c = cs[(j + static_cast<std::size_t>(std::max(rep, 0))) % cs.size()];
        const std::size_t ci = static_cast<std::size_t>(&c - cs.data());
        std::array<double, 2> ns{};
        c.run([&] { ns = sample(c); });
        if (rep < 0) continue;
        rows[row].ns[ci].push_back(ns[0]);
        rows[row + 1].ns[ci].push_back(ns[1]);
      }
    }
  };
  // The value rows run all their rounds first, the list rows theirs after. List adds
  // allocate and free a vector per key and pass, and passes run right after them are
  // slower: with all four rows in one round, every value sample followed some contender's
  // list adds.
  rounds(0, [&](Contender& c) {
    return std::array<double, 2>{timed_pass(c, order, get), timed_pass(c, order, put)};
  });
  rounds(2, [&](Contender& c) {
    // Lists grow from one element to kGrowTo, one timed pass per element: the first
    // pass reallocates every list (1 -> 2), later ones only where std::vector's
    // doubling runs out of room (2 -> 3, 4 -> 5), as lists grow in steady use.
    const double first = timed_pass(c, order, add);
    double grown = first;
    for (std::size_t len = 2; len < kGrowTo; ++len) grown += timed_pass(c, order, add);
    check_lists(c, kGrowTo);
    reset_lists(c);
    return std::array<double, 2>{first, grown / static_cast<double>(kGrowTo - 1)};
  });

  std::printf(
      "ttl_bench: n = %zu keys, %d reps (median), max parallelism 128, thread CPU time, %s\n", n,
      reps, one_thread ? "every contender on one thread" : "a thread (and arena) per contender");
  // Per row: each contender's median ns/op, and for each TTL contender the median of its
  // per-repetition quotients over plain.
  std::printf("%-14s", "op");
  for (const Contender& c : cs) std::printf(" %14s", c.name);
  std::printf("   (ns/op; x = median ratio to plain)\n");
  bool within = true;
  for (const Row& r : rows) {
    std::printf("%-14s %14.1f", r.op.c_str(), median(r.ns[0]));
    for (std::size_t ci = 1; ci < cs.size(); ++ci) {
      std::vector<double> ratio;
      for (std::size_t i = 0; i < r.ns[0].size(); ++i) ratio.push_back(r.ns[ci][i] / r.ns[0][i]);
      const double q = median(ratio);
      if (ci == 1) within = within && q <= 1.3;
      char cell[32];
      std::snprintf(cell, sizeof cell, "%.1f (%.2fx)", median(r.ns[ci]), q);
      std::printf(" %14s", cell);
    }
    std::printf("\n");
  }
  std::printf("target: TTL at most 1.3x the same state without TTL (ttl column): %s\n",
              within ? "met" : "MISSED");
  return 0;
}
