// The spill tier: exact memory accounting against a recount, metrics in Prometheus' format,
// request rates, the cold tier's reads and writes, spill and load under live snapshots,
// FLIP-50's policy, checkpoints across both tiers and restore under a budget.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backend_fixture.h"
#include "cowstate/checkpoint.h"
#include "cowstate/cold_store.h"
#include "cowstate/keyed_state_backend.h"
#include "cowstate/metrics.h"
#include "cowstate/request_rate.h"
#include "cowstate/spill_load_manager.h"

namespace {

using namespace backend_test;
using cowstate::KeyGroupRange;
using cowstate::ManualTtlClock;
using cowstate::SpillOptions;
using cowstate::Tier;

constexpr std::int32_t kMaxParallelism = 128;

// Options with a budget but no automatic checks (the test moves key groups by hand) unless
// `auto_check`.
SpillOptions budget(std::size_t bytes, bool auto_check = false, double cache_ratio = 0.25) {
  SpillOptions o;
  o.memory_budget_bytes = bytes;
  o.cold_cache_ratio = cache_ratio;
  o.check_every_key_switches = auto_check ? 64 : 0xffffffffu;
  return o;
}

struct Fixture {
  explicit Fixture(SpillOptions o = budget(std::size_t{1} << 40))
      : b(KeyGroupRange::all(kMaxParallelism), kMaxParallelism, {}, &clock, std::move(o)), s(b) {}
  ManualTtlClock clock{1000};
  Backend b;
  States s;
};

// Every key group of every state, the way a test moves them.
void spill_all(Backend& b, std::int32_t every = 1) {
  for (std::size_t st = 0; st < b.state_count(); ++st) {
    for (std::int32_t g = 0; g < kMaxParallelism; g += every) {
      if (b.table_at(st).memory(g).tier == Tier::heap) REQUIRE(b.spill(st, g).ok());
    }
  }
}
void load_all(Backend& b) {
  for (std::size_t st = 0; st < b.state_count(); ++st) {
    for (std::int32_t g = 0; g < kMaxParallelism; ++g) {
      if (b.table_at(st).memory(g).tier == Tier::cold) REQUIRE(b.load(st, g).ok());
    }
  }
}

// What a backend holds, read back through a checkpoint (works for any mix of tiers).
Image checkpoint_image(Backend& b, std::uint64_t id = 1) {
  return restore_image(write_checkpoint(b, id));
}

// One random state operation on key `k` (every kind of state, growing and shrinking).
void random_op(States& s, Backend& b, std::mt19937_64& rng) {
  const std::uint64_t k = rng() % 300;
  REQUIRE(b.set_current_key(k).ok());
  const auto x = static_cast<std::int64_t>(rng() % 1000);
  switch (rng() % 9) {
    case 0:
      s.value->update(x);
      break;
    case 1:
      s.value->clear();
      break;
    case 2:
      s.list->set_current_namespace(static_cast<std::int32_t>(rng() % 3));
      s.list->add(x);
      break;
    case 3:
      s.list->set_current_namespace(static_cast<std::int32_t>(rng() % 3));
      s.list->update(std::vector<std::int64_t>(rng() % 40, x));
      break;
    case 4:
      s.map->put(std::string(rng() % 40, 'k') + std::to_string(x % 7), x);
      break;
    case 5:
      s.map->remove(std::string(rng() % 40, 'k') + std::to_string(x % 7));
      break;
    case 6:
      s.sum->set_current_namespace(static_cast<std::int32_t>(rng() % 2));
      s.sum->add(x);
      break;
    case 7:
      s.average->set_current_namespace(7);
      s.average->add(x);
      break;
    default:
      s.map->clear();
      break;
  }
}

}  // namespace

