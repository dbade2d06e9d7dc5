// Tests of the simulator itself: the PRNG pinned by golden values, fibers, determinism
// (same seed, same trace), sharding, case files, strategies and yield points.
#include <catch2/catch.hpp>
#include <set>
#include <string>
#include <vector>

#include "cowstate/sim/campaign.h"
#include "cowstate/sim/explore.h"
#include "cowstate/sim/fiber.h"
#include "cowstate/sim/isolation.h"  // beside map_options.h: one Op, no clash
#include "cowstate/sim/map_options.h"
#include "cowstate/sim/random.h"
#include "cowstate/sim/run.h"
#include "cowstate/sim/strategy.h"
#include "cowstate/sim/workload.h"

using namespace cowstate::sim;

TEST_CASE("SplitMix64 and xoshiro256** produce their golden values", "[sim][random]") {
  SplitMix64 sm(0);  // the reference sequence for seed 0 starts with 0xe220a8397b1dcdaf
  CHECK(sm.next() == 16294208416658607535ull);
  CHECK(sm.next() == 7960286522194355700ull);
  CHECK(sm.next() == 487617019471545679ull);
  Prng p(42);
  CHECK(p.next() == 1546998764402558742ull);
  CHECK(p.next() == 6990951692964543102ull);
  CHECK(p.next() == 12544586762248559009ull);
  Prng q(7);
  std::vector<std::uint64_t> draws;
  for (int i = 0; i < 8; ++i) draws.push_back(q.below(10));
  CHECK(draws == std::vector<std::uint64_t>{7, 2, 8, 9, 9, 8, 0, 1});
  CHECK(derive_seed(1, 2) == 17976013367585798959ull);
}

TEST_CASE("below(n) stays in range and reaches every value", "[sim][random]") {
  Prng p(3);
  std::set<std::uint64_t> seen;
  for (int i = 0; i < 1000; ++i) {
    const std::uint64_t x = p.below(7);
    REQUIRE(x < 7);
    seen.insert(x);
  }
  CHECK(seen.size() == 7);
  CHECK(p.below(1) == 0);
}

TEST_CASE("fibers interleave, propagate exceptions and unwind when destroyed", "[sim][fiber]") {
  std::vector<std::string> log;
  Fiber a([&] {
    for (int i = 0; i < 3; ++i) {
      log.push_back("a" + std::to_string(i));
      Fiber::yield();
    }
  });
  Fiber b([&] {
    log.push_back("b");
    Fiber::yield();
    throw std::runtime_error("boom");
  });
  a.resume();
  b.resume();
  a.resume();
  CHECK_THROWS_WITH(b.resume(), "boom");
  CHECK(b.finished());
  a.resume();
  a.resume();
  CHECK(a.finished());
  CHECK(log == std::vector<std::string>{"a0", "b", "a1", "a2"});
  bool unwound = false;
  {
    struct Flag {
      bool* f;
      ~Flag() { *f = true; }
    };
    Fiber c([&] {
      Flag flag{&unwound};
      for (;;) Fiber::yield();
    });
    c.resume();
  }
  CHECK(unwound);
  CHECK_FALSE(Fiber::in_fiber());
  Fiber::yield();  // outside a fiber: nothing happens
}

TEST_CASE("workload options print and parse back, and bad options name their column",
          "[sim][workload]") {
  for (std::uint64_t seed = 1; seed < 50; ++seed) {
    const MapWorkloadOptions o = MapWorkloadOptions::swarm(seed, 123, 2);
    std::string error;
    auto back = MapWorkloadOptions::parse(o.to_string(), &error);
    REQUIRE(back.has_value());
    CHECK(*back == o);
  }
  std::string error;
  CHECK_FALSE(MapWorkloadOptions::parse("keys=4 colour=blue", &error).has_value());
  CHECK(error == "column 8: unknown option 'colour'");
  CHECK_FALSE(MapWorkloadOptions::parse("keys=x", &error).has_value());
  CHECK(error == "column 6: bad value for 'keys': 'x'");
  CHECK_FALSE(MapWorkloadOptions::parse("keys=0", &error).has_value());
  CHECK(error.find("out of range") != std::string::npos);
}

