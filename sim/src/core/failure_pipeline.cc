// The failure pipeline of the cowstate CLI; see failure_pipeline.h.
#include "core/failure_pipeline.h"

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/build_info.h"
#include "cowstate/assert.h"

namespace cowstate::cli {

namespace {

using sim::exit_code;
using sim::outcome_name;

std::string& invoked() {
  static std::string path = "cowstate";
  return path;
}

// What a crash handler prints: the run or phase in flight. A fixed buffer: the handler may
// not allocate.
char g_crash_hint[2048] = "";

[[maybe_unused]] void on_fatal_signal(int sig) {
  const char* name = sig == SIGSEGV   ? "SIGSEGV"
                     : sig == SIGABRT ? "SIGABRT"
                     : sig == SIGBUS  ? "SIGBUS"
                     : sig == SIGFPE  ? "SIGFPE"
                     : sig == SIGILL  ? "SIGILL"
                                      : "signal";
  const char prefix[] = "\ncowstate: crashed with ";
  [[maybe_unused]] auto r1 = write(2, prefix, sizeof prefix - 1);
  [[maybe_unused]] auto r2 = write(2, name, std::strlen(name));
  [[maybe_unused]] auto r3 = write(2, "\n", 1);
  [[maybe_unused]] auto r4 = write(2, g_crash_hint, std::strlen(g_crash_hint));
  _exit(kExitCrash);
}

}  // namespace

void set_invoked_as(const char* argv0) {
  const std::string a = argv0 != nullptr ? argv0 : "";
  if (a.find('/') == std::string::npos) {
    invoked() = a.empty() ? "cowstate" : a;  // found on PATH: the name pastes as it is
  } else {
    invoked() = pasteable(a);
  }
}

const std::string& invoked_as() { return invoked(); }

std::string pasteable(const std::string& path) {
  std::error_code ec;
  std::string p = std::filesystem::absolute(path, ec).lexically_normal().string();
  if (ec) p = path;
  if (p.find_first_of(" \t\n'\"\\$`!*?[](){};&|<>#~") == std::string::npos) return p;
  std::string quoted = "'";
  for (char c : p) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

void prepare_output() {
  if (isatty(1) == 0) std::setvbuf(stdout, nullptr, _IOLBF, 0);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return;  // the sanitizer's own report says more than ours would
#else
  for (int sig : {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL}) std::signal(sig, on_fatal_signal);
#endif
}

void set_crash_hint(const std::string& hint) {
  std::snprintf(g_crash_hint, sizeof g_crash_hint, "%s\n", hint.c_str());
}

void crash_if_asked(const char* phase) {
  const char* asked = std::getenv("COWSTATE_CRASH_WHILE");
  if (asked != nullptr && std::strcmp(asked, phase) == 0) std::raise(SIGSEGV);
}

std::string replay_command(const CaseSpec& spec, const std::string& case_file) {
  if (!case_file.empty()) return invoked_as() + " replay " + pasteable(case_file);
  const std::uint32_t deep = spec.options->deep_check_every();
  std::string cmd = invoked_as() + " fuzz --seed " + std::to_string(spec.seed) +
                    " --runs 1 --ops " + std::to_string(sim::case_ops(spec)) + " --strategy " +
                    spec.strategy + " --deep-check-every " + std::to_string(deep);
  cmd += " --workload " + std::string(spec.workload->name());
  if (spec.strategy == "pct") cmd += " --pct-depth " + std::to_string(spec.pct_depth);
  if (!spec.mutant.empty()) cmd += " --mutant " + spec.mutant;
  return cmd;
}

std::string write_file(const std::string& dir, const std::string& name, const std::string& text) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string path = (std::filesystem::path(dir) / name).string();
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) {
    std::fprintf(stderr, "cowstate: cannot write %s%s%s\n", path.c_str(), ec ? ": " : "",
                 ec ? ec.message().c_str() : "");
    return "";
  }
  return pasteable(path);
}

std::string write_case_file(const std::string& dir, const CaseSpec& spec) {
  return write_file(dir, "case-" + std::to_string(spec.seed) + ".txt", sim::format_case(spec));
}