TEST_CASE("accounting equals a recount from scratch after random operations with live snapshots",
          "[spill][accounting]") {
  Fixture f;
  std::mt19937_64 rng(GENERATE(1u, 2u, 3u));
  std::vector<std::unique_ptr<cowstate::BackendSnapshot>> live;
  for (int step = 0; step < 3000; ++step) {
    const auto r = rng() % 100;
    if (r < 2 && live.size() < 3) {
      live.push_back(f.b.snapshot(static_cast<std::uint64_t>(step)));
    } else if (r < 4 && !live.empty()) {
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(rng() % live.size()));
    } else {
      random_op(f.s, f.b, rng);
    }
    if (step % 50 == 0) {
      std::string why;
      const bool exact = f.b.check_accounting(&why);
      INFO("step " << step << ", live snapshots " << live.size() << ": " << why);
      REQUIRE(exact);
      const cowstate::BackendMetrics m = f.b.metrics();
      CHECK(m.bytes == f.b.memory_bytes());
      CHECK(m.retired_bytes <= m.bytes);
      if (live.empty()) CHECK(m.retired_bytes == 0);
    }
  }
  live.clear();
  REQUIRE(f.b.check_accounting());
}

TEST_CASE("retired bytes grow while a snapshot shares states and go when it is released",
          "[spill][accounting]") {
  Fixture f;
  for (std::uint64_t k = 0; k < 200; ++k) {
    REQUIRE(f.b.set_current_key(k).ok());
    f.s.list->add(static_cast<std::int64_t>(k));
  }
  CHECK(f.b.metrics().retired_bytes == 0);
  auto snap = f.b.snapshot(1);
  for (std::uint64_t k = 0; k < 200; ++k) {
    REQUIRE(f.b.set_current_key(k).ok());
    f.s.list->add(1);  // every list is shared: copied, the original retired
  }
  const cowstate::BackendMetrics held = f.b.metrics();
  // 200 retired lists of one element, their boxes and entries at least.
  CHECK(held.retired_bytes >= 200 * sizeof(std::int64_t));
  REQUIRE(f.b.check_accounting());
  snap.reset();
  for (std::uint64_t k = 0; k < 200; ++k) {  // the writer reclaims at its next operations
    REQUIRE(f.b.set_current_key(k).ok());
    (void)f.s.list->get();
  }
  CHECK(f.b.metrics().retired_bytes == 0);
  REQUIRE(f.b.check_accounting());
}

TEST_CASE("metrics render in Prometheus' text format with escaped labels", "[spill][metrics]") {
  cowstate::BackendMetrics m;
  m.bytes = 4096;
  m.budget_bytes = 8192;
  m.spills = 3;
  m.key_groups.push_back({"odd \"name\"\\x\n", 5, 10, 640, 64, Tier::cold, 2.5});
  const std::string text = cowstate::render_prometheus(m);
  CHECK(text.find("# TYPE cowstate_key_group_memory_bytes gauge\n") != std::string::npos);
  CHECK(text.find("cowstate_key_group_memory_bytes{state=\"odd \\\"name\\\"\\\\x\\n\","
                  "key_group=\"5\",tier=\"cold\"} 640\n") != std::string::npos);
  CHECK(text.find("cowstate_key_group_request_rate{state=\"odd \\\"name\\\"\\\\x\\n\","
                  "key_group=\"5\",tier=\"cold\"} 2.5\n") != std::string::npos);
  CHECK(text.find("# TYPE cowstate_spills_total counter\ncowstate_spills_total 3\n") !=
        std::string::npos);
  CHECK(text.find("cowstate_memory_budget_bytes 8192\n") != std::string::npos);
  // Every line is a comment or a sample "name[{labels}] value".
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t end = text.find('\n', at);
    REQUIRE(end != std::string::npos);
    const std::string line = text.substr(at, end - at);
    CHECK((line.rfind("# ", 0) == 0 || line.rfind("cowstate_", 0) == 0));
    at = end + 1;
  }
}

TEST_CASE("request rates add hits and halve per half-life, deterministically", "[spill][rate]") {
  cowstate::RequestRate r;
  r.fold(0, 1000);
  for (int i = 0; i < 8; ++i) r.hit();
  r.fold(0, 1000);
  CHECK(r.value() == 8.0);
  r.fold(1000, 1000);
  CHECK(r.value() == 4.0);
  r.fold(1500, 1000);  // half a half-life: the linear step, 1 - 0.25
  CHECK(r.value() == 3.0);
  r.fold(1400, 1000);  // a clock that went back decays nothing
  CHECK(r.value() == 3.0);
  r.fold(1000000, 1000);
  CHECK(r.value() == 0.0);
  Fixture f;
  REQUIRE(f.b.set_current_key(7).ok());
  const std::int32_t g = f.b.current_key_group();
  for (int i = 0; i < 5; ++i) (void)f.s.value->value();
  const cowstate::BackendMetrics m = f.b.metrics();
  for (const auto& k : m.key_groups) {
    if (k.state == "value") CHECK(k.request_rate == (k.key_group == g ? 5.0 : 0.0));
  }
}

