// cowstate: the command-line front of the simulator.
//
//   cowstate fuzz      a campaign of seeded runs (--workload map: one map; backend: a keyed
//                      backend with checkpoints on disk, faults and rescaling restores)
//   cowstate replay    reruns a recorded failing case exactly
//   cowstate mutants   fuzzes every planted bug (mutants build) and reports time to kill
//   cowstate run       runs scenario files (scenarios/, docs/scenario-format.md)
//   cowstate explore   runs every interleaving of a scenario's tasks within bounds
//   cowstate explain   narrates a scenario step by step (text, Graphviz graphs, an HTML viewer)
//   cowstate merge     merges the JSON lines of a campaign's shards, checking they cover it
//   cowstate checkpoint inspect|verify   looks inside checkpoint files and storage directories
//
// Every failure found by fuzz, explore or mutants goes through the failure pipeline
// (failure_pipeline.h): reported, written as a case file, shrunk to a scenario file.
//
// Exit codes: 0 pass, 1 correctness failure, 2 bad input or usage, 3 crash or assertion
// caught, 4 stuck schedule (step bound hit).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cli/campaign_id.h"
#include "cli/checkpoint_tool.h"
#include "cli/cli_input.h"
#include "cli/cli_options.h"
#include "cli/explain_html.h"
#include "cli/explore_json.h"
#include "cli/kill_matrix.h"
#include "cli/merge.h"
#include "core/build_info.h"
#include "core/failure_pipeline.h"
#include "cowstate/sim/campaign.h"
#include "cowstate/sim/explore.h"
#include "cowstate/sim/run.h"
#include "cowstate/sim/scenario.h"
#include "cowstate/sim/shrink.h"