void print_failure(const FinishedRun& run, const std::string& case_file) {
  const RunResult& r = run.result;
  std::printf("\nFAILED: seed %llu, strategy %s, outcome %s (exit %d)\n",
              static_cast<unsigned long long>(run.spec.seed), run.spec.strategy.c_str(),
              outcome_name(r.outcome), exit_code(r.outcome));
  std::printf("  failure: %s\n  what:    %s\n", r.signature().to_string().c_str(),
              r.message.c_str());
  std::printf("  options: %s\n  last trace lines:\n", sim::case_options(run.spec).c_str());
  for (const std::string& line : r.trace) std::printf("    %s\n", line.c_str());
  if (!case_file.empty()) std::printf("  case:    %s\n", case_file.c_str());
  std::printf("  replay:  %s\n", replay_command(run.spec, case_file).c_str());
  std::fflush(stdout);
}

void print_run_failure(const RunResult& r) {
  std::printf("  outcome: %s (exit %d)\n  failure: %s\n  what:    %s\n", outcome_name(r.outcome),
              exit_code(r.outcome), r.signature().to_string().c_str(), r.message.c_str());
  std::printf("  last trace lines:\n");
  for (const std::string& line : r.trace) std::printf("    %s\n", line.c_str());
}

Shrunk shrink_to_file(const Scenario& failing, const sim::FailureSignature& failure,
                      const ShrinkRequest& request) {
  sim::ShrinkOptions options;
  options.max_seconds = request.seconds;
  options.max_runs = request.runs;
  crash_if_asked("shrinking");
  Shrunk out;
  out.result = sim::shrink(failing, failure, options);
  sim::ShrinkResult& shrunk = out.result;
  if (!request.mutant.empty()) shrunk.scenario.kills = request.mutant;
  if (!shrunk.reproduced && request.show) {
    std::printf(
        "  shrink: the recorded schedule did not reproduce the failure (%s); the "
        "unshrunk scenario is written instead\n",
        shrunk.not_reproduced.c_str());
  }
  const int code = exit_code(shrunk.signature.outcome);
  std::error_code ec;
  const std::string destination =
      request.out_dir.empty()
          ? request.name
          : std::filesystem::absolute(std::filesystem::path(request.out_dir) / request.name, ec)
                .lexically_normal()
                .string();
  auto header = [&](const std::string& message) {
    std::string h = "Found by: " + request.origin + "\nFails:    " + shrunk.signature.to_string() +
                    "\n          " + message +
                    "\nShrunk:   " + std::to_string(shrunk.steps_before) + " steps -> " +
                    std::to_string(shrunk.steps_after) + " steps in " +
                    std::to_string(shrunk.runs) + " runs by cowstate " + sim::version_line();
    if (!request.out_dir.empty()) {
      h += "\nReplay:   " + invoked_as() + " run " +
           (request.mutant.empty() ? "" : "--mutant kills ") + pasteable(destination) + " (exits " +
           std::to_string(code) + ")";
    }
    return h;
  };
  // The text as it will be read back: run once more, its own message (naming its own lines)
  // goes into the header, and it must fail exactly as the shrinker said.
  const std::string draft = print_scenario(shrunk.scenario, header(shrunk.result.message));
  sim::ParseError error;
  const std::optional<Scenario> parsed = sim::parse_scenario(draft, destination, &error);
  const RunResult replayed = parsed ? sim::run_scenario(*parsed) : RunResult{};
  out.replays_same = parsed.has_value() && replayed.signature() == shrunk.signature;
  out.text = out.replays_same ? print_scenario(shrunk.scenario, header(replayed.message)) : draft;
  if (!out.replays_same) {
    std::printf("  shrink: the written scenario does not fail as %s but as %s (%s)\n",
                shrunk.signature.to_string().c_str(), replayed.signature().to_string().c_str(),
                parsed ? replayed.message.c_str() : error.to_string().c_str());
  }
  if (!request.out_dir.empty()) out.path = write_file(request.out_dir, request.name, out.text);
  if (!request.show) return out;
  std::printf("  shrunk %zu -> %zu steps (%llu runs)%s%s\n", shrunk.steps_before,
              shrunk.steps_after, static_cast<unsigned long long>(shrunk.runs),
              out.path.empty() ? "" : "; written to ", out.path.c_str());
  std::printf("----- scenario -----\n%s--------------------\n", out.text.c_str());
  if (!out.path.empty()) {
    std::printf("  replay the shrunk scenario: %s run %s%s\n", invoked_as().c_str(),
                request.mutant.empty() ? "" : "--mutant kills ", out.path.c_str());
  }
  std::fflush(stdout);
  return out;
}

