// Tests of the copy-on-write coverage report (cowstate/sim/coverage.h): a scenario whose
// copies are known counts exactly those, reports add runs in any order and keep the lowest
// first run, and a reason no run hit is listed as such.
#include "cowstate/sim/coverage.h"

#include <catch2/catch.hpp>
#include <string>

#include "cowstate/sim/campaign.h"
#include "cowstate/sim/run.h"
#include "cowstate/sim/scenario.h"
#include "cowstate/sim/strategy.h"
#include "cowstate/sim/workload.h"
#include "source_scenario.h"

using namespace cowstate::sim;

namespace {

Scenario load(const std::string& relative) { return load_source_scenario(relative); }

std::uint64_t hits(const CoverageCounts& c, const char* name) {
  const auto i = coverage_index(name);
  REQUIRE(i.has_value());
  return c.hits[*i];
}

RunResult run_scenario(const Scenario& s) {
  RunConfig config;
  config.seed = s.config.seed;
  config.scenario = &s;
  auto strategy = make_random_strategy();
  return run_once(config, *strategy);
}

}  // namespace

TEST_CASE("a scenario's coverage counts exactly the copies, retirements and yields it makes",
          "[sim][coverage]") {
  // chain-prefix-copy: k=1 and k=5 share a bucket (identity hash, capacity 4); the put of
  // k=1 after snapshot s1 copies the chain prefix up to k=1 once (two entries, one yield
  // point between them) and retires k=1's old state; three puts insert new entries, the
  // last paused at map.insert_new. Nothing rehashes, no head is copied alone, no state is
  // handed out mutably and nothing is cancelled.
  const RunResult r = run_scenario(load("scenarios/smoke/chain-prefix-copy.scenario"));
  REQUIRE(r.outcome == Outcome::pass);
  const CoverageCounts& c = r.stats.coverage;
  CHECK(hits(c, "cow.chain_prefix_copy") == 1);
  CHECK(hits(c, "map.copy_chain_prefix") == 1);
  CHECK(hits(c, "cow.retire") == 1);
  // Three puts, and the restore check loading s1's two entries into a fresh map.
  CHECK(hits(c, "map.insert_new") == 5);
  CHECK(hits(c, "cow.entry_copy") == 0);
  CHECK(hits(c, "cow.state_copy") == 0);
  CHECK(hits(c, "cow.rehash_copy") == 0);
  CHECK(hits(c, "cow.snapshot_during_rehash") == 0);
  CHECK(hits(c, "cow.cancel_mid_step") == 0);
  CHECK(hits(c, "fault.power_loss") == 0);
  // Every yield point taken is counted under its name, and nothing else counts as one.
  std::uint64_t yields = 0;
  for (std::size_t i = 0; i < kCoverageProbeCount; ++i) {
    if (kCoverageProbes[i].kind == CoverageKind::yield) yields += c.hits[i];
  }
  CHECK(yields == r.stats.yields);
}

TEST_CASE("a backend scenario counts its faults: power losses, crash states, write faults",
          "[sim][coverage][backend]") {
  const RunResult r = run_scenario(load("scenarios/smoke/backend-write-faults.scenario"));
  REQUIRE(r.outcome == Outcome::pass);
  // Its lines: c2 `lose write 1`, c3 `misdirect manifest to 8`, c4 `misdirect write 1 to
  // 4`, and two `power_loss` lines; no I/O error is armed and no read fault.
  const CoverageCounts& c = r.stats.coverage;
  CHECK(hits(c, "fault.lost_write") == 1);
  CHECK(hits(c, "fault.misdirected_write") == 2);
  CHECK(hits(c, "fault.power_loss") == 2);
  CHECK(hits(c, "fault.io_error") == 0);
  CHECK(hits(c, "fault.read_flip") == 0);
}

TEST_CASE("a report keeps the lowest run that hit a reason, whatever order runs come in",
          "[sim][coverage]") {
  const std::size_t entry = *coverage_index("cow.entry_copy");
  const std::size_t reclaim = *coverage_index("cow.reclaim");
  CoverageCounts a, b;
  a.hits[entry] = 2;
  b.hits[entry] = 5;
  b.hits[reclaim] = 1;
  CoverageReport forward, backward;
  forward.add(3, 103, a);
  forward.add(7, 107, b);
  backward.add(7, 107, b);
  backward.add(3, 103, a);
  const CoverageReach all = [] {
    CoverageReach r{};
    r.fill(true);
    return r;
  }();
  CHECK(forward.to_json(all, "run") == backward.to_json(all, "run"));
  const nlohmann::json j = forward.to_json(all, "run");
  REQUIRE(j.size() == kCoverageProbeCount);
  CHECK(j[entry]["hits"] == 7);
  CHECK(j[entry]["runs"] == 2);
  CHECK(j[entry]["first_run"] == 3);
  CHECK(j[entry]["first_seed"] == 103);
  CHECK(j[reclaim]["first_run"] == 7);
  CHECK(forward.runs_hitting(reclaim) == 1);
}

TEST_CASE("a reason no run hit is listed as never hit, one the workload cannot reach is not",
          "[sim][coverage]") {
  const std::size_t entry = *coverage_index("cow.entry_copy");
  const std::size_t power = *coverage_index("fault.power_loss");
  CoverageCounts c;
  c.hits[entry] = 1;
  CoverageReport report;
  report.add(0, 1, c);
  const CoverageReach map = coverage_reach(default_workload().scenario_language());
  CHECK_FALSE(map[power]);
  CHECK(map[entry]);
  const nlohmann::json j = report.to_json(map, "run");
  CHECK(j[power]["reachable"] == false);
  const std::size_t chain = *coverage_index("cow.chain_prefix_copy");
  CHECK(j[chain]["hits"] == 0);
  CHECK_FALSE(j[chain].contains("first_run"));
  const std::string text = report.to_text(map, "run");
  CHECK_THAT(text, Catch::Contains("cow.chain_prefix_copy       copy  NEVER HIT"));
  CHECK_THAT(text, Catch::Contains("fault.power_loss            fault -  (this workload cannot"));
  CHECK(report.never_hit(map) > 0);
  CHECK_THAT(text, Catch::Contains(std::to_string(report.never_hit(map)) +
                                   " reachable reasons never hit"));
}

TEST_CASE("probe counts read back from JSON, unknown names and bad counts are refused",
          "[sim][coverage]") {
  CoverageCounts c;
  c.hits[*coverage_index("cow.retire")] = 4;
  c.hits[*coverage_index("fault.crash_state")] = 1;
  std::string error;
  const auto back = CoverageCounts::from_json(c.to_json(), &error);
  REQUIRE(back.has_value());
  CHECK(*back == c);
  CHECK_FALSE(CoverageCounts::from_json({{"cow.spill", 1}}, &error).has_value());
  CHECK(error == "unknown probe 'cow.spill' (not in this build's catalog)");
  CHECK_FALSE(CoverageCounts::from_json({{"cow.retire", -1}}, &error).has_value());
  CHECK(error == "probe 'cow.retire' has -1 hits (expected an unsigned integer)");
}

TEST_CASE("the scenario language's yield points are the catalog's", "[sim][coverage]") {
  std::vector<std::string> catalog;
  for (const CoverageProbe& p : kCoverageProbes) {
    if (p.kind == CoverageKind::yield) catalog.emplace_back(p.name);
  }
  CHECK(catalog == yield_points());
  CHECK(catalog.size() == 12);
}
