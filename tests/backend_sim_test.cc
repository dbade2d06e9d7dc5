// The backend simulation (sim/src/backend/simulation.cc): determinism, what a campaign exercises,
// recorded runs replayed as scenarios, shrinking a backend failure, and scenario runs.
#include <catch2/catch.hpp>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cowstate/sim/backend_options.h"
#include "cowstate/sim/campaign.h"
#include "cowstate/sim/explore.h"
#include "cowstate/sim/run.h"
#include "cowstate/sim/scenario.h"
#include "cowstate/sim/shrink.h"

using namespace cowstate::sim;

namespace {

CaseSpec backend_case(std::uint64_t seed, const std::string& strategy, std::uint32_t ops = 150) {
  CampaignOptions options;
  options.seed = seed;
  options.ops = ops;
  options.strategy = strategy;
  options.workload = find_workload("backend");
  return case_for_run(options, 0);
}

Scenario parse_ok(const std::string& text) {
  ParseError error;
  auto s = parse_scenario(text, "b.scenario", &error);
  INFO(error.to_string());
  REQUIRE(s.has_value());
  return *s;
}

bool traced(const RunResult& r, const std::string& what) {
  for (const std::string& line : r.trace) {
    if (line.find(what) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("the same seed gives the same backend trace and different seeds different ones",
          "[sim][backend][determinism]") {
  std::set<std::uint64_t> hashes;
  for (const char* strategy : {"random", "pct"}) {
    for (std::uint64_t seed = 1; seed <= 8; ++seed) {
      const CaseSpec spec = backend_case(seed, strategy);
      const RunResult a = run_case(spec, true);
      const RunResult b = run_case(spec, true);
      INFO(strategy << " seed " << seed << ": " << a.message);
      REQUIRE(a.outcome == Outcome::pass);
      CHECK(a.trace_hash == b.trace_hash);
      CHECK(a.trace == b.trace);
      CHECK(a.schedule == b.schedule);
      hashes.insert(a.trace_hash);
    }
  }
  CHECK(hashes.size() == 16);
}

TEST_CASE("backend runs complete, fail and cancel checkpoints and restore every complete one",
          "[sim][backend][run]") {
  RunStats total;
  bool injected = false, cancelled = false;
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    const RunResult r = run_case(backend_case(seed, "random"), true);
    INFO("seed " << seed << ": " << r.check << ": " << r.message);
    REQUIRE(r.outcome == Outcome::pass);
    total.snapshots += r.stats.snapshots;
    total.snapshots_checked += r.stats.snapshots_checked;
    total.entries_checked += r.stats.entries_checked;
    injected = injected || traced(r, "injected I/O error");
    cancelled = cancelled || traced(r, "cancelled after");
  }
  CHECK(total.snapshots_checked > 40);
  CHECK(total.snapshots > total.snapshots_checked);  // some failed or were cancelled
  CHECK(total.entries_checked > 10000);
  CHECK(injected);
  CHECK(cancelled);
}

TEST_CASE("a recorded backend run written as a scenario replays the same trace",
          "[sim][backend][shrink]") {
  for (std::uint64_t seed = 1; seed <= 10; ++seed) {
    const CaseSpec spec = backend_case(seed, seed % 2 == 0 ? "pct" : "random", 100);
    RunConfig config = config_for_case(spec);
    config.record = true;
    config.keep_trace = true;
    auto strategy = make_strategy(spec.strategy, spec.pct_depth, case_ops(spec));
    const RunResult recorded = run_once(config, *strategy);
    REQUIRE(recorded.outcome == Outcome::pass);
    const std::optional<Scenario> recorded_scenario = to_scenario(config, recorded);
    REQUIRE(recorded_scenario.has_value());
    const Scenario& scenario = *recorded_scenario;
    CHECK(scenario.config.workload == "backend");
    const std::string text = print_scenario(scenario);
    ParseError error;
    auto parsed = parse_scenario(text, "recorded", &error);
    INFO("seed " << seed << ": " << error.to_string() << "\n" << text);
    REQUIRE(parsed.has_value());
    CHECK(*parsed == scenario);
    const RunResult replayed = run_scenario(*parsed, true);
    INFO(replayed.message);
    REQUIRE(replayed.outcome == Outcome::pass);
    CHECK(replayed.stats.ops == recorded.stats.ops);
    CHECK(replayed.stats.snapshots_checked == recorded.stats.snapshots_checked);
    // The bodies agree line for line (the header line and step numbers differ).
    auto body = [](const RunResult& r) {
      std::vector<std::string> out;
      for (std::size_t i = 1; i < r.trace.size(); ++i) {
        out.push_back(r.trace[i].substr(r.trace[i].find(' ') + 1));
      }
      return out;
    };
    CHECK(body(replayed) == body(recorded));
  }
}

TEST_CASE("an injected I/O error fails only its checkpoint and the previous one still restores",
          "[sim][backend][scenario]") {
  const Scenario s = parse_ok(R"(config workload=backend
writer: value s=count k=1 update 1
writer: checkpoint c1
c1: step all
writer: value s=count k=1 update 2
writer: checkpoint c2
c2: fail at write 3
c2: step all
expect latest c1
expect c1 s=count = {1:1}
expect c2 s=count = {1:2}
)");
  const RunResult r = run_scenario(s, true);
  INFO(r.check << ": " << r.message);
  CHECK(r.outcome == Outcome::pass);
  CHECK(r.stats.snapshots_checked == 1);
  CHECK(traced(r, "c2 failed: writing checkpoint 2 at byte"));
  CHECK(traced(r, "injected I/O error (operation"));
}

TEST_CASE("a wrong backend expectation fails at `expect` and names what production code holds",
          "[sim][backend][scenario]") {
  const Scenario s = parse_ok(R"(config workload=backend
writer: value s=count k=1 update 1 ; value s=count k=3 update 3
writer: checkpoint c1
c1: step all
expect c1 into 0-3 s=count = {1:1}
)");
  const RunResult r = run_scenario(s);
  CHECK(r.outcome == Outcome::failure);
  CHECK(r.check == "expect");
  CHECK(r.failed_line == 5);
  CHECK(r.message == "b.scenario:5: c1 into 0-3 count is {3:3} by the model, expected {1:1}");
  const RunResult invalid = run_scenario(parse_ok(R"(config workload=backend
writer: checkpoint c1
writer: restore c1 into 0-3
)"));
  CHECK(invalid.outcome == Outcome::invalid);
  CHECK(invalid.message.find("b.scenario:3: c1 is not a complete checkpoint") == 0);
}

TEST_CASE("backend runs with a TTL move the clock onto expiry instants and check every kind",
          "[sim][backend][ttl][run]") {
  std::size_t with_ttl = 0, on_instant = 0, full_snapshot = 0, drained = 0;
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    for (const char* strategy : {"random", "pct"}) {
      const CaseSpec spec = backend_case(seed, strategy);
      const RunResult r = run_case(spec, true);
      INFO("seed " << seed << " " << strategy << ": " << r.check << ": " << r.message);
      REQUIRE(r.outcome == Outcome::pass);
      if (options_of<BackendWorkloadOptions>(*spec.options).ttl_ms == 0) {
        CHECK_FALSE(traced(r, "clock advance"));
        continue;
      }
      ++with_ttl;
      // PCT may give the clock the lowest priority: it then moves only at the end.
      if (std::string(strategy) == "random") CHECK(traced(r, "clock advance"));
      // The last three operations drive cleanup over every entry of each TTL state.
      drained += traced(r, "writer cleanup s=attrs n=all") ? 1U : 0U;
      full_snapshot += options_of<BackendWorkloadOptions>(*spec.options).ttl_full_snapshot == 1 &&
                               traced(r, "complete:")
                           ? 1U
                           : 0U;
      // The clock stopped exactly where a stored value expires (last access + ttl).
      on_instant += traced(r, "(an expiry instant)") ? 1U : 0U;
    }
  }
  CHECK(with_ttl > 20);  // about half the seeds
  CHECK(drained == with_ttl);
  CHECK(full_snapshot > 5);
  CHECK(on_instant > with_ttl / 2);
}

TEST_CASE("a clock step inside a paused writer operation is invalid",
          "[sim][backend][ttl][scenario]") {
  // Regression 007, with the clock line inside the paused add.
  const RunResult r = run_scenario(
      parse_ok(R"(config capacity=1 min_capacity=1 max_capacity=2 workload=backend ttl=5
writer: list s=events k=1 add 0
writer: list s=events k=0 update [7]
clock: advance 5
writer: list s=events k=2 add 0 pause at map.rehash_move
clock: advance 5
writer: continue
)"));
  CHECK(r.outcome == Outcome::invalid);
  CHECK(r.message ==
        "b.scenario:6: the clock moves between writer operations, not while the writer is "
        "paused inside one");
}

TEST_CASE("a TTL expectation names the value with its last-access time",
          "[sim][backend][ttl][scenario]") {
  const RunResult r = run_scenario(parse_ok(R"(config workload=backend ttl=10 ttl_update=read
writer: value s=count k=1 update 7
clock: advance 3
writer: value s=count k=1 get
expect live s=count = {1:[7,0]}
)"));
  CHECK(r.outcome == Outcome::failure);
  CHECK(r.check == "expect");
  CHECK(r.message == "b.scenario:5: live count is {1:[7,3]}, expected {1:[7,0]}");
}

TEST_CASE(
    "in every interleaving a cancel racing a checkpoint is accepted before its commit and too "
    "late after it, and an accepted one never publishes",
    "[sim][backend][cancel]") {
  const std::string file =
      std::string(COWSTATE_SOURCE_DIR) + "/scenarios/smoke/backend-cancel-races-commit.scenario";
  std::ifstream in(file);
  REQUIRE(in);
  std::stringstream text;
  text << in.rdbuf();
  ParseError error;
  const auto s = parse_scenario(text.str(), file, &error);
  INFO(error.to_string());
  REQUIRE(s.has_value());
  std::set<std::string> answers;
  RunConfig config;
  config.scenario = &*s;
  config.on_step = [&answers](const StepView& v) {
    for (const std::string& line : v.trace) {
      const std::size_t at = line.find("releaser cancel c1");
      if (at != std::string::npos) answers.insert(line.substr(at + 18));
    }
  };
  ExploreOptions options;
  options.preemption_bound = 3;
  const ExploreResult r = explore(config, options);
  CHECK(r.complete);
  CHECK(r.failures.empty());
  // Before the first step, between entries, at the commit point, and after the commit.
  CHECK(answers.count(": accepted") == 1);
  CHECK(answers.count(" (mid-step): accepted") == 1);
  CHECK(answers.count(": too late") == 1);
  CHECK(answers.size() == 3);
}
