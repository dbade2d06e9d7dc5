// cowstate: the command-line front of the simulator.
//
//   cowstate fuzz      a campaign of seeded runs (--workload map: one map; backend: a keyed
//                      backend with checkpoints on disk, faults and rescaling restores)
//   cowstate replay    reruns a recorded failing case exactly
//   cowstate mutants   fuzzes every planted bug (mutants build) and reports time to kill
//   cowstate run       runs scenario files (scenarios/, docs/scenario-format.md)
//   cowstate explore   runs every interleaving of a scenario's tasks within bounds
//   cowstate explain   narrates a scenario step by step (text, or one Graphviz graph per step)
//
// Every failure found by fuzz, explore or mutants is shrunk to a scenario file.
//
// Exit codes: 0 pass, 1 correctness failure, 2 bad input or usage, 3 crash or assertion
// caught, 4 stuck schedule (step bound hit).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cowstate/hooks.h"
#include "cowstate/sim/campaign.h"
#include "cowstate/sim/explain.h"
#include "cowstate/sim/explore.h"
#include "cowstate/sim/run.h"
#include "cowstate/sim/scenario.h"
#include "cowstate/sim/shrink.h"

namespace {

using namespace cowstate::sim;

constexpr int kExitUsage = 2;
constexpr int kExitCrash = 3;

// What a crash handler prints: the run in flight, as a command that reruns it.
char g_crash_hint[512] = "";

[[maybe_unused]] void on_fatal_signal(int sig) {
  const char* name = sig == SIGSEGV   ? "SIGSEGV"
                     : sig == SIGABRT ? "SIGABRT"
                     : sig == SIGBUS  ? "SIGBUS"
                                      : "signal";
  const char prefix[] = "\ncowstate: crashed with ";
  [[maybe_unused]] auto r1 = write(2, prefix, sizeof prefix - 1);
  [[maybe_unused]] auto r2 = write(2, name, std::strlen(name));
  [[maybe_unused]] auto r3 = write(2, "\n", 1);
  [[maybe_unused]] auto r4 = write(2, g_crash_hint, std::strlen(g_crash_hint));
  _exit(kExitCrash);
}

void install_crash_handlers() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return;  // the sanitizer's own report says more than ours would
#else
  for (int sig : {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL}) std::signal(sig, on_fatal_signal);
#endif
}

std::string replay_command(const CaseSpec& spec, const std::string& case_file) {
  if (!case_file.empty()) return "cowstate replay " + case_file;
  const std::uint32_t deep = spec.kind == WorkloadKind::backend ? spec.backend.deep_check_every
                                                                : spec.workload.deep_check_every;
  std::string cmd = "cowstate fuzz --seed " + std::to_string(spec.seed) + " --runs 1 --ops " +
                    std::to_string(case_ops(spec)) + " --strategy " + spec.strategy +
                    " --deep-check-every " + std::to_string(deep);
  if (spec.kind == WorkloadKind::backend) cmd += " --workload backend";
  if (spec.strategy == "pct") cmd += " --pct-depth " + std::to_string(spec.pct_depth);
  return cmd;
}

void set_crash_hint_text(const std::string& hint) {
  std::snprintf(g_crash_hint, sizeof g_crash_hint, "%s\n", hint.c_str());
}

void set_crash_hint(const CaseSpec& spec) {
  set_crash_hint_text("replay: " + replay_command(spec, ""));
}

void print_failure(const FinishedRun& run, const std::string& case_file) {
  const RunResult& r = run.result;
  std::printf("\nFAILED: seed %llu, strategy %s, outcome %s (exit %d)\n",
              static_cast<unsigned long long>(run.spec.seed), run.spec.strategy.c_str(),
              outcome_name(r.outcome), exit_code(r.outcome));
  std::printf("  check: %s\n  what:  %s\n", r.check.c_str(), r.message.c_str());
  std::printf("  options: %s\n  last trace lines:\n", case_options(run.spec).c_str());
  for (const std::string& line : r.trace) std::printf("    %s\n", line.c_str());
  std::printf("  replay: %s\n", replay_command(run.spec, case_file).c_str());
}

// The planted bug switched on in this process ("" when none, or not a mutants build).
std::string active_mutant_name() {
#if defined(COWSTATE_MUTANTS) && COWSTATE_MUTANTS
  for (const auto& info : cowstate::mutants::kCatalog) {
    if (info.mutant == cowstate::mutants::active()) return info.name;
  }
#endif
  return "";
}

