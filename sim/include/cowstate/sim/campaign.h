// Fuzz campaigns: many runs from consecutive seeds, sharded deterministically, and the
// failing-case files that `cowstate replay` reads back.
//
// Run i of a campaign with base seed S uses seed S + i. Shard I of N runs exactly the
// indices i with i mod N == I, so the shards together run the unsharded campaign and a
// run's result never depends on the shard count.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "cowstate/sim/coverage.h"
#include "cowstate/sim/run.h"
#include "cowstate/sim/strategy.h"
#include "cowstate/sim/workload.h"

namespace cowstate::sim {

struct CampaignOptions {
  std::uint64_t seed = 1;
  std::uint64_t runs = 0;   // 0: until the time budget is spent
  double time_seconds = 0;  // 0: no time budget (runs must be set)
  std::uint32_t ops = 400;  // writer operations per run
  std::string strategy = "random";
  std::uint32_t pct_depth = 3;
  std::uint32_t shard_index = 0;
  std::uint32_t shard_count = 1;
  std::uint32_t deep_check_every = 1;
  std::uint64_t max_failures = 1;                  // stop after this many failing runs; 0: never
  const Workload* workload = &default_workload();  // which simulation every run is
};

// Everything needed to rerun one run exactly.
struct CaseSpec {
  std::uint64_t seed = 1;
  std::string strategy = "random";
  std::uint32_t pct_depth = 3;
  const Workload* workload = &default_workload();
  std::shared_ptr<const WorkloadOptions> options;  // made by `workload`
  // What the recorded run did and which build ran it (for `replay` to confirm that it
  // reproduced): a trace hash of 0 is unknown (a case written by hand).
  std::string outcome;
  std::string check;
  std::uint64_t trace_hash = 0;
  std::string version;  // "0.2.0 (git 543b0b1c8d2e)"; empty when unknown
  std::string mutant;   // the planted bug it ran under (mutants build); empty: none
};

struct FinishedRun {
  std::uint64_t index = 0;
  CaseSpec spec;
  RunResult result;
  double seconds = 0;  // wall time of the run
};

// Why a campaign (or a shard of one) stopped: all its runs done, its time budget spent, or
// its failure limit reached.
enum class StopReason : std::uint8_t { runs, time, max_failures };
const char* stop_reason_name(StopReason reason) noexcept;

struct CampaignSummary {
  std::uint64_t runs = 0;
  std::uint64_t failures = 0;
  RunStats totals;
  CoverageReport coverage;  // by run index and seed
  double seconds = 0;
  StopReason stopped_by = StopReason::runs;
  std::optional<FinishedRun> first_failure;
};

// The strategy a case names; nullopt for an unknown name.
std::unique_ptr<Strategy> make_strategy(const std::string& name, std::uint32_t pct_depth,
                                        std::uint32_t ops);
// The spec of run `index` of a campaign.
CaseSpec case_for_run(const CampaignOptions& options, std::uint64_t index);
// The run config of a case (its seed and workload).
RunConfig config_for_case(const CaseSpec& spec);
// Writer operations per run of a case (for the PCT estimate and the replay command).
std::uint32_t case_ops(const CaseSpec& spec);
// The case's options as printed before its first step.
std::string case_options(const CaseSpec& spec);
RunResult run_case(const CaseSpec& spec, bool keep_trace = false);

// Runs a campaign; `on_start` (if set) sees each run's case before the run starts (a crash
// handler's hint must name the run in flight, not the last one finished), `on_run` (if set)
// sees every finished run, `on_progress` is called about twice a second with the running totals.
CampaignSummary run_campaign(const CampaignOptions& options,
                             const std::function<void(const CaseSpec&)>& on_start,
                             const std::function<void(const FinishedRun&)>& on_run,
                             const std::function<void(const CampaignSummary&)>& on_progress);

// Case files: `key value` lines and `#` comments. Errors name the line. The trace hash is
// written as 16 hex digits (`trace_hash_text`), as in JSON records.
std::string trace_hash_text(std::uint64_t hash);
std::string format_case(const CaseSpec& spec);
std::optional<CaseSpec> parse_case(const std::string& text, const std::string& file_name,
                                   std::string* error);

}  // namespace cowstate::sim