namespace {

using namespace cowstate::sim;
using cowstate::cli::FailureTally;
using cowstate::cli::invoked_as;
using cowstate::cli::kExitUsage;
using cowstate::cli::pasteable;
using cowstate::cli::set_crash_hint;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// ---------------------------------------------------------------------------------------
// fuzz

struct FuzzArgs {
  CampaignOptions campaign;
  CLI::Option* runs_option = nullptr;  // given on the command line: count() > 0
  CLI::Option* max_failures_option = nullptr;
  bool json = false;
  bool keep_going = false;
  std::string out_dir = "cowstate-failures";
  std::string shard = "0/1";
  std::string workload = "map";
  std::string mutant;  // a planted bug to fuzz (mutants build)
  double shrink_seconds = 30;
};

// `--shard I/N` of `cowstate COMMAND`; false, after saying what was expected, when `text`
// is not I/N with I < N.
bool parse_shard(const std::string& text, const char* command, std::uint32_t* index,
                 std::uint32_t* count) {
  const std::size_t slash = text.find('/');
  const std::string_view view(text);
  const auto i = slash == std::string::npos
                     ? std::nullopt
                     : cowstate::cli::parse_unsigned(view.substr(0, slash), 0, 999999);
  const auto n = slash == std::string::npos
                     ? std::nullopt
                     : cowstate::cli::parse_unsigned(view.substr(slash + 1), 1, 1000000);
  if (!i || !n || *i >= *n) {
    std::fprintf(stderr,
                 "cowstate %s: --shard expects I/N with 0 <= I < N <= 1000000, found '%s'\n",
                 command, text.c_str());
    return false;
  }
  *index = static_cast<std::uint32_t>(*i);
  *count = static_cast<std::uint32_t>(*n);
  return true;
}

// The campaign a shard belongs to: what every shard of it has in common; its id
// (cowstate::cli::campaign_id) lets shards of one campaign be recognised.
nlohmann::json campaign_json(const CampaignOptions& o) {
  return {{"seed", o.seed},
          {"runs", o.runs},
          {"time_s", o.time_seconds},
          {"ops", o.ops},
          {"strategy", o.strategy},
          {"pct_depth", o.pct_depth},
          {"workload", o.workload->name()},
          {"deep_check_every", o.deep_check_every},
          {"max_failures", o.max_failures}};
}

std::string budget_text(const CampaignOptions& o) {
  const std::string time = cowstate::cli::bound_text(o.time_seconds) + " s";
  if (o.runs == 0) return "runs until " + time + " are spent";
  const std::string runs = std::to_string(o.runs) + " runs";
  return o.time_seconds > 0 ? runs + " in at most " + time : runs;
}

// A failing run: its report, its case file, and (the first time its signature is seen) its
// shrunk scenario; the JSON record when asked for.
void handle_failure(FinishedRun run, const FuzzArgs& a, const std::string& id,
                    FailureTally& tally) {
  run.spec.version = version_line();
  run.spec.mutant = a.mutant;
  const std::string case_file = cowstate::cli::write_case_file(a.out_dir, run.spec);
  const std::string replay = cowstate::cli::replay_command(run.spec, case_file);
  if (!a.json) cowstate::cli::print_failure(run, case_file);
  const FailureSignature signature = run.result.signature();
  const bool fresh = tally.add(signature, run.index, run.spec.seed);
  FailureTally::Entry& entry = tally.at(signature);
  nlohmann::json j = cowstate::cli::run_json(run, id);
  j["case_file"] = case_file;
  j["replay"] = replay;
  if (fresh) {
    entry.case_file = case_file;
    entry.replay = replay;
    if (a.shrink_seconds > 0) {
      set_crash_hint("while shrinking the failure of seed " + std::to_string(run.spec.seed) + " (" +
                     signature.to_string() + "); its report is above" +
                     (case_file.empty() ? "" : " and its case file is " + case_file) +
                     "; replay: " + replay);
      const cowstate::cli::ShrinkRequest request{
          cowstate::cli::replay_command(run.spec, ""),
          a.out_dir,
          "fuzz-seed-" + std::to_string(run.spec.seed) + ".scenario",
          a.shrink_seconds,
          a.mutant,
          !a.json};
      if (auto shrunk = cowstate::cli::shrink_case(run.spec, run.result, request)) {
        entry.shrunk_file = shrunk->path;
        j["shrink"] = {{"steps_before", shrunk->result.steps_before},
                       {"steps_after", shrunk->result.steps_after},
                       {"runs", shrunk->result.runs},
                       {"reproduced", shrunk->result.reproduced},
                       {"signature", shrunk->result.signature.to_string()}};
        if (!shrunk->path.empty()) {
          j["shrunk_replay"] =
              invoked_as() + " run " + (a.mutant.empty() ? "" : "--mutant kills ") + shrunk->path;
        }
      } else {
        j["shrink"] = {{"reproduced", false},
                       {"note", "the run failed in its setup, before its first step"}};
      }
    }
  } else if (!a.json) {
    std::printf("  (the same failure as run %llu: not shrunk again)\n",
                static_cast<unsigned long long>(entry.first_run));
  }
  j["shrunk_file"] = entry.shrunk_file;
  if (a.json) std::cout << j.dump() << std::endl;
}

void print_totals(const CampaignSummary& s) {
  std::printf(
      "runs %llu, steps %llu (%.0f steps/s), ops %llu, snapshots %llu started / %llu checked, "
      "entries checked %llu, deep checks %llu, %.1f s\n",
      static_cast<unsigned long long>(s.runs), static_cast<unsigned long long>(s.totals.steps),
      s.seconds > 0 ? static_cast<double>(s.totals.steps) / s.seconds : 0.0,
      static_cast<unsigned long long>(s.totals.ops),
      static_cast<unsigned long long>(s.totals.snapshots),
      static_cast<unsigned long long>(s.totals.snapshots_checked),
      static_cast<unsigned long long>(s.totals.entries_checked),
      static_cast<unsigned long long>(s.totals.deep_checks), s.seconds);
}

// The last JSON line of a shard: its totals, and why it stopped (`cowstate merge` checks
// that a shard that ran all its runs holds them all).
void print_summary_json(const CampaignOptions& o, const std::string& id, const CampaignSummary& s,
                        const FailureTally& tally) {
  nlohmann::json summary{{"type", "summary"},
                         {"campaign_id", id},
                         {"version", version_line()},
                         {"runs", s.runs},
                         {"failures", s.failures},
                         {"distinct_failures", tally.to_json()},
                         {"seconds", s.seconds},
                         {"shard", {{"index", o.shard_index}, {"count", o.shard_count}}},
                         {"stopped_by", stop_reason_name(s.stopped_by)}};
  summary.update(cowstate::cli::stats_json(s.totals));
  summary["coverage"] = s.coverage.to_json(coverage_reach(o.workload->scenario_language()), "run");
  std::cout << summary.dump() << std::endl;
}

// The campaign's first line: a JSON header, or the settings and the first run's options.
void print_campaign_header(const FuzzArgs& a, const nlohmann::json& campaign,
                           const std::string& id) {
  const CampaignOptions& o = a.campaign;
  if (a.json) {
    std::cout << nlohmann::json{{"type", "campaign"},
                                {"tool", "cowstate"},
                                {"command", "fuzz"},
                                {"version", version_line()},
                                {"campaign_id", id},
                                {"campaign", campaign},
                                {"shard", {{"index", o.shard_index}, {"count", o.shard_count}}}}
                     .dump()
              << std::endl;
    return;
  }
  std::printf(
      "cowstate fuzz: seed %llu, %s, strategy %s, %u ops per run, shard %u/%u, "
      "workload %s, stop after %s\n",
      static_cast<unsigned long long>(o.seed), budget_text(o).c_str(), o.strategy.c_str(), o.ops,
      o.shard_index, o.shard_count, a.workload.c_str(),
      o.max_failures == 0
          ? "no failure (--keep-going)"
          : (std::to_string(o.max_failures) + " failure" + (o.max_failures == 1 ? "" : "s"))
                .c_str());
  const CaseSpec first = case_for_run(o, o.shard_index);
  std::printf("first run: seed %llu options %s\n", static_cast<unsigned long long>(first.seed),
              case_options(first).c_str());
}

// The progress line on a terminal, rewritten in place.
void print_progress(const CampaignOptions& o, const CampaignSummary& s) {
  std::fprintf(stderr, "\r  runs %llu  steps/s %.0f  snapshots checked %llu  failures %llu  %.1f",
               static_cast<unsigned long long>(s.runs),
               s.seconds > 0 ? static_cast<double>(s.totals.steps) / s.seconds : 0.0,
               static_cast<unsigned long long>(s.totals.snapshots_checked),
               static_cast<unsigned long long>(s.failures), s.seconds);
  if (o.time_seconds > 0) {
    std::fprintf(stderr, "/%s s   ", cowstate::cli::bound_text(o.time_seconds).c_str());
  } else {
    std::fprintf(stderr, " s, run %llu/%llu   ", static_cast<unsigned long long>(s.runs),
                 static_cast<unsigned long long>(o.runs));
  }
}

int cmd_fuzz(FuzzArgs a) {
  CampaignOptions& o = a.campaign;
  if (!parse_shard(a.shard, "fuzz", &o.shard_index, &o.shard_count)) return kExitUsage;
  if (a.runs_option->count() == 0) o.runs = o.time_seconds > 0 ? 0 : 100;
  if (a.keep_going && a.max_failures_option->count() == 0) o.max_failures = 0;
  o.workload = find_workload(a.workload);
  if (o.workload == nullptr) {
    std::fprintf(stderr, "cowstate fuzz: --workload: expected %s, found '%s'\n",
                 workload_names().c_str(), a.workload.c_str());
    return kExitUsage;
  }
  if (!cowstate::cli::activate_mutant_named(a.mutant)) return kExitUsage;
  nlohmann::json campaign = campaign_json(o);
  if (!a.mutant.empty()) campaign["mutant"] = a.mutant;
  const std::string id = cowstate::cli::campaign_id(campaign);
  print_campaign_header(a, campaign, id);
  const bool tty = isatty(2) != 0 && !a.json;
  FailureTally tally;
  auto on_start = [&a](CaseSpec spec) {
    spec.mutant = a.mutant;
    set_crash_hint("while running seed " + std::to_string(spec.seed) +
                   "; replay: " + cowstate::cli::replay_command(spec, ""));
  };
  auto on_run = [&](const FinishedRun& run) {
    if (run.result.outcome != Outcome::pass) {
      if (tty) std::fprintf(stderr, "\n");
      handle_failure(run, a, id, tally);
    } else if (a.json) {
      std::cout << cowstate::cli::run_json(run, id).dump() << "\n";
    }
  };
  auto on_progress = [&](const CampaignSummary& s) {
    if (tty) print_progress(o, s);
  };
  const CampaignSummary s = run_campaign(o, on_start, on_run, on_progress);
  if (tty) std::fprintf(stderr, "\n");
  if (a.json) {
    print_summary_json(o, id, s, tally);
  } else {
    std::printf("\n");
    print_totals(s);
    std::printf("\n%s",
                s.coverage.to_text(coverage_reach(o.workload->scenario_language()), "run").c_str());
    tally.print();
    if (!s.first_failure) std::printf("PASS\n");
  }
  return s.first_failure ? exit_code(s.first_failure->result.outcome) : 0;
}

// ---------------------------------------------------------------------------------------
// replay

int cmd_replay(const std::string& file, bool timing) {
  auto text = cowstate::cli::read_input_file(file, "cowstate replay", cowstate::cli::kCaseBytesMax);
  if (!text) return kExitUsage;
  std::string error;
  auto spec = parse_case(*text, file, &error);
  if (!spec) {
    std::fprintf(stderr, "cowstate replay: %s\n", error.c_str());
    return kExitUsage;
  }
  if (!cowstate::cli::activate_mutant_named(spec->mutant)) return kExitUsage;
  set_crash_hint("while replaying " + pasteable(file));
  const auto start = std::chrono::steady_clock::now();
  FinishedRun run;
  run.spec = *spec;
  run.result = run_case(*spec);
  std::printf("replayed seed %llu (%s): %s", static_cast<unsigned long long>(spec->seed),
              spec->strategy.c_str(), run.result.signature().to_string().c_str());
  if (timing) std::printf(" in %.1f ms", seconds_since(start) * 1000.0);
  std::printf("\n");
  int code = exit_code(run.result.outcome);
  const std::string got = trace_hash_text(run.result.trace_hash);
  const bool same_outcome =
      spec->outcome.empty() || spec->outcome == outcome_name(run.result.outcome);
  if (spec->trace_hash == 0) {
    std::printf("trace hash %s (the case records none)\n", got.c_str());
  } else if (spec->trace_hash == run.result.trace_hash) {
    std::printf("trace hash %s matches the recorded run\n", got.c_str());
  } else if (!same_outcome) {
    // A recorded failure that now passes (or the reverse) took another path by definition.
    std::printf(
        "trace hash %s differs from the recorded %s: the run no longer ends as recorded "
        "(%s, now %s)\n",
        got.c_str(), trace_hash_text(spec->trace_hash).c_str(), spec->outcome.c_str(),
        outcome_name(run.result.outcome));
  } else {
    std::printf(
        "trace hash %s DIFFERS from the recorded %s with the same outcome: this build "
        "takes another path than %s did (same seed, same trace is broken, or the case "
        "must be recorded again)\n",
        got.c_str(), trace_hash_text(spec->trace_hash).c_str(),
        spec->version.empty() ? "the one that recorded it" : spec->version.c_str());
    if (code == 0) code = 1;
  }
  if (run.result.outcome != Outcome::pass) cowstate::cli::print_failure(run, pasteable(file));
  return code;
}

// ---------------------------------------------------------------------------------------
// run

int cmd_run(const std::vector<std::string>& files, const std::string& mutant, bool full_trace,
            bool timing, std::uint64_t crash_states_max) {
  int result = 0;
  for (const std::string& file : files) {
    auto s = cowstate::cli::load_scenario(file, "cowstate run");
    if (!s) {
      if (result == 0) result = kExitUsage;
      continue;
    }
    if (!cowstate::cli::activate_mutant(mutant, *s)) return kExitUsage;
    set_crash_hint("while running " + pasteable(file));
    const auto start = std::chrono::steady_clock::now();
    const RunResult r = run_scenario(*s, full_trace, {}, crash_states_max);
    cowstate::cli::deactivate_mutants();
    std::printf("%s %s: %zu steps", r.outcome == Outcome::pass ? "PASS" : "FAIL", file.c_str(),
                s->step_count());
    if (timing) std::printf(" in %.1f ms", seconds_since(start) * 1000.0);
    std::printf("; %llu ops, %llu snapshots checked, %llu entries checked, %llu deep checks\n",
                static_cast<unsigned long long>(r.stats.ops),
                static_cast<unsigned long long>(r.stats.snapshots_checked),
                static_cast<unsigned long long>(r.stats.entries_checked),
                static_cast<unsigned long long>(r.stats.deep_checks));
    if (crash_states_max != 0 && r.outcome == Outcome::pass) {
      std::printf("  crash states: %llu restarts checked from %llu crash points%s\n",
                  static_cast<unsigned long long>(r.stats.crash_states),
                  static_cast<unsigned long long>(r.stats.crash_points),
                  r.stats.crash_states == crash_states_max ? " (the limit: more remain)" : "");
    }
    if (full_trace) {
      for (const std::string& line : r.trace) std::printf("    %s\n", line.c_str());
    }
    if (r.outcome != Outcome::pass) {
      cowstate::cli::print_run_failure(r);
      if (result == 0) result = exit_code(r.outcome);
    }
  }
  return result;
}

// ---------------------------------------------------------------------------------------
// explore

// Why an expectation of a fixed schedule cannot be checked when every interleaving is run,
// or "" when it can: snapshot and checkpoint images are fixed at their start, the live
// state once the writer is done, `expect failure` judges every run; the rest describe one
// moment of one interleaving.
std::string unexplorable(const Expectation& e, bool writer_steps_after) {
  switch (e.kind) {
    case ExpectKind::image:
      if (e.target != "live" || !writer_steps_after) return "";
      return "it describes the live state at that point of the fixed schedule, before writer "
             "steps that follow it";
    case ExpectKind::failure:
      return "";
    case ExpectKind::copied:
      return "it is about the one writer step before it, in one interleaving";
    case ExpectKind::versions:
    case ExpectKind::retired:
      return "versions and retired memory depend on when serializers and the releaser ran";
    case ExpectKind::latest:
      return "which checkpoint is the latest depends on when serializers and the releaser ran";
  }
  return "";
}

// The scenario with its interleaving left free: pauses and `continue` lines dropped, and
// the expectations every interleaving must meet (the others named on stderr).
Scenario freed(const Scenario& s) {
  Scenario out;
  out.config = s.config;
  out.config.fixed_schedule = false;
  out.kills = s.kills;
  out.file = s.file;
  std::size_t last_writer_step = 0;
  for (std::size_t i = 0; i < s.items.size(); ++i) {
    const auto* l = std::get_if<StepLine>(&s.items[i]);
    if (l != nullptr && l->task == "writer") last_writer_step = i;
  }
  for (std::size_t i = 0; i < s.items.size(); ++i) {
    const ScenarioItem& item = s.items[i];
    if (const auto* l = std::get_if<StepLine>(&item)) {
      if (l->action.kind == ActionKind::resume) continue;
      StepLine copy = *l;
      copy.pause = Name();
      out.items.emplace_back(std::move(copy));
      continue;
    }
    const Expectation& e = *expectation_of(item);
    const std::string why =
        s.config.fixed_schedule ? unexplorable(e, i < last_writer_step) : std::string();
    if (why.empty()) {
      out.items.push_back(item);
    } else {
      std::fprintf(stderr, "cowstate explore: %s:%d: not checked in the exploration: `%s`: %s\n",
                   s.file.c_str(), e.line, print_expectation(e, workload_of(s)).c_str(),
                   why.c_str());
    }
  }
  return out;
}

struct ExploreArgs {
  std::string file;
  ExploreOptions options;
  std::string mutant;
  std::string out_dir = "cowstate-failures";
  double shrink_seconds = 20;
  std::size_t show = 3;
  std::string shard = "0/1";
  bool json = false;
};

// Every failure counted by signature; the first failing schedule of each of the first
// `show` signatures replayed with recording, shrunk and written (with --split-depth, named
// by subtree and rank there, so that the shards of one exploration write distinct files).
void shrink_explored(const ExploreArgs& a, const RunConfig& config, const ExploreResult& r,
                     FailureTally& tally) {
  const std::string stem = std::filesystem::path(a.file).stem().string();
  std::map<std::uint64_t, std::uint64_t> rank;  // subtree -> failures seen there
  for (std::size_t i = 0; i < r.failures.size(); ++i) {
    const ExploredFailure& f = r.failures[i];
    const std::uint64_t nth = ++rank[f.subtree];
    const FailureSignature signature = f.result.signature();
    if (!tally.add(signature, i + 1, config.seed) || tally.entries().size() > a.show) continue;
    if (!a.json) {
      std::printf("\nfailure %zu: %s\n  %s\n", i + 1, signature.to_string().c_str(),
                  f.result.message.c_str());
      std::fflush(stdout);
    }
    RunConfig recording = config;
    recording.record = true;
    auto replay = make_replay_strategy(f.schedule);
    const RunResult recorded = run_once(recording, *replay);
    const std::optional<Scenario> fixed = to_scenario(recording, recorded);
    if (!fixed) continue;
    set_crash_hint("while shrinking explored failure " + std::to_string(i + 1) + " of " +
                   pasteable(a.file) + " (" + signature.to_string() + ")");
    const std::string name = a.options.split_depth == 0
                                 ? stem + "-explore-" + std::to_string(i + 1) + ".scenario"
                                 : stem + "-explore-subtree-" + std::to_string(f.subtree) + "-" +
                                       std::to_string(nth) + ".scenario";
    const cowstate::cli::ShrinkRequest request{invoked_as() + " explore " + pasteable(a.file),
                                               a.out_dir,
                                               name,
                                               a.shrink_seconds,
                                               cowstate::cli::active_mutant_name(),
                                               !a.json};
    const cowstate::cli::Shrunk shrunk = cowstate::cli::shrink_to_file(*fixed, signature, request);
    FailureTally::Entry& entry = tally.at(signature);
    entry.shrunk_file = shrunk.path;
    entry.replay = shrunk.path.empty() ? "" : invoked_as() + " run " + shrunk.path;
  }
}

void print_explored(const ExploreArgs& a, const ExploreResult& r, double seconds) {
  const ExploreOptions& o = a.options;
  std::printf("cowstate explore %s: preemption bound %u, max schedules %llu\n", a.file.c_str(),
              o.preemption_bound, static_cast<unsigned long long>(o.max_schedules));
  if (o.split_depth > 0) {
    std::printf(
        "shard %u/%u, split depth %u: %zu of %llu subtrees explored here (%llu first "
        "schedules of the others run to find them, not counted)\n",
        o.shard_index, o.shard_count, o.split_depth, r.subtrees.size(),
        static_cast<unsigned long long>(r.subtrees_total),
        static_cast<unsigned long long>(r.discovery_runs));
  }
  std::printf("schedules explored %llu, pruned as equivalent %llu, steps %llu, %s, %.2f s\n",
              static_cast<unsigned long long>(r.schedules),
              static_cast<unsigned long long>(r.pruned), static_cast<unsigned long long>(r.steps),
              r.complete ? "space exhausted" : "stopped at --max-schedules", seconds);
  std::printf("failures %zu\n", r.failures.size());
}

int cmd_explore(ExploreArgs a) {
  ExploreOptions& o = a.options;
  if (!parse_shard(a.shard, "explore", &o.shard_index, &o.shard_count)) return kExitUsage;
  if (o.shard_count > 1 && o.split_depth == 0) {
    std::fprintf(stderr,
                 "cowstate explore: --shard %s needs --split-depth D (1 or more): shards explore "
                 "the subtrees below the first D branching decisions, each with a dedup table "
                 "of its own (docs/distributed.md)\n",
                 a.shard.c_str());
    return kExitUsage;
  }
  auto loaded = cowstate::cli::load_scenario(a.file, "cowstate explore");
  if (!loaded) return kExitUsage;
  const Scenario s = freed(*loaded);
  if (!cowstate::cli::activate_mutant(a.mutant, s)) return kExitUsage;
  const nlohmann::json campaign = cowstate::cli::explore_campaign(s, o, a.mutant);
  if (a.json) cowstate::cli::print_explore_header(campaign, o);
  RunConfig config;
  config.seed = s.config.seed;
  config.scenario = &s;
  set_crash_hint("while exploring " + pasteable(a.file));
  const auto start = std::chrono::steady_clock::now();
  const ExploreResult r = explore(config, o);
  const CoverageReach language = coverage_reach(workload_of(s).scenario_language());
  const CoverageReport coverage = explored_coverage(r, config.seed);
  if (!a.json) {
    print_explored(a, r, seconds_since(start));
    std::printf("\n%s", coverage.to_text(language, "subtree").c_str());
  }
  FailureTally tally;
  shrink_explored(a, config, r, tally);
  if (a.json) {
    cowstate::cli::print_explore_records(campaign, o, r, tally, seconds_since(start),
                                         coverage.to_json(language, "subtree"));
  } else {
    tally.print();
  }
  cowstate::cli::deactivate_mutants();
  return r.failures.empty() ? 0 : exit_code(r.failures.front().result.outcome);
}

// ---------------------------------------------------------------------------------------
// explain

// Narrates one scenario: text on stdout, one DOT file per step in out (default
// explain-<stem>/), the HTML step viewer in out (default explain-<stem>.html), or the explain
// model as JSON on stdout. Exits with the run's code.
int cmd_explain(const std::string& file, const std::string& format, std::string out) {
  auto s = cowstate::cli::load_scenario(file, "cowstate explain");
  if (!s) return kExitUsage;
  RunConfig config;
  config.scenario = &*s;
  Workload::Narration n;
  std::string why_not;
  if (!config.which().narrate(*s, format == "dot", &n, &why_not)) {
    std::fprintf(stderr, "cowstate explain: %s is %s\n", file.c_str(), why_not.c_str());
    return kExitUsage;
  }
  const std::string stem = "explain-" + std::filesystem::path(file).stem().string();
  if (format == "text" || format == "json") {
    std::fputs((format == "text" ? n.text : n.model_json + "\n").c_str(), stdout);
    return exit_code(n.outcome);
  }
  if (format == "html") {
    const std::filesystem::path path(out.empty() ? stem + ".html" : out);
    const std::string dir = path.has_parent_path() ? path.parent_path().string() : ".";
    if (cowstate::cli::write_file(dir, path.filename().string(),
                                  cowstate::cli::explain_html(n.model_json))
            .empty()) {
      return kExitUsage;
    }
    std::printf("wrote %s\n", path.string().c_str());
  } else {
    if (out.empty()) out = stem;
    for (std::size_t i = 0; i < n.graphs.size(); ++i) {
      char name[32];
      std::snprintf(name, sizeof name, "step-%03zu.dot", i + 1);
      if (cowstate::cli::write_file(out, name, n.graphs[i]).empty()) return kExitUsage;
    }
    std::printf("wrote %zu graphs to %s/ (render: dot -Tsvg -O %s/*.dot)\n", n.graphs.size(),
                out.c_str(), out.c_str());
  }
  std::printf("outcome: %s (exit %d)%s%s\n", outcome_name(n.outcome), exit_code(n.outcome),
              n.check.empty() ? "" : " at check ", n.check.c_str());
  return exit_code(n.outcome);
}

// ---------------------------------------------------------------------------------------
// the command line

// CLI11 says "A subcommand is required" or "The following argument was not expected" for
// a mistyped subcommand; this names it and lists the real ones.
bool known_subcommand(const CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return true;
  std::string names;
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (sub->get_name() == argv[1]) return true;
    names += (names.empty() ? "" : ", ") + sub->get_name();
  }
  std::fprintf(stderr,
               "cowstate: unknown subcommand '%s'; the subcommands are %s (cowstate "
               "--help says more)\n",
               argv[1], names.c_str());
  return false;
}