// Reads a whole file; nullopt (with a message on stderr) when it cannot.
std::optional<std::string> read_file(const std::string& path, const char* who) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "%s: cannot open %s: %s\n", who, path.c_str(), std::strerror(errno));
    return std::nullopt;
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::optional<Scenario> load_scenario(const std::string& path, const char* who) {
  auto text = read_file(path, who);
  if (!text) return std::nullopt;
  ParseError error;
  auto s = parse_scenario(*text, path, &error);
  if (!s) std::fprintf(stderr, "%s: %s\n", who, error.to_string().c_str());
  return s;
}

// Writes `text` to DIR/NAME (creating DIR); returns the path, or "" after a message.
std::string write_file(const std::string& dir, const std::string& name, const std::string& text) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string path = dir + "/" + name;
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) {
    std::fprintf(stderr, "cowstate: cannot write %s\n", path.c_str());
    return "";
  }
  return path;
}

// Shrinks a failing scenario and writes it; prints what it did. Returns the shrink result.
ShrinkResult shrink_and_write(const Scenario& failing, const RunResult& failure,
                              const std::string& origin, const std::string& out_dir,
                              const std::string& name, double seconds, bool show = true) {
  ShrinkOptions options;
  options.max_seconds = seconds;
  ShrinkResult shrunk = shrink(failing, failure.outcome, failure.check, options);
  // Under a planted bug the scenario is a negative one: it names the mutant it kills.
  const std::string mutant = active_mutant_name();
  if (!mutant.empty()) shrunk.scenario.kills = mutant;
  if (!shrunk.reproduced) {
    std::printf(
        "  shrink: the recorded schedule did not reproduce the failure (%s); the "
        "unshrunk scenario is written instead\n",
        outcome_name(shrunk.result.outcome));
  }
  const std::string header =
      "Found by: " + origin + "\nFails:    " + std::string(outcome_name(failure.outcome)) +
      " at check " + failure.check + "\n          " + failure.message +
      "\nShrunk:   " + std::to_string(shrunk.steps_before) + " steps -> " +
      std::to_string(shrunk.steps_after) + " steps in " + std::to_string(shrunk.runs) +
      " runs\nReplay:   cowstate run " + (mutant.empty() ? "" : "--mutant kills ") +
      "FILE (exits " + std::to_string(exit_code(failure.outcome)) + ")";
  const std::string text = print_scenario(shrunk.scenario, header);
  const std::string path = out_dir.empty() ? "" : write_file(out_dir, name, text);
  if (!show) return shrunk;
  std::printf("  shrunk %zu -> %zu steps (%llu runs)%s%s\n", shrunk.steps_before,
              shrunk.steps_after, static_cast<unsigned long long>(shrunk.runs),
              path.empty() ? "" : "; written to ", path.c_str());
  std::printf("----- scenario -----\n%s--------------------\n", text.c_str());
  return shrunk;
}

ShrinkResult shrink_case(const CaseSpec& spec, const RunResult& failure, const std::string& out_dir,
                         double seconds, const std::string& name = "", bool show = true) {
  std::unique_ptr<Strategy> strategy = make_strategy(spec.strategy, spec.pct_depth, case_ops(spec));
  RunConfig config = config_for_case(spec);
  config.record = true;
  const RunResult recorded = run_once(config, *strategy);
  const Scenario scenario = to_scenario(config, recorded);
  return shrink_and_write(
      scenario, failure, replay_command(spec, ""), out_dir,
      name.empty() ? "fuzz-seed-" + std::to_string(spec.seed) + ".scenario" : name, seconds, show);
}

nlohmann::json run_json(const FinishedRun& run) {
  const RunResult& r = run.result;
  return nlohmann::json{{"run", run.index},
                        {"seed", run.spec.seed},
                        {"strategy", run.spec.strategy},
                        {"outcome", outcome_name(r.outcome)},
                        {"check", r.check},
                        {"message", r.message},
                        {"steps", r.stats.steps},
                        {"ops", r.stats.ops},
                        {"snapshots", r.stats.snapshots},
                        {"snapshots_checked", r.stats.snapshots_checked},
                        {"entries_checked", r.stats.entries_checked},
                        {"trace_hash", r.trace_hash},
                        {"workload", run.spec.kind == WorkloadKind::backend ? "backend" : "map"},
                        {"options", case_options(run.spec)}};
}

