// cowstate: the command-line front of the simulator.
//
//   cowstate fuzz      a campaign of seeded runs
//   cowstate replay    reruns a recorded failing case exactly
//   cowstate mutants   fuzzes every planted bug (mutants build) and reports time to kill
//
// Exit codes: 0 pass, 1 correctness failure, 2 bad input or usage, 3 crash or assertion
// caught, 4 stuck schedule (step bound hit).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cowstate/hooks.h"
#include "cowstate/sim/campaign.h"
#include "cowstate/sim/run.h"

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
  std::string cmd = "cowstate fuzz --seed " + std::to_string(spec.seed) + " --runs 1 --ops " +
                    std::to_string(spec.workload.ops_max) + " --strategy " + spec.strategy +
                    " --deep-check-every " + std::to_string(spec.workload.deep_check_every);
  if (spec.strategy == "pct") cmd += " --pct-depth " + std::to_string(spec.pct_depth);
  return cmd;
}

void set_crash_hint(const CaseSpec& spec) {
  const std::string hint = "replay: " + replay_command(spec, "") + "\n";
  std::snprintf(g_crash_hint, sizeof g_crash_hint, "%s", hint.c_str());
}

void print_failure(const FinishedRun& run, const std::string& case_file) {
  const RunResult& r = run.result;
  std::printf("\nFAILED: seed %llu, strategy %s, outcome %s (exit %d)\n",
              static_cast<unsigned long long>(run.spec.seed), run.spec.strategy.c_str(),
              outcome_name(r.outcome), exit_code(r.outcome));
  std::printf("  check: %s\n  what:  %s\n", r.check.c_str(), r.message.c_str());
  std::printf("  options: %s\n  last trace lines:\n", run.spec.workload.to_string().c_str());
  for (const std::string& line : r.trace) std::printf("    %s\n", line.c_str());
  std::printf("  replay: %s\n", replay_command(run.spec, case_file).c_str());
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
                        {"options", run.spec.workload.to_string()}};
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

int cmd_fuzz(const CampaignOptions& options, bool json, const std::string& out_dir) {
  const bool tty = isatty(2) != 0 && !json;
  if (!json) {
    std::printf(
        "cowstate fuzz: seed %llu, %s%s, strategy %s, %u ops per run, shard %u/%u\n",
        static_cast<unsigned long long>(options.seed),
        options.runs ? (std::to_string(options.runs) + " runs").c_str() : "",
        options.time_seconds > 0 ? (" " + std::to_string(options.time_seconds) + " s").c_str() : "",
        options.strategy.c_str(), options.ops, options.shard_index, options.shard_count);
  }
  std::string case_file;
  auto on_run = [&](const FinishedRun& run) {
    set_crash_hint(run.spec);
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
  set_crash_hint(first);
  if (!json)
    std::printf("first run: seed %llu options %s\n", static_cast<unsigned long long>(first.seed),
                first.workload.to_string().c_str());
  const CampaignSummary s = run_campaign(options, on_run, on_progress);
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

int cmd_mutants(double seconds_per_mutant, std::uint32_t ops, bool json) {
#if defined(COWSTATE_MUTANTS) && COWSTATE_MUTANTS
  namespace mu = cowstate::mutants;
  // A sanity run first: without any mutant the campaign must pass.
  std::size_t killed = 0;
  std::vector<double> kill_times;
  if (!json) {
    std::printf("%-30s %-6s %9s %12s  %s\n", "mutant", "killed", "time (s)", "seed", "caught by");
  }
  for (const mu::MutantInfo& info : mu::kCatalog) {
    mu::active() = info.mutant;
    CampaignOptions options;
    options.seed = 1;
    options.time_seconds = seconds_per_mutant;
    options.ops = ops;
    options.deep_check_every = 1;
    std::optional<FinishedRun> kill;
    const CampaignSummary s = run_campaign(
        options, [&](const FinishedRun& run) { set_crash_hint(run.spec); }, nullptr);
    if (s.first_failure) kill = s.first_failure;
    mu::active() = mu::Mutant::none;
    if (kill) {
      ++killed;
      kill_times.push_back(s.seconds);
    }
    if (json) {
      nlohmann::json j{{"mutant", info.name},
                       {"killed", kill.has_value()},
                       {"seconds", s.seconds},
                       {"runs", s.runs}};
      if (kill) {
        j["seed"] = kill->spec.seed;
        j["check"] = kill->result.check;
        j["outcome"] = outcome_name(kill->result.outcome);
      }
      std::cout << j.dump() << "\n";
    } else {
      std::printf(
          "%-30s %-6s %9.3f %12s  %s\n", info.name, kill ? "yes" : "NO", s.seconds,
          kill ? std::to_string(kill->spec.seed).c_str() : "-",
          kill ? (kill->result.check + " (" + outcome_name(kill->result.outcome) + ")").c_str()
               : "-");
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
  }
  return killed == total ? 0 : 1;
#else
  (void)seconds_per_mutant;
  (void)ops;
  (void)json;
  std::fprintf(stderr,
               "cowstate mutants: this build has no mutants; configure with the `mutants` preset "
               "(cmake --preset mutants)\n");
  return kExitUsage;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "cowstate: deterministic simulation testbed for the copy-on-write state map.\n"
      "Exit codes: 0 pass, 1 correctness failure, 2 bad input or usage, 3 crash or assertion "
      "caught, "
      "4 stuck schedule (step bound hit)."};
  app.require_subcommand(1);

  CampaignOptions fuzz;
  bool fuzz_json = false;
  std::string out_dir, shard = "0/1";
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
  f->add_option("--out", out_dir, "directory for failing case files");

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
    return cmd_fuzz(fuzz, fuzz_json, out_dir);
  }
  if (*r) return cmd_replay(replay_file);
  if (*m) return cmd_mutants(per_mutant, mutant_ops, mutants_json);
  return kExitUsage;
}