TEST_CASE("a spilled key group serves reads and writes of every kind from the cold tier",
          "[spill][cold]") {
  // A cache of one entry (every access goes to LMDB, dirty entries written back at once) and
  // one of 16 KiB (evictions now and then).
  const double ratio = GENERATE(0.0, 0.25);
  Fixture f(budget(std::size_t{64} << 10, false, ratio));
  populate(f.b, f.s, 400, 3);
  const Image before = checkpoint_image(f.b);
  spill_all(f.b);
  CHECK(f.b.metrics().spilled_key_groups > 0);
  CHECK(checkpoint_image(f.b, 2) == before);
  // The same operations on a heap backend and on the spilled one give the same results.
  Fixture heap(budget(std::size_t{1} << 40));
  populate(heap.b, heap.s, 400, 3);
  std::mt19937_64 r1(9);
  std::mt19937_64 r2(9);
  for (int i = 0; i < 2000; ++i) {
    random_op(heap.s, heap.b, r1);
    random_op(f.s, f.b, r2);
    const std::uint64_t k = r1() % 300;
    (void)r2();
    REQUIRE(heap.b.set_current_key(k).ok());
    REQUIRE(f.b.set_current_key(k).ok());
    REQUIRE(heap.s.value->value() == f.s.value->value());
    REQUIRE(heap.s.map->entries() == f.s.map->entries());
    heap.s.list->set_current_namespace(1);
    f.s.list->set_current_namespace(1);
    REQUIRE(heap.s.list->get() == f.s.list->get());
  }
  const Image expected = checkpoint_image(heap.b, 3);
  CHECK(checkpoint_image(f.b, 4) == expected);
  REQUIRE(f.b.check_accounting());
  // Within its share of the budget, plus what one slot takes per state (a chunk of slots).
  const auto share = static_cast<std::uint64_t>(ratio * (64 << 10));
  CHECK(f.b.metrics().cold_cache_bytes <= share + 5 * 8192);
  load_all(f.b);  // entries written while spilled come back with the rest
  CHECK(f.b.metrics().spilled_key_groups == 0);
  CHECK(checkpoint_image(f.b, 5) == expected);
  REQUIRE(f.b.check_accounting());
  REQUIRE(f.b.check_invariants());
}

TEST_CASE("a snapshot keeps seeing the tier it started on across a spill and a load",
          "[spill][snapshot]") {
  Fixture f;
  populate(f.b, f.s, 300, 1);
  const Image at_first = checkpoint_image(f.b);
  cowstate::MemoryCheckpointSink sink1;
  cowstate::CheckpointWriter w1(f.b.snapshot(10), &sink1);  // heap maps
  REQUIRE_FALSE(w1.step(50));
  spill_all(f.b);  // the heap maps stay, retired, for w1
  CHECK(f.b.metrics().retired_bytes > 0);
  REQUIRE(f.b.check_accounting());
  const Image spilled = checkpoint_image(f.b, 11);
  CHECK(spilled == at_first);
  cowstate::MemoryCheckpointSink sink2;
  cowstate::CheckpointWriter w2(f.b.snapshot(12), &sink2);  // read transactions
  populate(f.b, f.s, 300, 2);                               // written to the cold tier
  load_all(f.b);                                            // erased from it
  populate(f.b, f.s, 300, 5);                               // and changed in the heap
  while (!w1.step(17)) {
  }
  while (!w2.step(23)) {
  }
  REQUIRE(w1.done());
  REQUIRE(w2.done());
  CHECK(restore_image(sink1.take()) == at_first);
  CHECK(restore_image(sink2.take()) == at_first);
  // Released: the retired heap maps go at the writer's next check.
  CHECK(f.b.metrics().retired_bytes == 0);
  REQUIRE(f.b.check_accounting());
}

