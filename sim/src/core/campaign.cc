#include "cowstate/sim/campaign.h"

#include <charconv>
#include <chrono>
#include <cstdio>
#include <sstream>

#include "cowstate/assert.h"
#include "cowstate/sim/text.h"

namespace cowstate::sim {

std::unique_ptr<Strategy> make_strategy(const std::string& name, std::uint32_t pct_depth,
                                        std::uint32_t ops) {
  if (name == "random") return make_random_strategy();
  if (name == "pct") return make_pct_strategy(pct_depth, std::uint64_t{ops} * 3);
  return nullptr;
}

CaseSpec case_for_run(const CampaignOptions& options, std::uint64_t index) {
  CaseSpec spec;
  spec.seed = options.seed + index;
  spec.strategy = options.strategy;
  spec.pct_depth = options.pct_depth;
  spec.workload = options.workload;
  spec.options = options.workload->swarm(spec.seed, options.ops, options.deep_check_every);
  return spec;
}

RunConfig config_for_case(const CaseSpec& spec) {
  RunConfig config;
  config.seed = spec.seed;
  config.workload = spec.workload;
  config.options = spec.options;
  return config;
}

std::uint32_t case_ops(const CaseSpec& spec) { return spec.options->ops_max(); }

std::string case_options(const CaseSpec& spec) { return spec.options->to_string(); }

RunResult run_case(const CaseSpec& spec, bool keep_trace) {
  std::unique_ptr<Strategy> strategy = make_strategy(spec.strategy, spec.pct_depth, case_ops(spec));
  COWSTATE_ASSERT(strategy != nullptr, "REQUIRES", "unknown strategy in a case spec");
  RunConfig config = config_for_case(spec);
  config.keep_trace = keep_trace;
  return run_once(config, *strategy);
}

CampaignSummary run_campaign(const CampaignOptions& options,
                             const std::function<void(const CaseSpec&)>& on_start,
                             const std::function<void(const FinishedRun&)>& on_run,
                             const std::function<void(const CampaignSummary&)>& on_progress) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  Clock::time_point last_progress = start;
  CampaignSummary summary;
  auto elapsed = [&start] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  for (std::uint64_t index = options.shard_index;; index += options.shard_count) {
    if (options.runs != 0 && index >= options.runs) break;
    if (options.time_seconds > 0 && elapsed() >= options.time_seconds) {
      summary.stopped_by = StopReason::time;
      break;
    }
    FinishedRun run;
    run.index = index;
    run.spec = case_for_run(options, index);
    if (on_start) on_start(run.spec);
    const Clock::time_point run_start = Clock::now();
    run.result = run_case(run.spec);
    run.seconds = std::chrono::duration<double>(Clock::now() - run_start).count();
    run.spec.outcome = outcome_name(run.result.outcome);
    run.spec.check = run.result.check;
    run.spec.trace_hash = run.result.trace_hash;
    ++summary.runs;
    summary.totals += run.result.stats;
    summary.coverage.add(index, run.spec.seed, run.result.stats.coverage);
    const bool failed = run.result.outcome != Outcome::pass;
    if (failed) {
      ++summary.failures;
      if (!summary.first_failure) summary.first_failure = run;
    }
    summary.seconds = elapsed();
    if (on_run) on_run(run);
    if (on_progress && Clock::now() - last_progress > std::chrono::milliseconds(500)) {
      last_progress = Clock::now();
      on_progress(summary);
    }
    if (failed && options.max_failures != 0 && summary.failures >= options.max_failures) {
      summary.stopped_by = StopReason::max_failures;
      break;
    }
  }
  summary.seconds = elapsed();
  return summary;
}

const char* stop_reason_name(StopReason reason) noexcept {
  switch (reason) {
    case StopReason::runs:
      return "runs";
    case StopReason::time:
      return "time";
    case StopReason::max_failures:
      return "max_failures";
  }
  return "runs";
}

std::string trace_hash_text(std::uint64_t hash) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

