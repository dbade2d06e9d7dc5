// The planted bugs from the CLI's side; see kill_matrix.h.
#include "cli/kill_matrix.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "cli/cli_input.h"
#include "core/failure_pipeline.h"
#include "cowstate/assert.h"
#include "cowstate/hooks.h"
#include "cowstate/sim/campaign.h"
#include "cowstate/sim/mutants.h"
#include "cowstate/sim/shrink.h"

namespace cowstate::cli {

namespace {

#if defined(COWSTATE_MUTANTS) && COWSTATE_MUTANTS
namespace mu = cowstate::mutants;

const sim::PlantedBug* find_mutant(const std::string& name) {
  const mu::Mutant m = mu::mutant_named(name);
  return m == mu::Mutant::none ? nullptr : &sim::planted_bug(m);
}

// The hand-minimized negative scenarios of a directory, by the mutant each `kills`.
std::map<std::string, sim::Scenario> negative_scenarios(const std::string& dir, bool* ok) {
  std::map<std::string, sim::Scenario> out;
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".scenario") files.push_back(e.path());
  }
  if (ec) {
    std::fprintf(stderr, "cowstate mutants: cannot list %s: %s\n", dir.c_str(),
                 ec.message().c_str());
    *ok = false;
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    auto s = load_scenario(f.string(), "cowstate mutants");
    if (!s) {
      *ok = false;
    } else if (s->kills.empty()) {
      std::fprintf(stderr, "cowstate mutants: %s names no mutant (`kills NAME`)\n",
                   f.string().c_str());
      *ok = false;
    } else {
      out[s->kills] = std::move(*s);
    }
  }
  return out;
}

// What the tests of a build tree labelled mutant-kill made of a planted bug.
struct SuiteKill {
  bool ran = false;     // ctest ran the tests (false: `by` says why not)
  bool killed = false;  // one of them failed
  double seconds = 0;
  std::string by;  // the first test that failed
};

// The name of the first test a ctest log reports as not passed ("  3/41 Test  #7: NAME
// .....***Failed  0.01 sec"), or "".
std::string first_failed_test(std::istream& log) {
  for (std::string line; std::getline(log, line);) {
    if (line.find("***") == std::string::npos && line.find("Not Run") == std::string::npos) {
      continue;
    }
    const std::size_t colon = line.find(": ");
    if (colon == std::string::npos) continue;
    const std::size_t from = colon + 2;
    std::size_t to = line.find(" .", from);
    if (to == std::string::npos) to = line.find(' ', from);
    return line.substr(from, to == std::string::npos ? std::string::npos : to - from);
  }
  return "";
}

// Runs the tests of `dir` labelled mutant-kill under `mutant` (COWSTATE_MUTANT), stopping at
// the first failure. Deterministic as the tests are; never fuzzes.
SuiteKill run_suites(const char* mutant, const std::string& dir) {
  SuiteKill k;
  const std::filesystem::path log = std::filesystem::temp_directory_path() /
                                    ("cowstate-mutants-ctest-" + std::string(mutant) + ".log");
  const std::string command = std::string("COWSTATE_MUTANT=") + mutant + " ctest --test-dir " +
                              pasteable(dir) +
                              " -L mutant-kill --no-tests=error --stop-on-failure -j 2"
                              " --timeout 120 > " +
                              pasteable(log.string()) + " 2>&1";
  const auto start = std::chrono::steady_clock::now();
  const int status = std::system(command.c_str());
  k.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::ifstream in(log);
  k.by = first_failed_test(in);
  k.ran = status == 0 || !k.by.empty();
  k.killed = status != 0 && !k.by.empty();
  if (!k.ran)
    k.by = "ctest did not run (exit status " + std::to_string(status) + "; " + log.string() + ")";
  std::error_code ec;
  if (k.ran) std::filesystem::remove(log, ec);
  return k;
}

// One row of the matrix: what fuzzing, shrinking, the negative scenario and the test suites
// made of a mutant.
struct Row {
  std::optional<FinishedRun> kill;
  std::optional<SuiteKill> suites;
  double seconds = 0;
  std::uint64_t runs = 0;
  std::size_t shrunk_steps = 0, hand_steps = 0;
  std::size_t shrunk_bound = 0;  // twice hand_steps, or the negative scenario's shrunk_at_most
  std::uint64_t shrink_runs = 0;  // candidate runs of the shrinks, every attempt
  double shrink_seconds = 0;
  std::string shrink_cut_by;      // a limit that cut a shrink short ("" : fixed points)
  std::string negative;  // "-", "MISSING", "ok (CHECK)", or what went wrong
  std::vector<std::string> problems;  // what keeps the row from passing, a phrase each
};