TEST_CASE("TTL timestamps survive a round trip through the cold tier", "[spill][ttl]") {
  Fixture f;
  cowstate::StateOptions ttl;
  ttl.ttl = cowstate::StateTtlConfig{};
  ttl.ttl->ttl_ms = 100;
  ttl.ttl->full_snapshot_cleanup = true;  // the cold snapshot decodes and judges each value
  auto& v = f.b.value_state<VoidNamespaceSerializer, Int64Serializer>("ttl-value", -1, ttl);
  for (std::uint64_t k = 0; k < 50; ++k) {
    REQUIRE(f.b.set_current_key(k).ok());
    v.update(static_cast<std::int64_t>(k));
  }
  f.clock.advance(60);
  for (std::uint64_t k = 0; k < 25; ++k) {  // refreshed at 1060, the rest stay at 1000
    REQUIRE(f.b.set_current_key(k).ok());
    v.update(static_cast<std::int64_t>(k) + 1);
  }
  spill_all(f.b);
  load_all(f.b);
  f.clock.advance(50);  // 1110: the first 25 are live, the rest expired
  for (std::uint64_t k = 0; k < 50; ++k) {
    REQUIRE(f.b.set_current_key(k).ok());
    CHECK(v.value() == (k < 25 ? static_cast<std::int64_t>(k) + 1 : -1));
  }
}

TEST_CASE("FLIP-50's scores: spill large and cold first, load hot and small first",
          "[spill][manager]") {
  SpillOptions o = budget(1000);
  cowstate::SpillLoadManager m(o);
  using C = cowstate::SpillCandidate;
  // Over the watermark (900): large and cold out first.
  const std::vector<C> heap = {{0, 0, 100, 50, Tier::heap},
                               {0, 1, 400, 0, Tier::heap},
                               {0, 2, 400, 90, Tier::heap},
                               {1, 0, 300, 10, Tier::heap}};
  cowstate::SpillDecision d = m.decide(0, 1200, heap);
  REQUIRE(d.action == cowstate::SpillAction::spill);
  REQUIRE(d.chosen.size() == 1);  // 400 >= max(1200 - 900, 0.1 x 1200)
  CHECK(d.chosen[0].key_group == 1);
  CHECK(d.why.empty());
  d = m.decide(0, 1600, heap);
  REQUIRE(d.chosen.size() == 2);
  CHECK(d.chosen[1].state == 1);  // 0.7 x 0.67 - 0.3 x 0.11 beats 0.7 - 0.3 for the hot one
  // Not enough to spill: the decision says why.
  d = m.decide(0, 5000, {{0, 0, 100, 0, Tier::heap}});
  CHECK_FALSE(d.why.empty());
  // Under load-start (500): hot and small in first, within load-end (700).
  const std::vector<C> cold = {{0, 0, 100, 1, Tier::cold},
                               {0, 1, 150, 80, Tier::cold},
                               {0, 2, 50, 80, Tier::cold},
                               {0, 3, 300, 100, Tier::cold}};
  d = m.decide(0, 400, cold);
  REQUIRE(d.action == cowstate::SpillAction::load);
  REQUIRE(d.chosen.size() == 2);
  CHECK(d.chosen[0].key_group == 2);
  CHECK(d.chosen[1].key_group == 1);
  // Between the watermarks: a cold key group requested twice as often as the coldest heap
  // ones trades places with them (beyond FLIP-50); not when it is not that much hotter.
  const std::vector<C> mixed = {
      {0, 0, 100, 1, Tier::heap}, {0, 1, 100, 50, Tier::heap}, {0, 2, 150, 10, Tier::cold}};
  d = m.decide(0, 800, mixed);
  REQUIRE(d.action == cowstate::SpillAction::swap);
  REQUIRE(d.chosen.size() == 2);
  CHECK((d.chosen[0].key_group == 0 && d.chosen[0].tier == Tier::heap));
  CHECK((d.chosen[1].key_group == 2 && d.chosen[1].tier == Tier::cold));
  d = m.decide(0, 700, mixed);  // 200 bytes of room under the watermark: no victim needed
  REQUIRE(d.chosen.size() == 1);
  CHECK(d.chosen[0].key_group == 2);
  std::vector<C> lukewarm = mixed;
  lukewarm[2].rate = 1.5;
  CHECK(m.decide(0, 800, lukewarm).action == cowstate::SpillAction::none);
  // At most one round per trigger interval.
  o.trigger_interval_ms = 100;
  cowstate::SpillLoadManager t(o);
  t.acted(1000);
  CHECK(t.decide(1050, 1200, heap).action == cowstate::SpillAction::none);
  CHECK(t.decide(1100, 1200, heap).action == cowstate::SpillAction::spill);
  o.load_end_ratio = 0.95;
  CHECK_FALSE(cowstate::SpillLoadManager::validate(o).ok());
}