bool parse_shard(const std::string& text, std::uint32_t* index, std::uint32_t* count) {
  const std::size_t slash = text.find('/');
  if (slash == std::string::npos) return false;
  try {
    std::size_t used = 0;
    const unsigned long i = std::stoul(text.substr(0, slash), &used);
    if (used != slash) return false;
    const std::string rest = text.substr(slash + 1);
    const unsigned long n = std::stoul(rest, &used);
    if (used != rest.size() || n == 0 || i >= n || n > 1000000) return false;
    *index = static_cast<std::uint32_t>(i);
    *count = static_cast<std::uint32_t>(n);
    return true;
  } catch (...) {
    return false;
  }
}

std::string write_case_file(const std::string& dir, const FinishedRun& run) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string path = dir + "/case-" + std::to_string(run.spec.seed) + ".txt";
  std::ofstream out(path);
  out << format_case(run.spec);
  if (!out) {
    std::fprintf(stderr, "cowstate: cannot write %s\n", path.c_str());
    return "";
  }
  return path;
}

int cmd_fuzz(const CampaignOptions& options, bool json, const std::string& out_dir,
             double shrink_seconds) {
  const bool tty = isatty(2) != 0 && !json;
  if (!json) {
    std::printf(
        "cowstate fuzz: seed %llu, %s%s, strategy %s, %u ops per run, shard %u/%u, workload %s\n",
        static_cast<unsigned long long>(options.seed),
        options.runs ? (std::to_string(options.runs) + " runs").c_str() : "",
        options.time_seconds > 0 ? (" " + std::to_string(options.time_seconds) + " s").c_str() : "",
        options.strategy.c_str(), options.ops, options.shard_index, options.shard_count,
        options.workload == WorkloadKind::backend ? "backend" : "map");
  }
  std::string case_file;
  auto on_run = [&](const FinishedRun& run) {
    if (json) std::cout << run_json(run).dump() << "\n" << std::flush;
    if (run.result.outcome != Outcome::pass && !out_dir.empty() && case_file.empty()) {
      case_file = write_case_file(out_dir, run);
    }
  };
  auto on_progress = [&](const CampaignSummary& s) {
    if (!tty) return;
    std::fprintf(stderr, "\r  runs %llu  steps/s %.0f  snapshots checked %llu  failures %llu   ",
                 static_cast<unsigned long long>(s.runs),
                 s.seconds > 0 ? static_cast<double>(s.totals.steps) / s.seconds : 0.0,
                 static_cast<unsigned long long>(s.totals.snapshots_checked),
                 static_cast<unsigned long long>(s.failures));
  };
  // The first run's options are printed before its first step.
  const CaseSpec first = case_for_run(options, options.shard_index);
  if (!json)
    std::printf("first run: seed %llu options %s\n", static_cast<unsigned long long>(first.seed),
                case_options(first).c_str());
  const CampaignSummary s = run_campaign(options, set_crash_hint, on_run, on_progress);
  if (tty) std::fprintf(stderr, "\n");
  if (!json) {
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
  if (s.first_failure) {
    if (!json) print_failure(*s.first_failure, case_file);
    if (!case_file.empty() && !json) std::printf("  case written to %s\n", case_file.c_str());
    if (!json && shrink_seconds > 0) {
      shrink_case(s.first_failure->spec, s.first_failure->result, out_dir, shrink_seconds);
    }
    return exit_code(s.first_failure->result.outcome);
  }
  if (!json) std::printf("PASS\n");
  return 0;
}

int cmd_replay(const std::string& file) {
  std::ifstream in(file);
  if (!in) {
    std::fprintf(stderr, "cowstate replay: cannot open %s\n", file.c_str());
    return kExitUsage;
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string error;
  auto spec = parse_case(buffer.str(), file, &error);
  if (!spec) {
    std::fprintf(stderr, "cowstate replay: %s\n", error.c_str());
    return kExitUsage;
  }
  set_crash_hint(*spec);
  const auto start = std::chrono::steady_clock::now();
  FinishedRun run;
  run.spec = *spec;
  run.result = run_case(*spec);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::printf("replayed seed %llu (%s) in %.1f ms: %s", static_cast<unsigned long long>(spec->seed),
              spec->strategy.c_str(), ms, outcome_name(run.result.outcome));
  if (!run.result.check.empty()) std::printf(" [%s]", run.result.check.c_str());
  std::printf("\n");
  if (spec->trace_hash != 0) {
    const bool same = spec->trace_hash == run.result.trace_hash;
    std::printf("trace hash %llu %s the recorded run\n",
                static_cast<unsigned long long>(run.result.trace_hash),
                same ? "matches" : "DIFFERS FROM");
  }
  if (run.result.outcome != Outcome::pass) print_failure(run, file);
  return exit_code(run.result.outcome);
}

#if defined(COWSTATE_MUTANTS) && COWSTATE_MUTANTS
const cowstate::mutants::MutantInfo* find_mutant(const std::string& name) {
  for (const auto& info : cowstate::mutants::kCatalog) {
    if (name == info.name) return &info;
  }
  return nullptr;
}
#endif

// Activates a mutant for one scenario: "" none, "kills" the scenario's own, else by name.
// Returns false (after a message) when that is not possible in this build.
bool activate_mutant(const std::string& which, const Scenario& s) {
  if (which.empty()) return true;
  const std::string name = which == "kills" ? s.kills : which;
  if (name.empty()) {
    std::fprintf(stderr, "cowstate run: %s names no mutant (`kills NAME`)\n", s.file.c_str());
    return false;
  }
#if defined(COWSTATE_MUTANTS) && COWSTATE_MUTANTS
  const auto* info = find_mutant(name);
  if (info == nullptr) {
    std::fprintf(stderr, "cowstate run: %s: unknown mutant '%s'\n", s.file.c_str(), name.c_str());
    return false;
  }
  cowstate::mutants::active() = info->mutant;
  return true;
#else
  std::fprintf(stderr, "cowstate run: mutant '%s' needs a mutants build (cmake --preset mutants)\n",
               name.c_str());
  return false;
#endif
}

void deactivate_mutants() {
#if defined(COWSTATE_MUTANTS) && COWSTATE_MUTANTS
  cowstate::mutants::active() = cowstate::mutants::Mutant::none;
#endif
}

void print_run_failure(const RunResult& r) {
  std::printf("  outcome: %s (exit %d)\n  check:   %s\n  what:    %s\n", outcome_name(r.outcome),
              exit_code(r.outcome), r.check.c_str(), r.message.c_str());
  std::printf("  last trace lines:\n");
  for (const std::string& line : r.trace) std::printf("    %s\n", line.c_str());
}

int cmd_run(const std::vector<std::string>& files, const std::string& mutant, bool full_trace) {
  int result = 0;
  for (const std::string& file : files) {
    auto s = load_scenario(file, "cowstate run");
    if (!s) {
      if (result == 0) result = kExitUsage;
      continue;
    }
    if (!activate_mutant(mutant, *s)) return kExitUsage;
    const auto start = std::chrono::steady_clock::now();
    const RunResult r = run_scenario(*s, full_trace);
    deactivate_mutants();
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::printf(
        "%s %s: %zu steps in %.1f ms; %llu ops, %llu snapshots checked, %llu entries "
        "checked, %llu deep checks\n",
        r.outcome == Outcome::pass ? "PASS" : "FAIL", file.c_str(), s->step_count(), ms,
        static_cast<unsigned long long>(r.stats.ops),
        static_cast<unsigned long long>(r.stats.snapshots_checked),
        static_cast<unsigned long long>(r.stats.entries_checked),
        static_cast<unsigned long long>(r.stats.deep_checks));
    if (full_trace) {
      for (const std::string& line : r.trace) std::printf("    %s\n", line.c_str());
    }
    if (r.outcome != Outcome::pass) {
      print_run_failure(r);
      if (result == 0) result = exit_code(r.outcome);
    }
  }
  return result;
}

// The scenario with its interleaving left free: pauses and `continue` lines dropped.
Scenario freed(const Scenario& s) {
  Scenario out;
  out.config = s.config;
  out.config.fixed_schedule = false;
  out.kills = s.kills;
  out.file = s.file;
  // A fixed schedule's expectations hold where they stand; only those after its last step
  // describe the end of every interleaving.
  std::size_t last_step = 0;
  for (std::size_t i = 0; i < s.items.size(); ++i) {
    if (std::holds_alternative<StepLine>(s.items[i])) last_step = i;
  }
  for (std::size_t i = 0; i < s.items.size(); ++i) {
    const ScenarioItem& item = s.items[i];
    if (const auto* l = std::get_if<StepLine>(&item)) {
      if (l->action.kind == ActionKind::resume) continue;
      StepLine copy = *l;
      copy.pause.clear();
      // `release` needs its serializer between steps, which a free schedule cannot promise.
      if (copy.action.kind == ActionKind::release) copy.action.kind = ActionKind::cancel;
      out.items.emplace_back(std::move(copy));
    } else if (std::get<Expectation>(item).kind != ExpectKind::copied &&
               (!s.config.fixed_schedule || i > last_step)) {
      out.items.push_back(item);
    }
  }
  return out;
}

int cmd_explore(const std::string& file, const ExploreOptions& options, const std::string& mutant,
                const std::string& out_dir, double shrink_seconds, std::size_t show_failures) {
  auto loaded = load_scenario(file, "cowstate explore");
  if (!loaded) return kExitUsage;
  const Scenario s = freed(*loaded);
  if (!activate_mutant(mutant, s)) return kExitUsage;
  RunConfig config;
  config.seed = s.config.seed;
  config.scenario = &s;
  const auto start = std::chrono::steady_clock::now();
  const ExploreResult r = explore(config, options);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("cowstate explore %s: preemption bound %u, max schedules %llu\n", file.c_str(),
              options.preemption_bound, static_cast<unsigned long long>(options.max_schedules));
  std::printf("schedules explored %llu, pruned as equivalent %llu, steps %llu, %s, %.2f s\n",
              static_cast<unsigned long long>(r.schedules),
              static_cast<unsigned long long>(r.pruned), static_cast<unsigned long long>(r.steps),
              r.complete ? "space exhausted" : "stopped at --max-schedules", seconds);
  std::printf("failures %zu\n", r.failures.size());
  int result = 0;
  std::set<std::string> shown;
  for (std::size_t i = 0; i < r.failures.size(); ++i) {
    const ExploredFailure& f = r.failures[i];
    if (result == 0) result = exit_code(f.result.outcome);
    const std::string key = std::string(outcome_name(f.result.outcome)) + "/" + f.result.check;
    if (shown.size() >= show_failures || !shown.insert(key).second) continue;
    std::printf("\nfailure %zu: %s at check %s\n  %s\n", i + 1, outcome_name(f.result.outcome),
                f.result.check.c_str(), f.result.message.c_str());
    RunConfig recording = config;
    recording.record = true;
    auto replay = make_replay_strategy(f.schedule);
    const RunResult recorded = run_once(recording, *replay);
    const Scenario fixed = to_scenario(config, recorded);
    const std::string stem = std::filesystem::path(file).stem().string();
    shrink_and_write(fixed, f.result, "cowstate explore " + file, out_dir,
                     stem + "-explore-" + std::to_string(i + 1) + ".scenario", shrink_seconds);
  }
  deactivate_mutants();
  return result;
}

// Narrates one scenario: text on stdout, or one DOT file per step in out_dir (default
// explain-<stem>/). Exits with the run's code.
int cmd_explain(const std::string& file, const std::string& format, std::string out_dir) {
  auto s = load_scenario(file, "cowstate explain");
  if (!s) return kExitUsage;
  if (s->config.backend) {
    std::fprintf(stderr,
                 "cowstate explain: %s is a backend scenario; explain draws one map's buckets and "
                 "chains, so it narrates map scenarios only (run this one with `cowstate run "
                 "--trace`)\n",
                 file.c_str());
    return kExitUsage;
  }
  const Explanation e = explain_scenario(*s);
  if (format == "text") {
    std::fputs(explain_text(e).c_str(), stdout);
    return exit_code(e.result.outcome);
  }
  if (out_dir.empty()) out_dir = "explain-" + std::filesystem::path(file).stem().string();
  const std::vector<std::string> graphs = explain_dot(e);
  for (std::size_t i = 0; i < graphs.size(); ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "step-%03zu.dot", i + 1);
    if (write_file(out_dir, name, graphs[i]).empty()) return kExitUsage;
  }
  std::printf("wrote %zu graphs to %s/ (render: dot -Tsvg -O %s/*.dot)\n", graphs.size(),
              out_dir.c_str(), out_dir.c_str());
  std::printf("outcome: %s (exit %d)%s%s\n", outcome_name(e.result.outcome),
              exit_code(e.result.outcome), e.result.check.empty() ? "" : " at check ",
              e.result.check.c_str());
  return exit_code(e.result.outcome);
}

#if defined(COWSTATE_MUTANTS) && COWSTATE_MUTANTS
// The hand-minimized negative scenarios of a directory, by the mutant each `kills`.
std::map<std::string, Scenario> negative_scenarios(const std::string& dir, bool* ok) {
  std::map<std::string, Scenario> out;
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
#endif

int cmd_mutants(double seconds_per_mutant, std::uint32_t ops, bool json,
                const std::string& negative_dir, const std::string& out_dir,
                double shrink_seconds) {
#if defined(COWSTATE_MUTANTS) && COWSTATE_MUTANTS
  namespace mu = cowstate::mutants;
  bool ok = true;
  std::map<std::string, Scenario> negatives;
  if (!negative_dir.empty()) negatives = negative_scenarios(negative_dir, &ok);
  std::size_t killed = 0;
  std::vector<double> kill_times;
  if (!json) {
    std::printf("%-33s %-6s %8s %6s  %-18s %6s %5s %6s  %s\n", "mutant", "killed", "time (s)",
                "seed", "caught by", "shrunk", "hand", "ratio", "negative scenario");
  }
  for (const mu::MutantInfo& info : mu::kCatalog) {
    mu::active() = info.mutant;
    CampaignOptions options;
    options.seed = 1;
    options.time_seconds = seconds_per_mutant;
    options.ops = ops;
    options.deep_check_every = 1;
    // The backend's planted bugs are fuzzed with the backend workload, the map's with the map's.
    if (mu::is_backend_mutant(info.mutant)) options.workload = WorkloadKind::backend;
    std::optional<FinishedRun> kill;
    // A crash names the mutant and the phase (fuzz, shrink, negative scenario) it came in.
    const std::string under = std::string("under mutant ") + info.name;
    auto on_start = [&under](const CaseSpec& spec) {
      set_crash_hint_text("while fuzzing " + under + "; replay: " + replay_command(spec, ""));
    };
    const CampaignSummary s = run_campaign(options, on_start, nullptr, nullptr);
    if (s.first_failure) kill = s.first_failure;
    std::size_t shrunk_steps = 0;
    if (kill && shrink_seconds > 0) {
      set_crash_hint_text("while shrinking the kill " + under + " (" +
                          replay_command(kill->spec, "") + ")");
      shrunk_steps = shrink_case(kill->spec, kill->result, out_dir, shrink_seconds,
                                 std::string(info.name) + ".scenario", false)
                         .steps_after;
    }
    // The negative scenario must fail (exit 1) under its mutant and pass without it.
    std::string negative = negative_dir.empty() ? "-" : "MISSING";
    std::size_t hand_steps = 0;
    auto it = negatives.find(info.name);
    if (it != negatives.end()) {
      hand_steps = it->second.step_count();
      set_crash_hint_text("while replaying the negative scenario " + it->second.file + " " + under);
      const RunResult under_mutant = run_scenario(it->second);
      mu::active() = mu::Mutant::none;
      set_crash_hint_text("while replaying the negative scenario " + it->second.file +
                          " with no mutant active");
      const RunResult without = run_scenario(it->second);
      const bool fails = exit_code(under_mutant.outcome) == 1;
      const bool passes = without.outcome == Outcome::pass;
      negative = fails && passes ? "ok (" + under_mutant.check + ")"
                 : !fails        ? std::string("NOT KILLED: ") + outcome_name(under_mutant.outcome)
                                 : "FAILS WITHOUT THE MUTANT: " + without.check;
      ok = ok && fails && passes;
    } else {
      ok = ok && negative_dir.empty();
    }
    mu::active() = mu::Mutant::none;
    const double ratio = hand_steps > 0 && shrunk_steps > 0
                             ? static_cast<double>(shrunk_steps) / static_cast<double>(hand_steps)
                             : 0.0;
    if (ratio > 2.0) ok = false;
    if (kill) {
      ++killed;
      kill_times.push_back(s.seconds);
    }
    if (json) {
      nlohmann::json j{{"mutant", info.name},          {"killed", kill.has_value()},
                       {"seconds", s.seconds},         {"runs", s.runs},
                       {"shrunk_steps", shrunk_steps}, {"hand_steps", hand_steps},
                       {"negative", negative}};
      if (kill) {
        j["seed"] = kill->spec.seed;
        j["check"] = kill->result.check;
        j["outcome"] = outcome_name(kill->result.outcome);
      }
      std::cout << j.dump() << "\n";
    } else {
      std::printf(
          "%-33s %-6s %8.3f %6s  %-18s %6zu %5zu %6.2f  %s\n", info.name, kill ? "yes" : "NO",
          s.seconds, kill ? std::to_string(kill->spec.seed).c_str() : "-",
          kill ? (kill->result.check + " (" + outcome_name(kill->result.outcome) + ")").c_str()
               : "-",
          shrunk_steps, hand_steps, ratio, negative.c_str());
    }
  }
  const std::size_t total = std::size(mu::kCatalog);
  std::sort(kill_times.begin(), kill_times.end());
  if (!json) {
    std::printf("killed %zu of %zu", killed, total);
    if (!kill_times.empty()) {
      std::printf("; median time to kill %.3f s, worst %.3f s", kill_times[kill_times.size() / 2],
                  kill_times.back());
    }
    std::printf("\n");
    if (!negative_dir.empty()) {
      std::printf("negative scenarios (%s): %s; shrunk cases at most 2x the hand-minimized: %s\n",
                  negative_dir.c_str(), ok ? "all fail under their mutant only" : "PROBLEMS above",
                  ok ? "yes" : "see ratio column");
    }
  }
  return killed == total && ok ? 0 : 1;
#else
  (void)seconds_per_mutant;
  (void)ops;
  (void)json;
  (void)negative_dir;
  (void)out_dir;
  (void)shrink_seconds;
  std::fprintf(stderr,
               "cowstate mutants: this build has no mutants; configure with the `mutants` preset "
               "(cmake --preset mutants)\n");
  return kExitUsage;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "cowstate: deterministic simulation testbed for the copy-on-write state map and the keyed "
      "state backend.\n"
      "Exit codes: 0 pass, 1 correctness failure, 2 bad input or usage, 3 crash or assertion "
      "caught, "
      "4 stuck schedule (step bound hit)."};
  app.require_subcommand(1);

  CampaignOptions fuzz;
  bool fuzz_json = false;
  std::string out_dir = "cowstate-failures", shard = "0/1";
  auto* f = app.add_subcommand("fuzz", "run a fuzz campaign of seeded simulation runs");
  f->add_option("--seed", fuzz.seed, "base seed; run i uses seed + i")->capture_default_str();
  f->add_option("--runs", fuzz.runs, "number of runs (0: until --time runs out)")
      ->capture_default_str();
  f->add_option("--time", fuzz.time_seconds, "time budget in seconds")
      ->check(CLI::NonNegativeNumber);
  f->add_option("--ops", fuzz.ops, "writer operations per run")
      ->check(CLI::Range(1u, 10000000u))
      ->capture_default_str();
  f->add_option("--strategy", fuzz.strategy, "random or pct")
      ->check(CLI::IsMember({"random", "pct"}))
      ->capture_default_str();
  f->add_option("--pct-depth", fuzz.pct_depth, "PCT bug depth d")
      ->check(CLI::Range(1u, 64u))
      ->capture_default_str();
  f->add_option("--shard", shard, "I/N: run only indices i with i mod N == I")
      ->capture_default_str();
  f->add_option("--deep-check-every", fuzz.deep_check_every, "deep checks every N steps (0: never)")
      ->capture_default_str();
  f->add_flag("--json", fuzz_json, "one JSON line per finished run on stdout");
  f->add_option("--out", out_dir, "directory for failing case files and shrunk scenarios")
      ->capture_default_str();
  std::string fuzz_workload = "map";
  f->add_option("--workload", fuzz_workload,
                "map (one copy-on-write map) or backend (a keyed backend with checkpoints)")
      ->check(CLI::IsMember({"map", "backend"}))
      ->capture_default_str();
  double fuzz_shrink = 30;
  f->add_option("--shrink-seconds", fuzz_shrink, "time to shrink a failure (0: no shrink)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();

  std::string replay_file;
  auto* r = app.add_subcommand("replay", "rerun a recorded failing case exactly");
  r->add_option("FILE", replay_file, "case file written by fuzz --out")->required();

  double per_mutant = 10;
  std::uint32_t mutant_ops = 400;
  bool mutants_json = false;
  auto* m = app.add_subcommand("mutants",
                               "fuzz every planted bug and report time to kill (mutants build)");
  m->add_option("--time-per-mutant", per_mutant, "seconds of fuzzing per mutant")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  m->add_option("--ops", mutant_ops, "writer operations per run")
      ->check(CLI::Range(1u, 10000000u))
      ->capture_default_str();
  m->add_flag("--json", mutants_json, "one JSON line per mutant");
  std::string mutants_negative, mutants_out;
  double mutants_shrink = 10;
  m->add_option("--negative", mutants_negative,
                "directory of hand-minimized negative scenarios to check and compare with")
      ->check(CLI::ExistingDirectory);
  m->add_option("--out", mutants_out, "directory for the shrunk scenario of each kill");
  m->add_option("--shrink-seconds", mutants_shrink, "time to shrink each kill (0: no shrink)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();

  std::vector<std::string> run_files;
  std::string run_mutant;
  bool run_trace = false;
  auto* rn = app.add_subcommand("run", "run scenario files and check their expectations");
  rn->add_option("FILE", run_files, "scenario files")->required()->check(CLI::ExistingFile);
  rn->add_option("--mutant", run_mutant,
                 "run under a planted bug (mutants build); `kills`: the one the file names");
  rn->add_flag("--trace", run_trace, "print every trace line");

  std::string explore_file, explore_mutant, explore_out = "cowstate-failures";
  ExploreOptions explore_options;
  double explore_shrink = 20;
  std::size_t explore_show = 3;
  auto* ex = app.add_subcommand("explore", "run every interleaving of a scenario within bounds");
  ex->add_option("FILE", explore_file, "scenario file")->required()->check(CLI::ExistingFile);
  ex->add_option("--preemption-bound", explore_options.preemption_bound,
                 "most preemptions per schedule")
      ->check(CLI::Range(0u, 64u))
      ->capture_default_str();
  ex->add_option("--max-schedules", explore_options.max_schedules, "stop after this many")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 40))
      ->capture_default_str();
  ex->add_option("--mutant", explore_mutant, "explore under a planted bug (mutants build)");
  ex->add_option("--out", explore_out, "directory for shrunk failing scenarios")
      ->capture_default_str();
  ex->add_option("--shrink-seconds", explore_shrink, "time to shrink each failure (0: no shrink)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  ex->add_option("--show", explore_show, "distinct failures to print and shrink")
      ->capture_default_str();

  std::string explain_file, explain_format = "text", explain_out;
  auto* xp = app.add_subcommand("explain", "narrate a scenario step by step, for learners");
  xp->add_option("FILE", explain_file, "scenario file")->required()->check(CLI::ExistingFile);
  xp->add_option("--format", explain_format, "text (stdout) or dot (one graph per step)")
      ->check(CLI::IsMember({"text", "dot"}))
      ->capture_default_str();
  xp->add_option("--out", explain_out, "directory for dot files (default explain-<stem>/)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : kExitUsage;
  }
  install_crash_handlers();
  if (*f) {
    if (!parse_shard(shard, &fuzz.shard_index, &fuzz.shard_count)) {
      std::fprintf(stderr, "cowstate fuzz: --shard expects I/N with 0 <= I < N, found '%s'\n",
                   shard.c_str());
      return kExitUsage;
    }
    if (fuzz.runs == 0 && fuzz.time_seconds <= 0) fuzz.runs = 100;
    fuzz.workload = fuzz_workload == "backend" ? WorkloadKind::backend : WorkloadKind::map;
    return cmd_fuzz(fuzz, fuzz_json, out_dir, fuzz_shrink);
  }
  if (*r) return cmd_replay(replay_file);
  if (*rn) return cmd_run(run_files, run_mutant, run_trace);
  if (*ex) {
    return cmd_explore(explore_file, explore_options, explore_mutant, explore_out, explore_shrink,
                       explore_show);
  }
  if (*xp) return cmd_explain(explain_file, explain_format, explain_out);
  if (*m) {
    return cmd_mutants(per_mutant, mutant_ops, mutants_json, mutants_negative, mutants_out,
                       mutants_shrink);
  }
  return kExitUsage;
}
