// State TTL (cowstate/ttl.h and the TTL paths of cowstate/keyed_state_backend.h): the
// expiry boundary, update types, visibilities, per-element expiry of lists and maps, lazy
// expiry, incremental cleanup (under a live snapshot, on key switch, to completion),
// full-snapshot cleanup judged at write time, and last-access times across checkpoints.
//
// Every test case is tagged [ttl]: scripts/ttl-mutants runs exactly these in the mutants build
// under each planted TTL bug (COWSTATE_MUTANT) and expects a failure.
#include "cowstate/ttl.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backend_fixture.h"
#include "cowstate/checkpoint.h"
#include "cowstate/keyed_state_backend.h"
#include "cowstate/serializers.h"

namespace {

using backend_test::average_function;
using backend_test::Backend;
using backend_test::Bytes;
using backend_test::List;
using backend_test::Map;
using backend_test::Value;
using cowstate::Int32Serializer;
using cowstate::Int64Serializer;
using cowstate::KeyGroupRange;
using cowstate::ManualTtlClock;
using cowstate::StateOptions;
using cowstate::StateTtlConfig;
using cowstate::StringSerializer;
using cowstate::TtlValue;
using cowstate::VectorInt64Serializer;
using cowstate::VoidNamespace;
using cowstate::VoidNamespaceSerializer;
using Update = StateTtlConfig::UpdateType;
using Visibility = StateTtlConfig::Visibility;
using Reducing = backend_test::Reducing;
using Average = backend_test::Average;

constexpr std::int64_t kStart = 1000;
constexpr std::uint64_t kTtl = 100;

struct Ttl {
  std::uint64_t ttl_ms = kTtl;
  Update update = Update::on_create_and_write;
  Visibility visibility = Visibility::never_return_expired;
  std::optional<StateTtlConfig::IncrementalCleanup> incremental = std::nullopt;  // off unless asked
  bool full_snapshot = false;
};

StateOptions ttl_options(const Ttl& t) {
  StateTtlConfig c;
  c.ttl_ms = t.ttl_ms;
  c.update_type = t.update;
  c.visibility = t.visibility;
  c.incremental_cleanup = t.incremental;
  c.full_snapshot_cleanup = t.full_snapshot;
  return StateOptions{c};
}

// A backend on a manual clock with one TTL state of each kind, all with the same config
// (the agg state averages).
struct Fixture {
  explicit Fixture(const Ttl& t = {}, KeyGroupRange range = KeyGroupRange::all(128),
                   std::int32_t max_parallelism = 128,
                   std::shared_ptr<ManualTtlClock> shared_clock = nullptr)
      : clock(shared_clock ? std::move(shared_clock) : std::make_shared<ManualTtlClock>(kStart)),
        b(range, max_parallelism, {}, clock.get()) {
    const StateOptions o = ttl_options(t);
    value = &b.value_state<VoidNamespaceSerializer, Int64Serializer>("value", -1, o);
    list = &b.list_state<Int32Serializer, Int64Serializer>("list", o);
    map = &b.map_state<VoidNamespaceSerializer, StringSerializer, Int64Serializer>("map", o);
    sum = &b.reducing_state<Int32Serializer, Int64Serializer>(
        "sum", [](const std::int64_t& x, const std::int64_t& y) { return x + y; }, o);
    agg = &b.aggregating_state<Int32Serializer, VectorInt64Serializer, std::int64_t, std::int64_t>(
        "agg", average_function(), o);
  }
  // A key of this backend's range (the first from `from` on).
  std::uint64_t key(std::uint64_t from = 0) {
    for (std::uint64_t k = from;; ++k) {
      if (b.range().contains(b.key_group_of(k))) return k;
    }
  }
  void at(std::uint64_t k) { REQUIRE(b.set_current_key(k).ok()); }
  void advance(std::int64_t ms) { clock->advance(ms); }