TEST_CASE("a backend under a budget spills as it grows and stays near its watermark",
          "[spill][manager]") {
  // The unbudgeted footprint first.
  Fixture heap;
  for (std::uint64_t k = 0; k < 20000; ++k) {
    REQUIRE(heap.b.set_current_key(k).ok());
    heap.s.value->update(static_cast<std::int64_t>(k));
    heap.s.list->add(static_cast<std::int64_t>(k));
  }
  const std::uint64_t full = heap.b.memory_bytes();
  Fixture f(budget(full / 3, true));
  for (std::uint64_t k = 0; k < 20000; ++k) {
    REQUIRE(f.b.set_current_key(k).ok());
    f.s.value->update(static_cast<std::int64_t>(k));
    f.s.list->add(static_cast<std::int64_t>(k));
  }
  REQUIRE(f.b.check_memory().ok());
  const cowstate::BackendMetrics m = f.b.metrics();
  INFO("footprint " << full << ", budget " << full / 3 << ", held " << m.bytes);
  CHECK(m.spills > 0);
  CHECK(m.bytes <= full / 3);
  CHECK(m.cold_entries > 0);
  CHECK(checkpoint_image(f.b) == checkpoint_image(heap.b, 2));
  REQUIRE(f.b.check_accounting());
}

TEST_CASE("a restore under a budget writes what does not fit straight to the cold tier",
          "[spill][restore]") {
  Fixture heap;
  populate(heap.b, heap.s, 5000, 4);
  const Bytes file = write_checkpoint(heap.b, 1);
  const std::uint64_t full = heap.b.memory_bytes();
  Fixture f(budget(full / 2));
  const cowstate::CheckpointInput in{"checkpoint", file};
  REQUIRE(f.b.restore({&in, 1}).ok());
  const cowstate::BackendMetrics m = f.b.metrics();
  INFO("footprint " << full << ", held " << m.bytes);
  CHECK(m.spilled_key_groups > 0);
  CHECK(m.bytes <= full / 2);
  CHECK(checkpoint_image(f.b, 2) == restore_image(file));
  REQUIRE(f.b.check_accounting());
  // A restore that fails leaves the backend as it was, cold ranges included.
  Bytes bad = file;
  bad[bad.size() / 2] ^= std::byte{1};
  const cowstate::CheckpointInput bad_in{"bad", bad};
  CHECK_FALSE(f.b.restore({&bad_in, 1}).ok());
  CHECK(checkpoint_image(f.b, 3) == restore_image(file));
  REQUIRE(f.b.check_accounting());
}

namespace {
std::vector<std::byte> bytes_of(const std::string& s) {
  std::vector<std::byte> b(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) b[i] = static_cast<std::byte>(s[i]);
  return b;
}
std::span<const std::byte> span_of(const std::vector<std::byte>& b) { return {b.data(), b.size()}; }
}  // namespace