std::optional<Shrunk> shrink_case(const CaseSpec& spec, const RunResult& failure,
                                  const ShrinkRequest& request) {
  std::unique_ptr<sim::Strategy> strategy =
      sim::make_strategy(spec.strategy, spec.pct_depth, sim::case_ops(spec));
  COWSTATE_ASSERT(strategy != nullptr, "REQUIRES", "a case names a known strategy");
  sim::RunConfig config = sim::config_for_case(spec);
  config.record = true;
  const RunResult recorded = sim::run_once(config, *strategy);
  const std::optional<Scenario> scenario = sim::to_scenario(config, recorded);
  if (!scenario) {
    if (request.show) {
      std::printf(
          "  shrink: nothing to shrink: the run failed in its setup, before its first "
          "step (%s)\n",
          recorded.message.c_str());
      std::fflush(stdout);
    }
    return std::nullopt;
  }
  return shrink_to_file(*scenario, failure.signature(), request);
}

nlohmann::json run_json(const FinishedRun& run, const std::string& campaign_id) {
  const RunResult& r = run.result;
  nlohmann::json j{{"type", "run"},
                   {"campaign_id", campaign_id},
                   {"run", run.index},
                   {"seed", run.spec.seed},
                   {"strategy", run.spec.strategy},
                   {"workload", run.spec.workload->name()},
                   {"outcome", outcome_name(r.outcome)},
                   {"exit_code", exit_code(r.outcome)},
                   {"check", r.check},
                   {"message", r.message},
                   {"trace_hash", sim::trace_hash_text(r.trace_hash)},
                   {"elapsed_ms", run.seconds * 1000.0},
                   {"options", sim::case_options(run.spec)},
                   {"version", sim::version_line()}};
  j.update(stats_json(r.stats));
  if (r.outcome != sim::Outcome::pass) j["signature"] = r.signature().to_string();
  return j;
}

nlohmann::json stats_json(const sim::RunStats& s) {
  return {{"steps", s.steps},
          {"ops", s.ops},
          {"snapshots", s.snapshots},
          {"snapshots_checked", s.snapshots_checked},
          {"entries_checked", s.entries_checked},
          {"deep_checks", s.deep_checks},
          {"yields", s.yields},
          {"probes", s.coverage.to_json()}};
}

bool FailureTally::add(const sim::FailureSignature& signature, std::uint64_t run,
                       std::uint64_t seed) {
  const std::string key = signature.to_string();
  auto it = index_.find(key);
  if (it != index_.end()) {
    ++entries_[it->second].runs;
    return false;
  }
  index_.emplace(key, entries_.size());
  entries_.push_back(Entry{signature, 1, run, seed, "", "", ""});
  return true;
}

FailureTally::Entry& FailureTally::at(const sim::FailureSignature& signature) {
  auto it = index_.find(signature.to_string());
  COWSTATE_ASSERT(it != index_.end(), "REQUIRES", "a signature counted before");
  return entries_[it->second];
}

std::uint64_t FailureTally::failures() const noexcept {
  std::uint64_t n = 0;
  for (const Entry& e : entries_) n += e.runs;
  return n;
}

void FailureTally::print() const {
  if (entries_.empty()) return;
  std::printf("\nfailures: %llu runs failed, %zu distinct\n",
              static_cast<unsigned long long>(failures()), entries_.size());
  for (const Entry& e : entries_) {
    std::printf("  %s: %llu run%s, first run %llu (seed %llu)\n", e.signature.to_string().c_str(),
                static_cast<unsigned long long>(e.runs), e.runs == 1 ? "" : "s",
                static_cast<unsigned long long>(e.first_run),
                static_cast<unsigned long long>(e.first_seed));
    if (!e.case_file.empty()) std::printf("    case:   %s\n", e.case_file.c_str());
    if (!e.shrunk_file.empty()) std::printf("    shrunk: %s\n", e.shrunk_file.c_str());
    std::printf("    replay: %s\n", e.replay.c_str());
  }
}

nlohmann::json FailureTally::to_json() const {
  nlohmann::json out = nlohmann::json::array();
  for (const Entry& e : entries_) {
    out.push_back({{"signature", e.signature.to_string()},
                   {"outcome", outcome_name(e.signature.outcome)},
                   {"check", e.signature.check},
                   {"runs", e.runs},
                   {"first_run", e.first_run},
                   {"first_seed", e.first_seed},
                   {"case_file", e.case_file},
                   {"shrunk_file", e.shrunk_file},
                   {"replay", e.replay}});
  }
  return out;
}

}  // namespace cowstate::cli