void add_fuzz(CLI::App& app, FuzzArgs& a) {
  using cowstate::cli::seconds_option;
  using cowstate::cli::unsigned_option;
  CLI::App* f = app.add_subcommand("fuzz", "run a fuzz campaign of seeded simulation runs");
  CampaignOptions& o = a.campaign;
  unsigned_option(f, "--seed", o.seed, 0, UINT64_MAX, "base seed; run i uses seed + i");
  a.runs_option = unsigned_option(f, "--runs", o.runs, 1, std::uint64_t{1} << 40,
                                  "number of runs (without --runs and with --time: until the "
                                  "time is spent)")
                      ->default_str("100");
  seconds_option(f, "--time", o.time_seconds, 0, 31536000,
                 "time budget for the runs (0: none); each new failure adds its shrink time");
  unsigned_option(f, "--ops", o.ops, 1, 10000000, "writer operations per run");
  f->add_option("--strategy", o.strategy, "random or pct")
      ->check(CLI::IsMember({"random", "pct"}))
      ->capture_default_str();
  unsigned_option(f, "--pct-depth", o.pct_depth, 1, 64, "PCT bug depth d");
  f->add_option("--shard", a.shard, "I/N: run only indices i with i mod N == I")
      ->capture_default_str();
  unsigned_option(f, "--deep-check-every", o.deep_check_every, 0, UINT32_MAX,
                  "deep checks every N steps (0: never)");
  f->add_flag("--json", a.json,
              "JSON lines on stdout: a campaign header, one record per run, a summary");
  f->add_option("--out", a.out_dir, "directory for failing case files and shrunk scenarios")
      ->capture_default_str();
  std::string workload_help;
  std::vector<std::string> workload_list;
  for (const Workload* w : workloads()) {
    workload_list.emplace_back(w->name());
    workload_help += (workload_help.empty() ? "" : "; ") + std::string(w->name()) + ": " +
                     std::string(w->summary());
  }
  f->add_option("--workload", a.workload, "what the runs drive (" + workload_help + ")")
      ->check(CLI::IsMember(workload_list))
      ->capture_default_str();
  seconds_option(f, "--shrink-seconds", a.shrink_seconds, 0, 86400,
                 "time to shrink each distinct failure (0: no shrink)");
  f->add_flag("--keep-going", a.keep_going,
              "go on after a failure: every failure is reported, written and counted by "
              "signature");
  f->add_option("--mutant", a.mutant, "fuzz with a planted bug switched on (mutants build)");
  a.max_failures_option =
      unsigned_option(f, "--max-failures", o.max_failures, 1, std::uint64_t{1} << 40,
                      "stop after this many failing runs (unbounded with --keep-going)");
}

