// The probe workload (probe_workload.h) through what every workload gets from sim/: fuzz
// campaigns, scenario runs, the shrinker and bounded exhaustive exploration.
#include <catch2/catch.hpp>
#include <set>
#include <string>
#include <vector>

#include "cowstate/sim/campaign.h"
#include "cowstate/sim/explore.h"
#include "cowstate/sim/run.h"
#include "cowstate/sim/scenario.h"
#include "cowstate/sim/shrink.h"

using namespace cowstate::sim;

namespace {

Scenario parse_ok(const std::string& text) {
  ParseError error;
  auto s = parse_scenario(text, "probe.scenario", &error);
  INFO(error.to_string());
  REQUIRE(s.has_value());
  return *s;
}

// The trace hashes of a campaign's runs; every run must pass.
std::vector<std::uint64_t> campaign_hashes(CampaignOptions options) {
  std::vector<std::uint64_t> hashes;
  const CampaignSummary summary =
      run_campaign(options, {},
                   [&hashes](const FinishedRun& run) {
                     INFO(run.result.check << ": " << run.result.message);
                     CHECK(run.result.outcome == Outcome::pass);
                     hashes.push_back(run.result.trace_hash);
                   },
                   {});
  CHECK(summary.failures == 0);
  CHECK(summary.runs == options.runs);
  CHECK(summary.totals.ops == options.runs * options.ops);
  return hashes;
}

}  // namespace

TEST_CASE("fuzz campaigns of the probe workload pass and repeat their trace hashes",
          "[probe][fuzz]") {
  CampaignOptions options;
  options.workload = find_workload("probe");
  REQUIRE(options.workload != nullptr);
  options.seed = 7;
  options.runs = 200;
  options.ops = 60;
  for (const char* strategy : {"random", "pct"}) {
    options.strategy = strategy;
    const std::vector<std::uint64_t> first = campaign_hashes(options);
    CHECK(first == campaign_hashes(options));
    CHECK(std::set<std::uint64_t>(first.begin(), first.end()).size() == first.size());
  }
  const CaseSpec spec = case_for_run(options, 3);
  std::string error;
  const auto parsed = parse_case(format_case(spec), "probe.case", &error);
  INFO(error);
  REQUIRE(parsed.has_value());
  CHECK(parsed->workload == options.workload);
  CHECK(parsed->options->same_as(*spec.options));
  CHECK(run_case(*parsed).trace_hash == run_case(spec).trace_hash);
}

TEST_CASE("a probe scenario parses, prints back and replays", "[probe][run]") {
  const Scenario s = parse_ok(R"(config capacity=1 workload=probe
writer: put k=1 v=10 ; put k=2 v=20 ; put k=1 v=11 ; put_and_get_old k=3 v=30
writer: remove k=2 ; remove_and_get_old k=3 ; get k=1 ; contains k=2
expect live = {1:11}
)");
  const std::string printed = print_scenario(s);
  CHECK(printed.find("config capacity=1 workload=probe\n") != std::string::npos);
  CHECK(parse_ok(printed) == s);
  const RunResult r = run_scenario(s);
  INFO(r.check << ": " << r.message);
  CHECK(r.outcome == Outcome::pass);
  CHECK(r.stats.ops == 8);

  const RunResult wrong =
      run_scenario(parse_ok("config workload=probe\n"
                            "writer: put k=1 v=10\nexpect live = {1:11}\n"));
  CHECK(wrong.outcome == Outcome::failure);
  CHECK(wrong.check == "expect");
  const RunResult invalid =
      run_scenario(parse_ok("config workload=probe\nwriter: put k=1 v=1 ; snapshot s1\n"));
  CHECK(invalid.outcome == Outcome::invalid);
  ParseError error;
  CHECK_FALSE(parse_scenario("config workload=nope\nwriter: get k=1\n", "x", &error));
  CHECK(error.message ==
        "expected a workload (map, backend, probe, probe_skip_remove), found 'nope'");
  // The probe speaks the common language only: none of the map's bookkeeping expectations,
  // no keyed states, no TTL.
  CHECK_FALSE(parse_scenario("config workload=probe\nexpect versions map=0 h=0\n", "x", &error));
  CHECK(error.message == "expected an expectation of the probe workload, found 'versions'");
  CHECK_FALSE(parse_scenario("config workload=probe ttl=5\n", "x", &error));
  CHECK(error.message ==
        "expected TTL settings in a workload of keyed state (backend; TTL is a property of keyed "
        "state), found a TTL setting in a probe scenario");
}