// The kill replayed with deep checks at every step, when it still fails that way: sampled
// checks find a bug late, and shrinking would keep every step up to the sampled check.
FinishedRun with_every_step_checked(FinishedRun kill) {
  if (kill.spec.options->deep_check_every() == 1) return kill;
  CaseSpec dense = kill.spec;
  dense.options = dense.options->with_deep_check_every(1);
  RunResult result = sim::run_case(dense);
  if (result.outcome != kill.result.outcome) return kill;
  kill.spec = std::move(dense);
  kill.result = std::move(result);
  return kill;
}

Row run_row(const sim::PlantedBug& info, const KillMatrixOptions& o,
            const std::map<std::string, sim::Scenario>& negatives) {
  Row row;
  mu::active() = info.mutant;
  sim::CampaignOptions campaign;
  campaign.seed = 1;
  campaign.time_seconds = o.seconds_per_mutant;
  campaign.runs = o.runs_per_mutant;
  campaign.ops = o.ops;
  campaign.deep_check_every = o.deep_check_every;
  // The backend's planted bugs are fuzzed with the backend workload, the map's with the map's.
  campaign.workload = sim::find_workload(info.workload);
  COWSTATE_ASSERT(campaign.workload != nullptr, "REQUIRES", "a planted bug names a workload");
  // A crash names the mutant and the phase (fuzz, shrink, negative scenario) it came in.
  const std::string under = std::string("under mutant ") + info.name();
  auto on_start = [&under](const CaseSpec& spec) {
    set_crash_hint("while fuzzing " + under + "; replay: " + replay_command(spec, ""));
  };
  const auto negative = negatives.find(info.name());
  if (negative != negatives.end()) {
    row.hand_steps = negative->second.step_count();
    row.shrunk_bound = negative->second.shrunk_at_most != 0 ? negative->second.shrunk_at_most
                                                            : 2 * row.hand_steps;
  }
  // A kill shrunk to over twice the hand-minimized scenario is often a local minimum of its
  // run (a default hash where the hand case collides keys, a manager's spill where it spills
  // by hand): the campaigns of the next seeds (as long again each, at most three) find other
  // kills, and the smallest shrunk one stands. Time to kill is the first campaign's.
  const std::string file = std::string(info.name()) + ".scenario";
  const std::string retry_file = std::string(info.name()) + ".retry.scenario";
  for (int attempt = 0; attempt < 4; ++attempt) {
    if (attempt > 0) {
      const bool too_large = row.hand_steps > 0 && row.shrunk_steps > row.shrunk_bound;
      if (!too_large) break;
      campaign.seed = 1 + static_cast<std::uint64_t>(attempt);
    }
    const sim::CampaignSummary s = sim::run_campaign(campaign, on_start, nullptr, nullptr);
    if (attempt == 0) {
      row.seconds = s.seconds;
      row.runs = s.runs;
      row.kill = s.first_failure;
    }
    std::optional<FinishedRun> kill = s.first_failure;
    if (!kill || o.shrink_seconds <= 0) break;
    kill->spec.mutant = info.name();
    kill = with_every_step_checked(std::move(*kill));
    if (attempt == 0) row.kill = kill;  // the row's seed and check are the first kill's
    set_crash_hint("while shrinking the kill " + under + " (" + replay_command(kill->spec, "") +
                   ")");
    const ShrinkRequest request{replay_command(kill->spec, ""), o.out_dir,
                                attempt == 0 ? file : retry_file, o.shrink_seconds,
                                info.name(), false, o.shrink_runs};
    const auto shrink_start = std::chrono::steady_clock::now();
    const std::optional<Shrunk> shrunk = shrink_case(kill->spec, kill->result, request);
    row.shrink_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - shrink_start).count();
    if (!shrunk) continue;
    row.shrink_runs += shrunk->result.runs;
    if (row.shrink_cut_by.empty()) row.shrink_cut_by = shrunk->result.cut_by;
    const std::size_t steps = shrunk->result.steps_after;
    const std::filesystem::path dir(o.out_dir);
    std::error_code ec;
    if (attempt == 0 || steps < row.shrunk_steps) {
      row.shrunk_steps = steps;
      if (attempt > 0 && !o.out_dir.empty()) std::filesystem::rename(dir / retry_file, dir / file, ec);
    }
    if (!o.out_dir.empty()) std::filesystem::remove(dir / retry_file, ec);
  }
  if (!row.kill) row.problems.push_back("not killed by its campaign");
  // The negative scenario must fail (exit 1) under its mutant and pass without it.
  row.negative = o.negative_dir.empty() ? "-" : "MISSING";
  if (negative != negatives.end()) {
    set_crash_hint("while replaying the negative scenario " + negative->second.file + " " + under);
    const RunResult under_mutant = sim::run_scenario(negative->second);
    mu::active() = mu::Mutant::none;
    set_crash_hint("while replaying the negative scenario " + negative->second.file +
                   " with no mutant active");
    const RunResult without = sim::run_scenario(negative->second);
    const bool fails = sim::exit_code(under_mutant.outcome) == 1;
    const bool passes = without.outcome == sim::Outcome::pass;
    row.negative = fails && passes ? "ok (" + under_mutant.check + ")"
                   : !fails ? std::string("NOT KILLED: ") + sim::outcome_name(under_mutant.outcome)
                            : "FAILS WITHOUT THE MUTANT: " + without.check;
    if (!(fails && passes)) row.problems.push_back("negative scenario " + row.negative);
  } else if (!o.negative_dir.empty()) {
    row.problems.push_back("no negative scenario names it");
  }
  mu::active() = mu::Mutant::none;
  if (row.hand_steps > 0 && row.shrunk_steps > row.shrunk_bound) {
    row.problems.push_back(
        "shrunk to " + std::to_string(row.shrunk_steps) + " steps, over its bound of " +
        std::to_string(row.shrunk_bound) +
        (row.shrink_cut_by.empty() ? "" : " (a shrink was cut short by " + row.shrink_cut_by + ")"));
  }
  if (!o.ctest_dir.empty()) {
    row.suites = run_suites(info.name(), o.ctest_dir);
    if (!row.suites->ran) row.problems.push_back(row.suites->by);
  }
  return row;
}