  std::shared_ptr<ManualTtlClock> clock;
  Backend b;
  Value* value;
  List* list;
  Map* map;
  Reducing* sum;
  Average* agg;
};

// Everything a TTL state stores, last-access times included, by (key, namespace).
template <class Handle>
auto stored(Handle& h) {
  return backend_test::table_image(h.ttl_table());
}

Bytes write_checkpoint(Backend& b, std::uint64_t id = 1) {
  cowstate::MemoryCheckpointSink sink;
  cowstate::CheckpointWriter w(b.snapshot(id), &sink);
  while (!w.step(1000)) {
  }
  REQUIRE(w.done());
  return sink.take();
}

void restore(Fixture& f, const Bytes& file) {
  const cowstate::CheckpointInput in{"checkpoint", file};
  const cowstate::Status st = f.b.restore({&in, 1});
  INFO(st.message());
  REQUIRE(st.ok());
  REQUIRE(f.b.check_invariants());
}

std::vector<std::int64_t> ints(std::initializer_list<std::int64_t> v) { return v; }

}  // namespace

TEST_CASE(
    "expiry is last access + ttl <= now: the boundary instant is expired, and the sum "
    "saturates",
    "[ttl]") {
  using cowstate::ttl_expired;
  CHECK_FALSE(ttl_expired(1000, 100, 1099));
  CHECK(ttl_expired(1000, 100, 1100));
  CHECK(ttl_expired(1000, 100, 1101));
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  CHECK(cowstate::ttl_expiration(kMax - 5, 100) == kMax);  // no wrap into the past
  // At the edge: a sum of exactly INT64_MAX, one past it, and a large ttl from before the
  // epoch (no overflow, no saturation).
  static_assert(cowstate::ttl_expiration(kMax - 100, 100) == kMax);
  CHECK(cowstate::ttl_expiration(kMax - 99, 100) == kMax);
  CHECK(cowstate::ttl_expiration(-5, kMax) == kMax - 5);
  CHECK_FALSE(ttl_expired(kMax - 5, 100, kMax - 1));
  CHECK(ttl_expired(kMax - 5, 100, kMax));
  CHECK_FALSE(ttl_expired(0, kMax, kMax - 1));
  CHECK(ttl_expired(-50, 100, 50));  // times before the epoch work too
  CHECK_FALSE(ttl_expired(-50, 100, 49));
}

TEST_CASE(
    "a value read one millisecond before its expiry is there, at the boundary instant it "
    "is gone",
    "[ttl]") {
  Fixture f;
  f.at(1);
  f.value->update(7);
  f.list->add(1);
  f.map->put("a", 2);
  f.sum->add(3);
  f.agg->add(4);
  f.advance(kTtl - 1);
  CHECK(f.value->value() == 7);
  CHECK(f.list->get() == ints({1}));
  CHECK(f.map->get("a") == 2);
  CHECK(f.sum->get() == 3);
  CHECK(f.agg->get() == 4);
  f.advance(1);  // kStart + kTtl: exactly the boundary
  CHECK(f.value->value() == -1);
  CHECK(f.list->get().empty());
  CHECK_FALSE(f.map->get("a").has_value());
  CHECK_FALSE(f.sum->get().has_value());
  CHECK_FALSE(f.agg->get().has_value());
  CHECK(f.b.check_invariants());
}