TEST_CASE("the cold tier orders keys as memcmp does, whatever their lengths", "[spill][cold]") {
  auto store = cowstate::ColdStore::open();
  REQUIRE(store.ok());
  cowstate::ColdStore& s = **store;
  // Keys of one prefix and random bytes of 0 to 30 more, drawn from a small alphabet so that
  // many share long beginnings and differ only past 8 or 16 bytes, or only in length.
  const cowstate::ColdPrefix p = cowstate::cold_prefix(7, 3);
  std::mt19937_64 rng(11);
  std::vector<std::string> keys;
  for (int i = 0; i < 3000; ++i) {
    std::string k(reinterpret_cast<const char*>(p.data()), p.size());
    const std::size_t n = rng() % 31;
    for (std::size_t j = 0; j < n; ++j)
      k.push_back(static_cast<char>("\x00\x01\x7f\x80\xff"[rng() % 5]));
    keys.push_back(k);
  }
  std::sort(keys.begin(), keys.end());  // std::string orders as unsigned memcmp, then length
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  std::vector<std::string> shuffled = keys;
  std::shuffle(shuffled.begin(), shuffled.end(), rng);
  for (const std::string& k : shuffled) CHECK(s.insert(span_of(bytes_of(k)), span_of(bytes_of(k))));
  // Neighbouring ranges stay out of the scan.
  const auto other =
      bytes_of(std::string(reinterpret_cast<const char*>(cowstate::cold_prefix(7, 4).data()), 6));
  CHECK(s.insert(span_of(other), span_of(other)));
  std::vector<std::string> scanned;
  s.scan(p, [&](std::span<const std::byte> k, std::span<const std::byte> v) {
    scanned.emplace_back(reinterpret_cast<const char*>(p.data()), p.size());
    scanned.back().append(reinterpret_cast<const char*>(k.data()), k.size());
    CHECK(v.size() == scanned.back().size());
  });
  CHECK(scanned == keys);
  for (const std::string& k : keys) {
    std::span<const std::byte> v;
    REQUIRE(s.get(span_of(bytes_of(k)), v));
    CHECK(std::string(reinterpret_cast<const char*>(v.data()), v.size()) == k);
  }
}

TEST_CASE("the cold tier leaves no files behind, even when its process dies without closing it",
          "[spill][cold]") {
  backend_test::TempDir parent;
  cowstate::ColdStoreOptions options;
  options.parent_directory = parent.path();
  // A child process fills a store and ends without running a destructor, as a crash or a kill
  // would end it.
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    auto store = cowstate::ColdStore::open(options);
    if (!store.ok()) ::_exit(3);
    const auto k = bytes_of("a key of one table and key group");
    if (!(*store)->insert(span_of(k), span_of(k))) ::_exit(4);
    (*store)->commit();
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  CHECK(backend_test::files_in(parent.path()).empty());
  // A store open in this process works with nothing on the file system, and closes cleanly.
  {
    auto store = cowstate::ColdStore::open(options);
    REQUIRE(store.ok());
    CHECK(backend_test::files_in(parent.path()).empty());
    const auto k = bytes_of("another key");
    CHECK((*store)->insert(span_of(k), span_of(k)));
    (*store)->commit();
    std::span<const std::byte> v;
    REQUIRE((*store)->get(span_of(k), v));
    CHECK(v.size() == k.size());
  }
  CHECK(backend_test::files_in(parent.path()).empty());
}

TEST_CASE("insert_sorted appends after the last key, inserts before it, stops at a present key",
          "[spill][cold]") {
  auto store = cowstate::ColdStore::open();
  REQUIRE(store.ok());
  cowstate::ColdStore& s = **store;
  auto key = [](std::uint32_t table, std::uint8_t k) {
    const cowstate::ColdPrefix p = cowstate::cold_prefix(table, 0);
    std::vector<std::byte> b(p.begin(), p.end());
    b.push_back(std::byte{k});
    return b;
  };
  std::vector<std::vector<std::byte>> held;
  auto records = [&](std::uint32_t table, std::vector<std::uint8_t> ks) {
    std::vector<cowstate::ColdStore::Record> r;
    for (std::uint8_t k : ks) {
      held.push_back(key(table, k));
      r.push_back({span_of(held.back()), span_of(held.back())});
    }
    return r;
  };
  held.reserve(64);
  CHECK(s.insert_sorted(records(2, {1, 5, 9})) == 3);   // appended to an empty store
  CHECK(s.insert_sorted(records(3, {0, 2})) == 2);      // after everything: appended
  CHECK(s.insert_sorted(records(2, {3, 4, 10})) == 3);  // between held keys: inserted
  CHECK(s.insert_sorted(records(1, {7, 8})) == 2);      // before everything
  // Stops at the first present key and stores nothing from there on.
  CHECK(s.insert_sorted(records(2, {6, 9, 11})) == 1);
  std::vector<int> table2;
  s.scan(cowstate::cold_prefix(2, 0),
         [&](std::span<const std::byte> k, std::span<const std::byte>) {
           table2.push_back(static_cast<int>(k[0]));
         });
  CHECK(table2 == std::vector<int>{1, 3, 4, 5, 6, 9, 10});
}