void print_row(const sim::PlantedBug& info, const Row& row, bool json) {
  const double ratio =
      row.hand_steps > 0 && row.shrunk_steps > 0
          ? static_cast<double>(row.shrunk_steps) / static_cast<double>(row.hand_steps)
          : 0.0;
  if (json) {
    nlohmann::json j{{"mutant", info.name()},
                     {"killed", row.kill.has_value()},
                     {"seconds", row.seconds},
                     {"runs", row.runs},
                     {"shrunk_steps", row.shrunk_steps},
                     {"hand_steps", row.hand_steps},
                     {"shrink_runs", row.shrink_runs},
                     {"shrink_seconds", row.shrink_seconds},
                     {"shrink_cut_by", row.shrink_cut_by},
                     {"negative", row.negative}};
    if (row.suites) {
      j["ctest"] = {{"ran", row.suites->ran},
                    {"killed", row.suites->killed},
                    {"seconds", row.suites->seconds},
                    {"by", row.suites->by}};
    }
    if (row.kill) {
      j["seed"] = row.kill->spec.seed;
      j["check"] = row.kill->result.check;
      j["outcome"] = sim::outcome_name(row.kill->result.outcome);
      j["signature"] = row.kill->result.signature().to_string();
    }
    std::cout << j.dump() << std::endl;
    return;
  }
  std::printf(
      "%-36s %-6s %8.3f %6s  %-18s %6zu %5zu %6.2f  %s\n", info.name(), row.kill ? "yes" : "NO",
      row.seconds, row.kill ? std::to_string(row.kill->spec.seed).c_str() : "-",
      row.kill ? (row.kill->result.check + " (" + sim::outcome_name(row.kill->result.outcome) + ")")
                     .c_str()
               : "-",
      row.shrunk_steps, row.hand_steps, ratio, row.negative.c_str());
  if (row.shrink_runs > 0) {
    std::printf("%-36s shrink: %llu runs in %.1f s, %s\n", "",
                static_cast<unsigned long long>(row.shrink_runs), row.shrink_seconds,
                row.shrink_cut_by.empty() ? "to a fixed point"
                                          : ("cut short by " + row.shrink_cut_by).c_str());
  }
  if (row.suites) {
    std::printf("%-36s ctest: %s %.1f s%s%s\n", "", row.suites->killed ? "killed" : "not killed",
                row.suites->seconds, row.suites->by.empty() ? "" : " by ", row.suites->by.c_str());
  }
}
#endif

}  // namespace

bool activate_mutant(const std::string& which, const sim::Scenario& s) {
  if (which.empty()) return true;
  const std::string name = which == "kills" ? s.kills : which;
  if (name.empty()) {
    std::fprintf(stderr, "cowstate: %s names no mutant (`kills NAME`)\n", s.file.c_str());
    return false;
  }
  return activate_mutant_named(name);
}