struct ReplayArgs {
  std::string file;
  bool timing = false;
};

void add_replay(CLI::App& app, ReplayArgs& a) {
  auto* r = app.add_subcommand("replay", "rerun a recorded failing case exactly");
  r->add_option("FILE", a.file, "case file written by fuzz --out")->required();
  r->add_flag("--timing", a.timing, "also print how long the run took");
}

void add_mutants(CLI::App& app, cowstate::cli::KillMatrixOptions& matrix) {
  using cowstate::cli::seconds_option;
  using cowstate::cli::unsigned_option;
  auto* m = app.add_subcommand("mutants",
                               "fuzz every planted bug and report time to kill (mutants build)");
  seconds_option(m, "--time-per-mutant", matrix.seconds_per_mutant, 0.001, 86400,
                 "seconds of fuzzing per mutant");
  unsigned_option(m, "--runs-per-mutant", matrix.runs_per_mutant, 0, UINT64_MAX,
                  "runs of fuzzing per mutant, whichever limit comes first (0: no run limit)");
  unsigned_option(m, "--ops", matrix.ops, 1, 10000000, "writer operations per run");
  m->add_flag("--json", matrix.json, "one JSON line per mutant");
  m->add_flag("--list", matrix.list,
              "only list the catalog, a line each: name, workload, ttl or -, description (any "
              "build)");
  m->add_option("--negative", matrix.negative_dir,
                "directory of hand-minimized negative scenarios to check and compare with")
      ->check(CLI::ExistingDirectory);
  m->add_option("--out", matrix.out_dir, "directory for the shrunk scenario of each kill");
  seconds_option(m, "--shrink-seconds", matrix.shrink_seconds, 0, 86400,
                 "time to shrink each kill (0: no shrink)");
  unsigned_option(m, "--shrink-runs", matrix.shrink_runs, 1, UINT64_MAX,
                  "candidate runs to shrink each kill (the same bound on every machine)");
  unsigned_option(m, "--deep-check-every", matrix.deep_check_every, 0, UINT32_MAX,
                  "deep checks every N steps in the campaigns (0: never)");
  m->add_option("--only", matrix.only, "run only these planted bugs (NAME,NAME or repeated)")
      ->delimiter(',');
  m->add_option("--ctest", matrix.ctest_dir,
                "a mutants build tree: also run its tests labelled mutant-kill under each "
                "planted bug (COWSTATE_MUTANT) and report whether they kill it")
      ->check(CLI::ExistingDirectory);
}