TEST_CASE("the simulator writer draws from the one list of map operations", "[sim][workload]") {
  // Every map operation but the release (the releaser task's) is a writer operation, named as
  // the scenario action it becomes, and weighted by the same table the isolation driver uses.
  for (const OpKind op : kWriterOps) {
    CAPTURE(to_text(op));
    const std::string name = op_word(op);
    CHECK(name == (op == OpKind::snapshot_start ? std::string("snapshot") : to_text(op)));
  }
  // Each kind's weight is the field of its name, and selects that kind only.
  MapWorkloadOptions o;
  OpWeights& w = o.weights;
  CHECK(&weight_of(w, OpKind::put) == &w.put);
  CHECK(&weight_of(w, OpKind::put_and_get_old) == &w.put_and_get_old);
  CHECK(&weight_of(w, OpKind::remove) == &w.remove);
  CHECK(&weight_of(w, OpKind::remove_and_get_old) == &w.remove_and_get_old);
  CHECK(&weight_of(w, OpKind::get) == &w.get);
  CHECK(&weight_of(w, OpKind::contains) == &w.contains);
  CHECK(&weight_of(w, OpKind::get_mutable) == &w.get_mutable);
  CHECK(&weight_of(w, OpKind::transform) == &w.transform);
  CHECK(&weight_of(w, OpKind::snapshot_start) == &w.snapshot_start);
  CHECK(&weight_of(w, OpKind::snapshot_release) == &w.snapshot_release);
  CHECK(&weight_of(w, OpKind::visit) == &w.visit);
  for (const OpKind op : kOpKinds) {
    CAPTURE(to_text(op));
    for (const OpKind other : kOpKinds) weight_of(o.weights, other) = 0;
    weight_of(o.weights, op) = 3;
    CHECK(total_weight(o.weights) == 3);
    CHECK(kind_at(o.weights, 0) == op);
    CHECK(kind_at(o.weights, 2) == op);
  }
  o.weights.snapshot_release = 0;
  o.weights.put = 7;
  std::string error;
  CHECK(MapWorkloadOptions::parse(o.to_string(), &error) == o);
}

TEST_CASE("the swarm switches operations off and varies capacities across seeds",
          "[sim][workload]") {
  std::size_t switched_off = 0, tiny = 0, capped = 0, identity = 0;
  for (std::uint64_t seed = 1; seed <= 200; ++seed) {
    const MapWorkloadOptions o = MapWorkloadOptions::swarm(seed, 100, 1);
    for (const OpKind op : kWriterOps) switched_off += weight_of(o.weights, op) == 0;
    CHECK(o.weights.snapshot_release == 0);
    tiny += o.initial_capacity <= 2;
    capped += o.max_capacity <= 8;
    identity += o.identity_hash;
    CHECK(o.weights.put > 0);
    CHECK(o.weights.snapshot_start > 0);
  }
  CHECK(switched_off > 100);
  CHECK(tiny > 20);
  CHECK(capped > 20);
  CHECK(identity > 40);
}

namespace {
RunResult run_seed(std::uint64_t seed, const std::string& strategy, bool keep_trace) {
  CampaignOptions options;
  options.seed = seed;
  options.ops = 150;
  options.strategy = strategy;
  return run_case(case_for_run(options, 0), keep_trace);
}
}  // namespace

TEST_CASE("the same seed gives a byte-identical trace", "[sim][determinism]") {
  for (const char* strategy : {"random", "pct"}) {
    for (std::uint64_t seed = 1; seed <= 12; ++seed) {
      const RunResult a = run_seed(seed, strategy, true);
      const RunResult b = run_seed(seed, strategy, true);
      INFO("strategy " << strategy << " seed " << seed);
      REQUIRE(a.outcome == Outcome::pass);
      if (a.trace_hash != b.trace_hash) {
        std::size_t i = 0;
        while (i < a.trace.size() && i < b.trace.size() && a.trace[i] == b.trace[i]) ++i;
        FAIL("traces differ first at line " << i << ":\n  "
                                            << (i < a.trace.size() ? a.trace[i] : "<end>") << "\n  "
                                            << (i < b.trace.size() ? b.trace[i] : "<end>"));
      }
      CHECK(a.trace == b.trace);
      CHECK(a.schedule == b.schedule);
    }
  }
}

TEST_CASE("different seeds give different traces", "[sim][determinism]") {
  std::set<std::uint64_t> hashes;
  for (std::uint64_t seed = 1; seed <= 20; ++seed)
    hashes.insert(run_seed(seed, "random", false).trace_hash);
  CHECK(hashes.size() == 20);
}