std::string format_case(const CaseSpec& spec) {
  std::ostringstream out;
  out << "# cowstate failing case: `cowstate replay FILE` reruns it exactly.\n";
  if (!spec.version.empty()) out << "version " << spec.version << "\n";
  if (!spec.mutant.empty()) out << "mutant " << spec.mutant << "\n";
  out << "seed " << spec.seed << "\n"
      << "strategy " << spec.strategy << "\n"
      << "pct_depth " << spec.pct_depth << "\n";
  out << "workload " << spec.workload->name() << "\n";
  out << "options " << case_options(spec) << "\n"
      << "outcome " << spec.outcome << "\n"
      << "check " << (spec.check.empty() ? "-" : spec.check) << "\n"
      << "trace_hash " << trace_hash_text(spec.trace_hash) << "\n";
  return out.str();
}

namespace {

bool parse_u64(const std::string& v, std::uint64_t* out) {
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), *out);
  return ec == std::errc() && p == v.data() + v.size();
}

// 16 hex digits; a bare 0 (unknown) is what hand-written cases may say.
bool parse_trace_hash(const std::string& v, std::uint64_t* out) {
  if (v == "0") {
    *out = 0;
    return true;
  }
  return v.size() == 16 && v.find_first_not_of("0123456789abcdef") == std::string::npos &&
         std::from_chars(v.data(), v.data() + 16, *out, 16).ec == std::errc();
}

// The lines of a case file, one `key value` at a time, into a CaseSpec.
struct CaseReader {
  CaseSpec spec;
  bool have_seed = false;
  bool have_options = false;

  // What is wrong with the line; empty when it was read.
  std::string read(const std::string& key, const std::string& value) {
    std::uint64_t n = 0;
    if (key == "seed") {
      if (!parse_u64(value, &spec.seed))
        return "expected a seed (unsigned integer), found '" + value + "'";
      have_seed = true;
    } else if (key == "strategy") {
      if (value != "random" && value != "pct")
        return "expected strategy random or pct, found '" + value + "'";
      spec.strategy = value;
    } else if (key == "pct_depth") {
      if (!parse_u64(value, &n) || n == 0 || n > 64)
        return "expected pct_depth in [1, 64], found '" + value + "'";
      spec.pct_depth = static_cast<std::uint32_t>(n);
    } else if (key == "workload") {
      if (have_options) return "expected the workload line before the options line";
      spec.workload = find_workload(value);
      if (spec.workload == nullptr)
        return "expected workload " + workload_names() + ", found '" + value + "'";
    } else if (key == "options") {
      std::string why;
      spec.options = spec.workload->parse_options(value, &why);
      if (spec.options == nullptr) return "options: " + why;
      have_options = true;
    } else if (key == "trace_hash") {
      if (!parse_trace_hash(value, &spec.trace_hash))
        return "expected a trace hash of 16 hex digits (or 0: unknown), found '" + value + "'";
    } else {
      return read_text(key, value);
    }
    return "";
  }

  // The free-text keys.
  std::string read_text(const std::string& key, const std::string& value) {
    if (key == "outcome") {
      spec.outcome = value;
    } else if (key == "check") {
      spec.check = value == "-" ? "" : value;
    } else if (key == "version") {
      spec.version = value;
    } else if (key == "mutant") {
      spec.mutant = value;
    } else {
      return "unknown key '" + key +
             "' (expected version, mutant, seed, strategy, pct_depth, workload, options, "
             "outcome, check or trace_hash)";
    }
    return "";
  }
};

}  // namespace

std::optional<CaseSpec> parse_case(const std::string& text, const std::string& file_name,
                                   std::string* error) {
  CaseReader reader;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  auto fail = [&](const std::string& what) {
    *error = file_name + ":" + std::to_string(number) + ": " + printable(what);
    return std::nullopt;
  };
  while (std::getline(in, line)) {
    ++number;
    if (line.empty() || line[0] == '#') continue;
    const std::size_t space = line.find(' ');
    const std::string key = line.substr(0, space);
    const std::string value = space == std::string::npos ? "" : line.substr(space + 1);
    if (const std::string why = reader.read(key, value); !why.empty()) return fail(why);
  }
  if (!reader.have_seed || !reader.have_options) {
    number = 0;
    return fail(std::string("missing ") + (reader.have_seed ? "options" : "seed") + " line");
  }
  return std::move(reader.spec);
}

}  // namespace cowstate::sim