struct RunArgs {
  std::vector<std::string> files;
  std::string mutant;
  bool trace = false;
  bool timing = false;
  std::uint64_t crash_states = 0;
};

void add_run(CLI::App& app, RunArgs& a) {
  auto* rn = app.add_subcommand("run", "run scenario files and check their expectations");
  rn->add_option("FILE", a.files, "scenario files")->required();
  rn->add_option("--mutant", a.mutant,
                 "run under a planted bug (mutants build); `kills`: the one the file names");
  rn->add_flag("--trace", a.trace, "print every trace line (the same bytes in every build)");
  rn->add_flag("--timing", a.timing, "also print how long each file took");
  cowstate::cli::unsigned_option(
      rn, "--crash-states", a.crash_states, 1, std::uint64_t{1} << 40,
      "then restart from every crash state of the run's simulated disk, at most N (every "
      "prefix of its operations times every allowed subset of what was not durable) and "
      "print the count (backend scenarios)");
}

void add_explore(CLI::App& app, ExploreArgs& a) {
  using cowstate::cli::seconds_option;
  using cowstate::cli::unsigned_option;
  auto* ex = app.add_subcommand("explore", "run every interleaving of a scenario within bounds");
  ex->add_option("FILE", a.file, "scenario file")->required();
  unsigned_option(ex, "--preemption-bound", a.options.preemption_bound, 0, 64,
                  "most preemptions per schedule");
  unsigned_option(ex, "--max-schedules", a.options.max_schedules, 1, std::uint64_t{1} << 40,
                  "stop after this many");
  ex->add_option("--mutant", a.mutant, "explore under a planted bug (mutants build)");
  ex->add_option("--out", a.out_dir, "directory for shrunk failing scenarios")
      ->capture_default_str();
  seconds_option(ex, "--shrink-seconds", a.shrink_seconds, 0, 86400,
                 "time to shrink each failure (0: no shrink)");
  unsigned_option(ex, "--show", a.show, 0, 1000000, "distinct failures to print and shrink");
  unsigned_option(ex, "--split-depth", a.options.split_depth, 0, 16,
                  "subtrees below the first D branching decisions, each with its own dedup "
                  "table (needed by --shard; 0: one table for the whole space)");
  ex->add_option("--shard", a.shard,
                 "I/N: explore only subtrees k with k mod N == I (with --split-depth)")
      ->capture_default_str();
  ex->add_flag("--json", a.json,
               "JSON lines on stdout: a campaign header, one line per subtree and per failing "
               "schedule, a summary");
}