TEST_CASE("runs yield inside production operations and check snapshots", "[sim][run]") {
  RunStats total;
  for (std::uint64_t seed = 1; seed <= 30; ++seed) {
    const RunResult r = run_seed(seed, "random", false);
    REQUIRE(r.outcome == Outcome::pass);
    total.yields += r.stats.yields;
    total.snapshots_checked += r.stats.snapshots_checked;
    total.entries_checked += r.stats.entries_checked;
    total.deep_checks += r.stats.deep_checks;
  }
  CHECK(total.yields > 100);
  CHECK(total.snapshots_checked > 30);
  CHECK(total.entries_checked > 1000);
  CHECK(total.deep_checks > 100);
}

TEST_CASE("the replay strategy reruns a recorded schedule exactly", "[sim][replay]") {
  CampaignOptions options;
  options.seed = 77;
  options.ops = 120;
  const CaseSpec spec = case_for_run(options, 0);
  const RunResult original = run_case(spec, true);
  auto replay = make_replay_strategy(original.schedule);
  RunConfig config = config_for_case(spec);
  config.keep_trace = true;
  const RunResult again = run_once(config, *replay);
  CHECK(again.trace_hash == original.trace_hash);
  CHECK(again.schedule == original.schedule);
}

TEST_CASE("shards together run exactly the unsharded campaign", "[sim][campaign]") {
  auto seeds_of = [](std::uint32_t index, std::uint32_t count) {
    CampaignOptions o;
    o.seed = 1000;
    o.runs = 13;
    o.ops = 40;
    o.shard_index = index;
    o.shard_count = count;
    std::multiset<std::pair<std::uint64_t, std::uint64_t>> seen;  // (seed, trace hash)
    run_campaign(
        o, nullptr,
        [&](const FinishedRun& r) {
          seen.insert({r.spec.seed, r.result.trace_hash});
        },
        nullptr);
    return seen;
  };
  const auto whole = seeds_of(0, 1);
  CHECK(whole.size() == 13);
  std::multiset<std::pair<std::uint64_t, std::uint64_t>> merged;
  for (std::uint32_t i = 0; i < 3; ++i) {
    const auto part = seeds_of(i, 3);
    merged.insert(part.begin(), part.end());
  }
  CHECK(merged == whole);
}

// cowstate fuzz and mutants set their crash hint in on_start, so it names the run in flight.
TEST_CASE("a campaign announces each run's case before running it", "[sim][campaign]") {
  CampaignOptions o;
  o.seed = 500;
  o.runs = 4;
  o.ops = 30;
  std::vector<std::string> events;
  run_campaign(
      o, [&](const CaseSpec& c) { events.push_back("start " + std::to_string(c.seed)); },
      [&](const FinishedRun& r) { events.push_back("end " + std::to_string(r.spec.seed)); },
      nullptr);
  CHECK(events == std::vector<std::string>{"start 500", "end 500", "start 501", "end 501",
                                           "start 502", "end 502", "start 503", "end 503"});
}

TEST_CASE("case files round trip and bad ones name the line", "[sim][case]") {
  CaseSpec spec;
  spec.seed = 99;
  spec.strategy = "pct";
  spec.pct_depth = 4;
  spec.options = make_options(MapWorkloadOptions::swarm(99, 50, 3));
  spec.outcome = "failure";
  spec.check = "image";
  spec.trace_hash = 12345;
  std::string error;
  auto back = parse_case(format_case(spec), "x.case", &error);
  REQUIRE(back.has_value());
  CHECK(back->seed == 99);
  CHECK(back->strategy == "pct");
  CHECK(back->pct_depth == 4);
  CHECK(back->workload == spec.workload);
  CHECK(back->options->same_as(*spec.options));
  CHECK(back->check == "image");
  CHECK(back->trace_hash == 12345);
  CHECK_FALSE(parse_case("seed 1\nstrategy fast\n", "y.case", &error).has_value());
  CHECK(error == "y.case:2: expected strategy random or pct, found 'fast'");
  CHECK_FALSE(parse_case("seed one\n", "z.case", &error).has_value());
  CHECK(error == "z.case:1: expected a seed (unsigned integer), found 'one'");
  CHECK_FALSE(parse_case("# only a comment\nseed 3\n", "w.case", &error).has_value());
  CHECK(error == "w.case:0: missing options line");
  // Bytes from a binary or mis-encoded file are quoted as hex, not copied into the message.
  CHECK_FALSE(parse_case("\xff\xfe x\n", "b.case", &error).has_value());
  CHECK(error ==
        "b.case:1: unknown key '\\xff\\xfe' (expected version, mutant, seed, strategy, "
        "pct_depth, workload, options, outcome, check or trace_hash)");
}

