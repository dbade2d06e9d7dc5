// The JSON lines of `cowstate explore --json` (docs/simulation.md, "JSON lines"): a
// campaign header naming the exploration (the scenario by name and content hash, the
// bounds, the split depth, the shard), one `subtree` line per subtree the shard explored,
// one `failure` line per failing schedule, and a summary. `cowstate merge` reads them back
// (shard_reader.h).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/failure_pipeline.h"
#include "cowstate/sim/explore.h"
#include "cowstate/sim/scenario.h"

namespace cowstate::cli {

// What every shard of one exploration has in common: the scenario as explored (its file's
// name and the hash of its printed text, so a copy elsewhere is the same scenario), the
// preemption bound, max schedules (per shard), split depth, dedup and the planted bug.
nlohmann::json explore_campaign(const sim::Scenario& explored, const sim::ExploreOptions& o,
                                const std::string& mutant);
// The header line, printed before the first schedule runs.
void print_explore_header(const nlohmann::json& campaign, const sim::ExploreOptions& o);
// Every subtree and failure line, then the summary; `tally` holds the shrunk file and
// replay command of each distinct failure that was shrunk.
// `coverage`: the report (CoverageReport::to_json) the summary carries.
void print_explore_records(const nlohmann::json& campaign, const sim::ExploreOptions& o,
                           const sim::ExploreResult& r, const FailureTally& tally, double seconds,
                           const nlohmann::json& coverage);

}  // namespace cowstate::cli