TEST_CASE("a planted probe bug shrinks to a put and a remove that fail the same way",
          "[probe][shrink]") {
  CampaignOptions options;
  options.workload = find_workload("probe_skip_remove");
  options.runs = 20;
  options.ops = 60;
  const CampaignSummary summary = run_campaign(options, {}, {}, {});
  REQUIRE(summary.first_failure.has_value());
  const CaseSpec& spec = summary.first_failure->spec;
  CHECK(summary.first_failure->result.check == "live");

  const RunConfig config = config_for_case(spec);
  auto strategy = make_strategy(spec.strategy, spec.pct_depth, case_ops(spec));
  const ShrinkResult shrunk = shrink_run(config, *strategy);
  INFO(shrunk.not_reproduced);
  REQUIRE(shrunk.reproduced);
  CHECK(shrunk.signature.check == "live");
  CHECK(shrunk.steps_after == 2);
  CHECK(shrunk.steps_after < shrunk.steps_before);
  const std::string printed = print_scenario(shrunk.scenario);
  INFO(printed);
  CHECK(printed.find(" workload=probe_skip_remove\n") != std::string::npos);
  const Scenario replay = parse_ok(printed);
  CHECK(run_scenario(replay).signature() == shrunk.signature);
  Scenario fixed = replay;
  fixed.config.workload = "probe";  // the same steps without the planted bug pass
  CHECK(run_scenario(fixed).outcome == Outcome::pass);
}

// The writer's steps: the put stops once at map.insert_new, where the reader may not run
// (it reads between operations only), so put, remove and the writer's end are 3 blocks;
// the reader's two gets and its end are 3 more. A schedule is an interleaving of the two
// block sequences, C(6,3) = 20 of them. Preemptions: a schedule of r runs (maximal blocks
// of one task) preempts r-2 times, as its last switch follows the end of a task. Runs of
// 3 blocks each: r=2 in 2 ways, r=3 in 4, r=4 in 8, r=5 in 4, r=6 in 2.
TEST_CASE("exploring a free probe scenario counts every interleaving of writer and reader",
          "[probe][explore]") {
  const Scenario s = parse_ok(
      "config workload=probe schedule=free\n"
      "writer: put k=1 v=1 ; remove k=1\n");
  RunConfig config;
  config.scenario = &s;
  ExploreOptions options;
  options.dedup = false;
  const std::pair<std::uint32_t, std::uint64_t> bounds[] = {{0, 2}, {1, 6}, {2, 14}, {4, 20}};
  for (const auto& [bound, schedules] : bounds) {
    options.preemption_bound = bound;
    const ExploreResult r = explore(config, options);
    INFO("bound " << bound);
    CHECK(r.complete);
    CHECK(r.schedules == schedules);
    CHECK(r.steps == schedules * 7);
    CHECK(r.failures.empty());
  }
  options.dedup = true;
  const ExploreResult deduped = explore(config, options);
  CHECK(deduped.complete);
  CHECK(deduped.schedules <= 20);
  CHECK(deduped.failures.empty());

  Scenario buggy = s;
  buggy.config.workload = "probe_skip_remove";
  RunConfig buggy_config;
  buggy_config.scenario = &buggy;
  options.dedup = false;
  const ExploreResult failing = explore(buggy_config, options);
  CHECK(failing.failures.size() == failing.schedules);
}