namespace {
RunConfig small_config() {
  RunConfig config;
  config.seed = 5;
  MapWorkloadOptions w;
  w.ops_max = 12;
  w.keys = 2;
  w.namespaces = 1;
  w.initial_capacity = 2;
  w.min_capacity = 2;
  w.identity_hash = true;
  w.live_snapshots_max = 1;
  w.step_entries_max = 1;
  w.cancel_percent = 50;
  w.weights = {.put = 6,
               .put_and_get_old = 0,
               .remove = 3,
               .remove_and_get_old = 0,
               .get = 1,
               .contains = 0,
               .get_mutable = 2,
               .transform = 0,
               .snapshot_start = 6,
               .snapshot_release = 0,
               .visit = 0};
  config.workload = &default_workload();
  config.options = make_options(w);
  return config;
}
}  // namespace

TEST_CASE("bounded exhaustive exploration covers the space and dedup prunes equivalent states",
          "[sim][explore]") {
  ExploreOptions with;
  with.preemption_bound = 2;
  with.max_schedules = 20000;
  const ExploreResult deduped = explore(small_config(), with);
  ExploreOptions without = with;
  without.dedup = false;
  const ExploreResult full = explore(small_config(), without);
  INFO("dedup: " << deduped.schedules << " schedules, " << deduped.pruned
                 << " pruned; full: " << full.schedules);
  CHECK(deduped.complete);
  CHECK(full.complete);
  CHECK(deduped.failures.empty());
  CHECK(full.failures.empty());
  CHECK(full.schedules > 10);
  CHECK(deduped.pruned > 0);
  CHECK(deduped.schedules < full.schedules);
  ExploreOptions none = with;
  none.preemption_bound = 0;
  const ExploreResult serial = explore(small_config(), none);
  CHECK(serial.complete);
  CHECK(serial.schedules < deduped.schedules);
}

namespace {
// The shards 0..count-1 of one split exploration, their counts added up.
ExploreResult explore_shards(const ExploreOptions& options, std::uint32_t count) {
  ExploreResult sum;
  sum.complete = true;
  for (std::uint32_t index = 0; index < count; ++index) {
    ExploreOptions shard = options;
    shard.shard_index = index;
    shard.shard_count = count;
    const ExploreResult r = explore(small_config(), shard);
    sum.schedules += r.schedules;
    sum.pruned += r.pruned;
    sum.steps += r.steps;
    sum.complete = sum.complete && r.complete;
    sum.subtrees_total = r.subtrees_total;
    for (const ExploredSubtree& t : r.subtrees) {
      CHECK(t.index % count == index);
      sum.subtrees.push_back(t);
    }
  }
  return sum;
}
}  // namespace

TEST_CASE("the shards of a split exploration add up to the unsharded run with that split",
          "[sim][explore]") {
  ExploreOptions split;
  split.preemption_bound = 2;
  split.max_schedules = 20000;
  split.split_depth = 2;
  const ExploreResult whole = explore(small_config(), split);
  REQUIRE(whole.complete);
  REQUIRE(whole.subtrees_total > 3);
  CHECK(whole.subtrees.size() == whole.subtrees_total);
  CHECK(whole.discovery_runs == 0);
  for (const std::uint32_t count : {2u, 3u, 7u}) {
    INFO(count << " shards");
    const ExploreResult sum = explore_shards(split, count);
    CHECK(sum.complete);
    CHECK(sum.subtrees.size() == whole.subtrees_total);
    CHECK(sum.subtrees_total == whole.subtrees_total);
    CHECK(sum.schedules == whole.schedules);
    CHECK(sum.pruned == whole.pruned);
    CHECK(sum.steps == whole.steps);
  }
  // Without dedup nothing is pruned, so the split does not change what is explored: the
  // shards add up to the plain exploration of the whole space.
  ExploreOptions plain = split;
  plain.split_depth = 0;
  plain.dedup = false;
  split.dedup = false;
  const ExploreResult full = explore(small_config(), plain);
  const ExploreResult sum = explore_shards(split, 3);
  CHECK(sum.schedules == full.schedules);
  CHECK(sum.steps == full.steps);
  CHECK(sum.pruned == 0);
}