// A provider of the kind a user writes: time from its own virtual call, no atomic handed to
// the base.
class CountingClock final : public cowstate::TtlTimeProvider {
 public:
  std::int64_t current_timestamp() const noexcept override {
    calls_.fetch_add(1, std::memory_order_relaxed);
    return now_.load(std::memory_order_relaxed);
  }
  void set(std::int64_t t) { now_.store(t, std::memory_order_relaxed); }
  std::int64_t calls() const { return calls_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::int64_t> now_{kStart};
  mutable std::atomic<std::int64_t> calls_{0};
};

TEST_CASE(
    "a manual clock's now() follows set and advance, and a clock of the user's own is called "
    "through current_timestamp() on every TTL access, with the same expiry at the boundary",
    "[ttl]") {
  ManualTtlClock manual(kStart);
  CHECK(manual.now() == kStart);
  manual.advance(42);
  CHECK(manual.now() == kStart + 42);
  CHECK(manual.now() == manual.current_timestamp());

  CountingClock clock;
  Backend b(KeyGroupRange::all(128), 128, {}, &clock);
  Value& v =
      b.value_state<VoidNamespaceSerializer, Int64Serializer>("value", -1, ttl_options(Ttl{}));
  REQUIRE(b.set_current_key(1).ok());
  std::int64_t calls = clock.calls();
  v.update(7);  // stamped kStart, by a call of the clock
  CHECK(clock.calls() > calls);
  calls = clock.calls();
  clock.set(kStart + static_cast<std::int64_t>(kTtl) - 1);
  CHECK(v.value() == 7);
  CHECK(clock.calls() > calls);
  calls = clock.calls();
  clock.set(kStart + static_cast<std::int64_t>(kTtl));  // the boundary instant
  CHECK(v.value() == -1);
  CHECK(clock.calls() > calls);
}

TEST_CASE(
    "a ticking clock starts at the system clock's milliseconds, moves with them, never reads "
    "lower than before, and serves a backend's TTL state",
    "[ttl]") {
  const auto& precise = cowstate::SystemTtlClock::instance();
  const std::int64_t p0 = precise.now();
  cowstate::TickingTtlClock clock;
  const std::int64_t t0 = clock.now();
  CHECK(t0 >= p0);
  CHECK(t0 <= precise.now());
  // The ticker moves it with the wall clock: 10 ms on, within 2 s however loaded the
  // machine (a ticker that never stores fails here).
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (clock.now() < t0 + 10 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const std::int64_t t1 = clock.now();
  CHECK(t1 >= t0 + 10);
  CHECK(t1 <= precise.now());
  std::int64_t last = t1;
  for (int i = 0; i < 100000; ++i) {
    const std::int64_t t = clock.now();
    REQUIRE(t >= last);
    last = t;
  }
  CHECK(clock.current_timestamp() >= last);

  Backend b(KeyGroupRange::all(128), 128, {}, &clock);
  Value& v =
      b.value_state<VoidNamespaceSerializer, Int64Serializer>("value", -1, ttl_options(Ttl{}));
  REQUIRE(b.set_current_key(1).ok());
  v.update(5);
  CHECK(v.value() == 5);  // a TTL of 100 ms: still live a moment later
}

TEST_CASE("under OnCreateAndWrite reads do not extend a value's life and writes do", "[ttl]") {
  Fixture f;
  f.at(1);
  f.value->update(1);
  f.advance(60);
  CHECK(f.value->value() == 1);  // a read at 1060 ...
  f.advance(40);
  CHECK(f.value->value() == -1);  // ... did not extend it past 1100
  f.value->update(2);             // written at 1100
  f.advance(99);
  f.value->update(3);  // rewritten at 1199: lives until 1299
  f.advance(99);
  CHECK(f.value->value() == 3);
  f.advance(1);
  CHECK(f.value->value() == -1);
}

TEST_CASE(
    "under OnReadAndWrite every successful read refreshes the last access, of values, "
    "list elements and map values",
    "[ttl]") {
  Fixture f({.update = Update::on_read_and_write});
  f.at(1);
  f.value->update(1);
  f.list->add(10);
  f.map->put("a", 20);
  f.sum->add(30);
  f.agg->add(40);
  for (int i = 0; i < 5; ++i) {  // read every 60 ms: each read keeps them alive
    f.advance(60);
    CHECK(f.value->value() == 1);
    CHECK(f.list->get() == ints({10}));
    CHECK(f.map->get("a") == 20);
    CHECK(f.sum->get() == 30);
    CHECK(f.agg->get() == 40);
  }
  const std::int64_t last_read = f.clock->current_timestamp();
  const auto values = stored(*f.value);
  const auto lists = stored(*f.list);
  const auto maps = stored(*f.map);
  REQUIRE(values.size() == 1);
  REQUIRE(lists.size() == 1);
  REQUIRE(maps.size() == 1);
  CHECK(values.begin()->second.last_access == last_read);
  CHECK(lists.begin()->second.front().last_access == last_read);
  CHECK(maps.begin()->second.at("a").last_access == last_read);
  f.advance(100);  // no read for a whole ttl
  CHECK(f.value->value() == -1);
  CHECK(f.list->get().empty());
  CHECK_FALSE(f.map->get("a").has_value());
  CHECK_FALSE(f.sum->get().has_value());
  CHECK_FALSE(f.agg->get().has_value());
}

TEST_CASE(
    "a refreshing read under a live snapshot copies the state: the snapshot keeps the old "
    "last access",
    "[ttl]") {
  Fixture f({.update = Update::on_read_and_write});
  f.at(1);
  f.list->add(10);
  f.value->update(5);
  auto snap = f.b.snapshot(1);  // the sync phase shares every state
  f.advance(50);
  CHECK(f.list->get() == ints({10}));
  CHECK(f.value->value() == 5);
  REQUIRE(stored(*f.list).size() == 1);
  CHECK(stored(*f.list).begin()->second.front().last_access == kStart + 50);
  cowstate::MemoryCheckpointSink sink;
  cowstate::CheckpointWriter w(std::move(snap), &sink);
  while (!w.step(100)) {
  }
  Fixture r;
  restore(r, sink.bytes());
  REQUIRE(stored(*r.list).size() == 1);
  REQUIRE(stored(*r.value).size() == 1);
  CHECK(stored(*r.list).begin()->second.front().last_access == kStart);
  CHECK(stored(*r.value).begin()->second.last_access == kStart);
}

TEST_CASE(
    "NeverReturnExpired hides an expired value, ReturnExpiredIfNotCleanedUp returns it "
    "once, as the read cleans it up",
    "[ttl]") {
  SECTION("never return expired") {
    Fixture f;
    f.at(1);
    f.value->update(1);
    f.map->put("a", 2);
    f.sum->add(3);
    f.advance(kTtl);
    CHECK(f.value->value() == -1);
    CHECK_FALSE(f.map->contains("a"));
    CHECK_FALSE(f.sum->get().has_value());
  }
  SECTION("return expired if not cleaned up") {
    Fixture f({.visibility = Visibility::return_expired_if_not_cleaned_up});
    f.at(1);
    f.value->update(1);
    f.list->add_all({5, 6});
    f.map->put("a", 2);
    f.sum->add(3);
    f.agg->add(4);
    f.advance(kTtl);
    CHECK(f.value->value() == 1);
    CHECK(f.value->value() == -1);  // the first read cleaned it up
    CHECK(f.list->get() == ints({5, 6}));
    CHECK(f.list->get().empty());
    CHECK(f.map->get("a") == 2);
    CHECK_FALSE(f.map->get("a").has_value());
    CHECK(f.sum->get() == 3);
    CHECK_FALSE(f.sum->get().has_value());
    CHECK(f.agg->get() == 4);
    CHECK_FALSE(f.agg->get().has_value());
    CHECK(f.b.check_invariants());
  }
}

TEST_CASE(
    "list elements expire one by one: a read returns the live ones and stores only them, "
    "the last one's expiry removes the entry",
    "[ttl]") {
  Fixture f;
  f.at(1);
  f.list->add(1);  // t = 1000
  f.advance(30);
  f.list->add_all({2, 3});  // t = 1030
  f.advance(40);
  f.list->add(4);  // t = 1070
  f.advance(30);   // 1100: element 1 expired
  CHECK(f.list->get() == ints({2, 3, 4}));
  CHECK(stored(*f.list).begin()->second.size() == 3);
  f.advance(30);  // 1130: 2 and 3 expired
  CHECK(f.list->get() == ints({4}));
  f.advance(40);  // 1170: all expired
  CHECK(f.list->get().empty());
  CHECK(f.list->ttl_table().size() == 0);  // removed, not kept empty (L4)
  f.list->update({8, 9});                  // update stamps every element
  f.advance(99);
  CHECK(f.list->get() == ints({8, 9}));
}

TEST_CASE("map values expire per user key, entries() and is_empty() see only live ones", "[ttl]") {
  Fixture f;
  f.at(1);
  f.map->put("a", 1);
  f.advance(50);
  f.map->put_all({{"b", 2}, {"c", 3}});
  f.advance(50);  // "a" expired
  CHECK_FALSE(f.map->contains("a"));
  CHECK(f.map->entries() == std::map<std::string, std::int64_t>{{"b", 2}, {"c", 3}});
  CHECK(stored(*f.map).begin()->second.size() == 2);
  f.map->put("b", 20);  // rewritten: lives until 1200
  f.advance(50);        // "c" expired
  CHECK(f.map->entries() == std::map<std::string, std::int64_t>{{"b", 20}});
  CHECK_FALSE(f.map->is_empty());
  f.advance(50);
  CHECK(f.map->is_empty());
  CHECK(f.map->ttl_table().size() == 0);  // removed, not kept empty (L4)
}

TEST_CASE("without background cleanup an expired value stays stored until a read removes it",
          "[ttl]") {
  Fixture f;  // incremental cleanup off
  const std::uint64_t k1 = f.key(1);
  const std::uint64_t k2 = f.key(k1 + 1);
  f.at(k1);
  f.value->update(1);
  f.at(k2);
  f.value->update(2);
  f.advance(kTtl);
  CHECK(f.value->ttl_table().size() == 2);  // expired, but nobody looked
  CHECK(f.value->value() == -1);
  CHECK(f.value->ttl_table().size() == 1);  // the read of k2 removed it, k1 stays
  f.at(k1);
  f.value->clear();
  CHECK(f.value->ttl_table().size() == 0);
}

TEST_CASE("reducing and aggregating states start over after their value expired", "[ttl]") {
  Fixture f;
  f.at(1);
  f.sum->add(5);
  f.agg->add(5);
  f.advance(50);
  f.sum->add(1);  // live: reduced, and the write refreshes it
  f.agg->add(1);
  f.advance(99);
  CHECK(f.sum->get() == 6);
  f.sum->add(0);
  f.advance(100);
  f.sum->add(7);  // the old 6 expired: starts over
  f.agg->add(7);  // the old 6 expired at 1150
  CHECK(f.sum->get() == 7);
  CHECK(f.agg->get() == 7);
}

TEST_CASE("merging namespaces with TTL drops expired sources and keeps list elements' times",
          "[ttl]") {
  Fixture f;
  f.at(1);
  const std::vector<std::int32_t> sources = {1, 2};
  f.agg->set_current_namespace(1);
  f.agg->add(10);  // expires at 1100
  f.list->set_current_namespace(1);
  f.list->add(10);
  f.advance(50);
  f.agg->set_current_namespace(2);
  f.agg->add(20);
  f.list->set_current_namespace(2);
  f.list->add(20);
  f.advance(50);  // source 1 expired
  f.agg->merge_namespaces(0, sources);
  f.agg->set_current_namespace(0);
  CHECK(f.agg->get() == 20);
  f.list->merge_namespaces(0, sources);
  f.list->set_current_namespace(0);
  CHECK(f.list->get() == ints({20}));  // 10 is merged but expired
  CHECK(f.agg->ttl_table().size() == 1);
}

TEST_CASE(
    "incremental cleanup under a live snapshot puts filtered copies: the checkpoint still "
    "holds the expired elements",
    "[ttl]") {
  Fixture f;
  std::vector<std::uint64_t> keys;
  for (std::uint64_t k = 0; k < 40; ++k) {
    f.at(k);
    f.list->add(static_cast<std::int64_t>(k));  // expires at 1100
    f.value->update(static_cast<std::int64_t>(k));
  }
  f.advance(50);
  for (std::uint64_t k = 0; k < 40; ++k) {
    f.at(k);
    f.list->add(static_cast<std::int64_t>(k) + 100);  // expires at 1150
  }
  auto snap = f.b.snapshot(1);
  f.advance(50);  // the first element of every list and every value expired
  for (int i = 0; i < 200; ++i) {
    f.list->run_ttl_cleanup(5);
    f.value->run_ttl_cleanup(5);
  }
  for (const auto& [kn, l] : stored(*f.list)) {
    REQUIRE(l.size() == 1);
    CHECK(l.front().value == static_cast<std::int64_t>(kn.first) + 100);
  }
  CHECK(f.value->ttl_table().size() == 0);
  CHECK(f.b.check_invariants());
  cowstate::MemoryCheckpointSink sink;
  cowstate::CheckpointWriter w(std::move(snap), &sink);
  while (!w.step(7)) {
  }
  REQUIRE(w.done());
  Fixture r;
  restore(r, sink.bytes());
  const auto lists = stored(*r.list);
  REQUIRE(lists.size() == 40);
  for (const auto& [kn, l] : lists) {  // exactly what the snapshot saw at its start
    const auto k = static_cast<std::int64_t>(kn.first);
    CHECK(l == std::vector<TtlValue<std::int64_t>>{{k, kStart}, {k + 100, kStart + 50}});
  }
  CHECK(r.value->ttl_table().size() == 40);
}

TEST_CASE(
    "incremental cleanup removes an entry whose elements all expired rather than keep it "
    "empty",
    "[ttl]") {
  Fixture f;
  for (std::uint64_t k = 0; k < 10; ++k) {
    f.at(k);
    f.list->add_all({1, 2});
    f.map->put("x", 1);
  }
  f.advance(kTtl);
  for (int i = 0; i < 100; ++i) {
    f.list->run_ttl_cleanup(5);
    f.map->run_ttl_cleanup(5);
  }
  CHECK(f.list->ttl_table().size() == 0);
  CHECK(f.map->ttl_table().size() == 0);
}

TEST_CASE("incremental cleanup runs on every state access, cleanup size entries at a time",
          "[ttl]") {
  Fixture f({.incremental = StateTtlConfig::IncrementalCleanup{5, false}});
  for (std::uint64_t k = 0; k < 200; ++k) {
    f.at(k);
    f.value->update(1);
  }
  f.advance(kTtl);
  f.at(100000);
  const std::size_t before = f.value->ttl_table().size();
  REQUIRE(before == 200);
  f.value->update(1);  // one access: at least 5, at most a few chains more
  const std::size_t after = f.value->ttl_table().size();
  CHECK(after <= before - 5 + 1);
  CHECK(after >= before - 40);
  for (int i = 0; i < 400 && f.value->ttl_table().size() > 1; ++i) (void)f.value->value();
  CHECK(f.value->ttl_table().size() == 1);  // only the live one written at the end
}

TEST_CASE("incremental cleanup also runs on every key switch when configured, and only then",
          "[ttl]") {
  for (const bool on_switch : {false, true}) {
    Fixture f({.incremental = StateTtlConfig::IncrementalCleanup{5, on_switch}});
    for (std::uint64_t k = 0; k < 100; ++k) {
      f.at(k);
      f.list->add(1);
    }
    f.advance(kTtl);
    for (std::uint64_t k = 0; k < 100; ++k) f.at(k);  // key switches, no state access
    INFO("run on every key switch: " << on_switch);
    CHECK(f.list->ttl_table().size() == (on_switch ? 0u : 100u));
  }
}

TEST_CASE(
    "driving incremental cleanup long enough removes every expired entry, also while maps "
    "rehash",
    "[ttl]") {
  ManualTtlClock clock(kStart);
  cowstate::MapOptions tiny;
  tiny.initial_capacity = 4;
  tiny.min_capacity = 4;
  Backend b(KeyGroupRange::all(16), 16, tiny, &clock);
  StateTtlConfig c;
  c.ttl_ms = kTtl;
  c.incremental_cleanup = std::nullopt;
  auto& list = b.list_state<Int32Serializer, Int64Serializer>("list", StateOptions{c});
  std::size_t live = 0;
  for (std::int64_t phase = 0; phase < 7; ++phase) {
    clock.set(kStart + phase * 20);  // last access 1000, 1020, ..., 1120
    for (std::uint64_t k = static_cast<std::uint64_t>(phase); k < 3000; k += 7) {
      REQUIRE(b.set_current_key(k % 500).ok());
      list.set_current_namespace(static_cast<std::int32_t>(k / 500));
      list.add(static_cast<std::int64_t>(k));
      if (phase >= 5) ++live;                    // live at 1190: written at 1100 or 1120
      if (k % 50 == 0) list.run_ttl_cleanup(5);  // interleaved with growth and rehashes
    }
  }
  clock.set(kStart + 190);
  for (int i = 0; i < 3000; ++i) list.run_ttl_cleanup(5);
  const auto all = stored(list);
  CHECK(all.size() == live);
  for (const auto& [kn, l] : all) {
    REQUIRE(l.size() == 1);
    CHECK_FALSE(cowstate::ttl_expired(l.front().last_access, kTtl, kStart + 190));
  }
  CHECK(b.check_invariants());
}

TEST_CASE(
    "full-snapshot cleanup judges each entry by the clock when it is written and leaves the "
    "live state untouched",
    "[ttl]") {
  // Two key groups: the writer finishes key group 0, then time passes before key group 1.
  Fixture f({.full_snapshot = true}, KeyGroupRange::all(2), 2);
  std::uint64_t k0 = 0;
  while (f.b.key_group_of(k0) != 0) ++k0;
  std::uint64_t k1 = 0;
  while (f.b.key_group_of(k1) != 1) ++k1;
  for (const std::uint64_t k : {k0, k1}) {
    f.at(k);
    f.value->update(static_cast<std::int64_t>(k));
    f.list->add(1);  // expires at 1100
  }
  f.advance(50);
  for (const std::uint64_t k : {k0, k1}) {
    f.at(k);
    f.list->add(2);  // expires at 1150
  }
  cowstate::MemoryCheckpointSink sink;
  cowstate::CheckpointWriter w(f.b.snapshot(1), &sink);  // sync phase at 1050: nothing expired
  while (w.snapshot()->live_key_groups() == 2) REQUIRE_FALSE(w.step(1));
  f.advance(50);  // 1100: the values and the first list elements expire
  while (!w.step(1)) {
  }
  REQUIRE(w.done());
  CHECK(f.value->ttl_table().size() == 2);  // live state untouched
  CHECK(stored(*f.list).at({k1, 0}).size() == 2);

  Fixture r({.full_snapshot = true}, KeyGroupRange::all(2), 2);
  restore(r, sink.bytes());
  const auto values = stored(*r.value);
  CHECK(values.size() == 1);  // key group 0's was written at 1050, key group 1's at 1100
  CHECK(values.count({k0, VoidNamespace{}}) == 1);
  const auto lists = stored(*r.list);
  REQUIRE(lists.size() == 2);
  CHECK(lists.at({k0, 0}).size() == 2);
  CHECK(lists.at({k1, 0}) == std::vector<TtlValue<std::int64_t>>{{2, kStart + 50}});
}

TEST_CASE("a full-snapshot checkpoint whose entries all expired restores empty", "[ttl]") {
  Fixture f({.full_snapshot = true});
  for (std::uint64_t k = 0; k < 50; ++k) {
    f.at(k);
    f.value->update(1);
    f.map->put("a", 1);
  }
  f.advance(kTtl);
  const Bytes file = write_checkpoint(f.b);
  CHECK(f.value->ttl_table().size() == 50);
  Fixture r({.full_snapshot = true});
  restore(r, file);
  CHECK(r.value->ttl_table().size() == 0);
  CHECK(r.map->ttl_table().size() == 0);
}

TEST_CASE("last-access times survive a checkpoint and a restore into another key-group range",
          "[ttl]") {
  const Ttl config{.update = Update::on_read_and_write};
  Fixture f(config);
  for (std::uint64_t k = 0; k < 300; ++k) {
    f.at(k);
    f.clock->set(kStart + static_cast<std::int64_t>(k / 3));
    f.value->update(static_cast<std::int64_t>(k));
    f.list->add(static_cast<std::int64_t>(k));
    f.map->put(std::to_string(k % 4), static_cast<std::int64_t>(k));
    f.sum->add(static_cast<std::int64_t>(k));
    f.agg->set_current_namespace(static_cast<std::int32_t>(k % 3));
    f.agg->add(static_cast<std::int64_t>(k));
  }
  const Bytes file = write_checkpoint(f.b);
  for (const KeyGroupRange range :
       {KeyGroupRange::all(128), KeyGroupRange(0, 63), KeyGroupRange(64, 127)}) {
    Fixture r(config, range, 128, std::make_shared<ManualTtlClock>(f.clock->current_timestamp()));
    restore(r, file);
    auto keep = [&](const auto& m) {
      std::remove_cvref_t<decltype(m)> out;
      for (const auto& [kn, s] : m) {
        if (range.contains(f.b.key_group_of(kn.first))) out.emplace(kn, s);
      }
      return out;
    };
    CHECK(stored(*r.value) == keep(stored(*f.value)));
    CHECK(stored(*r.list) == keep(stored(*f.list)));
    CHECK(stored(*r.map) == keep(stored(*f.map)));
    CHECK(stored(*r.sum) == keep(stored(*f.sum)));
    CHECK(stored(*r.agg) == keep(stored(*f.agg)));
    // And they expire at the same instants as they would have in the original.
    const std::uint64_t k = r.key(90);  // written at 1000 + k / 3
    r.at(k);
    r.clock->set(kStart + static_cast<std::int64_t>(k / 3) + 99);
    CHECK(r.value->value() == static_cast<std::int64_t>(k));  // and refreshed by this read
    r.advance(99);
    CHECK(r.value->value() == static_cast<std::int64_t>(k));
    r.advance(100);
    CHECK(r.value->value() == -1);
  }
}

TEST_CASE("a checkpoint records each state's TTL configuration, TTL must match on restore",
          "[ttl]") {
  const Ttl config{.ttl_ms = 12345,
                   .update = Update::on_read_and_write,
                   .visibility = Visibility::return_expired_if_not_cleaned_up,
                   .incremental = StateTtlConfig::IncrementalCleanup{17, true},
                   .full_snapshot = true};
  Fixture f(config);
  f.at(1);
  f.value->update(1);
  const Bytes file = write_checkpoint(f.b);
  const auto layout = cowstate::read_checkpoint_layout({"checkpoint", file});
  REQUIRE(layout.ok());
  REQUIRE(layout->header.states.size() == 5);
  for (const auto& s : layout->header.states) {
    REQUIRE(s.ttl.has_value());
    CHECK(*s.ttl == *ttl_options(config).ttl);
  }
  // The same states without TTL: the stored layouts differ, so the restore is refused.
  Backend plain(KeyGroupRange::all(128));
  plain.value_state<VoidNamespaceSerializer, Int64Serializer>("value", -1);
  plain.list_state<Int32Serializer, Int64Serializer>("list");
  plain.map_state<VoidNamespaceSerializer, StringSerializer, Int64Serializer>("map");
  plain.reducing_state<Int32Serializer, Int64Serializer>(
      "sum", [](const std::int64_t& x, const std::int64_t& y) { return x + y; });
  plain.aggregating_state<Int32Serializer, VectorInt64Serializer, std::int64_t, std::int64_t>(
      "agg", average_function());
  const cowstate::CheckpointInput in{"checkpoint", file};
  const cowstate::Status st = plain.restore({&in, 1});
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().find("with TTL") != std::string::npos);
  // Another TTL configuration restores: the registered one applies from then on.
  Fixture other({.ttl_ms = 5});
  restore(other, file);
  CHECK(other.value->ttl_table().size() == 1);
}