bool activate_mutant_named(const std::string& name) {
  if (name.empty()) return true;
#if defined(COWSTATE_MUTANTS) && COWSTATE_MUTANTS
  const auto* info = find_mutant(name);
  if (info == nullptr) {
    std::string names;
    for (const char* m : mu::kMutantNames) names += (names.empty() ? "" : ", ") + std::string(m);
    std::fprintf(stderr, "cowstate: unknown mutant '%s' (the catalog: %s)\n", name.c_str(),
                 names.c_str());
    return false;
  }
  mu::active() = info->mutant;
  return true;
#else
  std::fprintf(stderr, "cowstate: mutant '%s' needs a mutants build (cmake --preset mutants)\n",
               name.c_str());
  return false;
#endif
}

void deactivate_mutants() {
#if defined(COWSTATE_MUTANTS) && COWSTATE_MUTANTS
  mu::active() = mu::Mutant::none;
#endif
}

std::string active_mutant_name() {
#if defined(COWSTATE_MUTANTS) && COWSTATE_MUTANTS
  if (mu::active() != mu::Mutant::none) return mu::mutant_name(mu::active());
#endif
  return "";
}

int run_kill_matrix(const KillMatrixOptions& o) {
  if (o.list) {
    for (const sim::PlantedBug& m : sim::kPlantedBugs) {
      std::printf("%s %s %s %s\n", m.name(), m.workload, m.ttl ? "ttl" : "-", m.description);
    }
    return 0;
  }
  for (const std::string& name : o.only) {
    const auto named = [&name](const sim::PlantedBug& m) { return name == m.name(); };
    if (std::none_of(std::begin(sim::kPlantedBugs), std::end(sim::kPlantedBugs), named)) {
      std::fprintf(stderr,
                   "cowstate mutants: --only %s: no planted bug of that name (see --list)\n",
                   name.c_str());
      return kExitUsage;
    }
  }
#if defined(COWSTATE_MUTANTS) && COWSTATE_MUTANTS
  bool ok = true;
  std::map<std::string, sim::Scenario> negatives;
  if (!o.negative_dir.empty()) negatives = negative_scenarios(o.negative_dir, &ok);
  std::size_t killed = 0, suite_kills = 0;
  std::vector<double> kill_times;
  if (!o.json) {
    std::printf("%-36s %-6s %8s %6s  %-18s %6s %5s %6s  %s\n", "mutant", "killed", "time (s)",
                "seed", "caught by", "shrunk", "hand", "ratio", "negative scenario");
  }
  std::size_t total = 0;
  std::vector<std::string> problems;  // every row's, named
  for (const sim::PlantedBug& info : sim::kPlantedBugs) {
    if (!o.only.empty() && std::find(o.only.begin(), o.only.end(), info.name()) == o.only.end()) {
      continue;
    }
    ++total;
    const Row row = run_row(info, o, negatives);
    if (row.kill) {
      ++killed;
      kill_times.push_back(row.seconds);
    }
    if (row.suites && row.suites->killed) ++suite_kills;
    print_row(info, row, o.json);
    for (const std::string& p : row.problems) problems.push_back(info.name() + (": " + p));
  }
  std::sort(kill_times.begin(), kill_times.end());
  ok = ok && problems.empty();  // the negative scenarios were read, and every row passes
  if (!o.json) {
    std::printf("killed %zu of %zu", killed, total);
    if (!kill_times.empty()) {
      std::printf("; median time to kill %.3f s, worst %.3f s", kill_times[kill_times.size() / 2],
                  kill_times.back());
    }
    std::printf(" (deep checks every %u steps)\n", o.deep_check_every);
    if (!o.ctest_dir.empty()) {
      std::printf("killed by the tests labelled mutant-kill in %s: %zu of %zu\n",
                  o.ctest_dir.c_str(), suite_kills, total);
    }
    if (!o.negative_dir.empty()) {
      std::printf("negative scenarios (%s): %s; shrunk cases at most 2x the hand-minimized (or its "
                  "shrunk_at_most): %s\n",
                  o.negative_dir.c_str(),
                  ok ? "all fail under their mutant only" : "see NOT OK below",
                  ok ? "yes" : "see NOT OK below");
    }
    for (const std::string& p : problems) std::printf("NOT OK %s\n", p.c_str());
  }
  return ok ? 0 : 1;
#else
  (void)o;
  std::fprintf(stderr,
               "cowstate mutants: this build has no mutants; configure with the `mutants` preset "
               "(cmake --preset mutants)\n");
  return kExitUsage;
#endif
}

}  // namespace cowstate::cli