struct ExplainArgs {
  std::string file;
  std::string format = "text";
  std::string out;
};

void add_explain(CLI::App& app, ExplainArgs& a) {
  auto* xp = app.add_subcommand("explain", "narrate a scenario step by step, for learners");
  xp->add_option("FILE", a.file, "scenario file")->required();
  xp->add_option("--format", a.format,
                 "text (stdout), dot (one graph per step), html (a step viewer page) or json "
                 "(the explain model, stdout)")
      ->check(CLI::IsMember({"text", "dot", "html", "json"}))
      ->capture_default_str();
  xp->add_option("--out", a.out,
                 "dot: a directory (default explain-<stem>/); html: a file (default "
                 "explain-<stem>.html)");
}

void add_merge(CLI::App& app, cowstate::cli::MergeArgs& a) {
  auto* mg = app.add_subcommand(
      "merge", "merge the JSON lines of a campaign's shards and check they cover it exactly once");
  mg->add_option("FILE", a.files, "shard files (fuzz/explore --json); - or none: stdin");
  mg->add_flag("--json", a.json, "one JSON summary line instead of text");
}

}  // namespace

int main(int argc, char** argv) {
  cowstate::cli::set_invoked_as(argc > 0 ? argv[0] : nullptr);
  CLI::App app{
      "cowstate: deterministic simulation testbed for the copy-on-write state map and the keyed "
      "state backend.\n"
      "Exit codes: 0 pass, 1 correctness failure, 2 bad input or usage, 3 crash or assertion "
      "caught, 4 stuck schedule (step bound hit)."};
  app.require_subcommand(1);
  cowstate::cli::add_version_flag(app, "cowstate");
  FuzzArgs fuzz;
  add_fuzz(app, fuzz);
  ReplayArgs replay;
  add_replay(app, replay);
  cowstate::cli::KillMatrixOptions matrix;
  add_mutants(app, matrix);
  RunArgs run;
  add_run(app, run);
  ExploreArgs explore;
  add_explore(app, explore);
  ExplainArgs explain;
  add_explain(app, explain);
  cowstate::cli::MergeArgs merge;
  add_merge(app, merge);
  cowstate::cli::CheckpointToolArgs checkpoint;
  cowstate::cli::add_checkpoint_tool(app, checkpoint);

  if (!known_subcommand(app, argc, argv)) return kExitUsage;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : kExitUsage;
  }
  cowstate::cli::prepare_output();
  const auto got = [&app](const char* name) { return app.got_subcommand(name); };
  if (got("fuzz")) return cmd_fuzz(fuzz);
  if (got("replay")) return cmd_replay(replay.file, replay.timing);
  if (got("run")) return cmd_run(run.files, run.mutant, run.trace, run.timing, run.crash_states);
  if (got("explore")) return cmd_explore(explore);
  if (got("explain")) return cmd_explain(explain.file, explain.format, explain.out);
  if (got("mutants")) return cowstate::cli::run_kill_matrix(matrix);
  if (got("merge")) return cowstate::cli::run_merge(merge);
  if (got("checkpoint")) return cowstate::cli::run_checkpoint_tool(checkpoint);
  return kExitUsage;
}
