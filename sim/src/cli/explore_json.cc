// JSON lines of an exploration; see explore_json.h.
#include "cli/explore_json.h"

#include <filesystem>
#include <iostream>
#include <map>

#include "cli/campaign_id.h"
#include "core/build_info.h"
#include "cowstate/sim/campaign.h"

namespace cowstate::cli {

namespace {

nlohmann::json record(const char* type, const std::string& id) {
  return {{"type", type}, {"campaign_id", id}, {"version", sim::version_line()}};
}

nlohmann::json shard_json(const sim::ExploreOptions& o) {
  return {{"index", o.shard_index}, {"count", o.shard_count}};
}

}  // namespace

nlohmann::json explore_campaign(const sim::Scenario& explored, const sim::ExploreOptions& o,
                                const std::string& mutant) {
  nlohmann::json c{{"scenario", std::filesystem::path(explored.file).filename().string()},
                   {"scenario_hash", sim::trace_hash_text(fnv1a(sim::print_scenario(explored)))},
                   {"preemption_bound", o.preemption_bound},
                   {"max_schedules", o.max_schedules},
                   {"split_depth", o.split_depth},
                   {"dedup", o.dedup}};
  if (!mutant.empty()) c["mutant"] = mutant;
  return c;
}

void print_explore_header(const nlohmann::json& campaign, const sim::ExploreOptions& o) {
  std::cout << nlohmann::json{{"type", "campaign"},
                              {"tool", "cowstate"},
                              {"command", "explore"},
                              {"version", sim::version_line()},
                              {"campaign_id", campaign_id(campaign)},
                              {"campaign", campaign},
                              {"shard", shard_json(o)}}
                   .dump()
            << std::endl;
}

void print_explore_records(const nlohmann::json& campaign, const sim::ExploreOptions& o,
                           const sim::ExploreResult& r, const FailureTally& tally, double seconds,
                           const nlohmann::json& coverage) {
  const std::string id = campaign_id(campaign);
  for (const sim::ExploredSubtree& t : r.subtrees) {
    nlohmann::json j = record("subtree", id);
    j.update({{"subtree", t.index},
              {"prefix", t.prefix},
              {"schedules", t.schedules},
              {"pruned", t.pruned},
              {"steps", t.steps},
              {"failures", t.failures},
              {"probes", t.coverage.to_json()}});
    std::cout << j.dump() << "\n";
  }
  std::map<std::uint64_t, std::uint64_t> ordinal;  // subtree -> failures listed so far
  std::map<std::string, const FailureTally::Entry*> shrunk;
  for (const FailureTally::Entry& e : tally.entries()) shrunk[e.signature.to_string()] = &e;
  for (const sim::ExploredFailure& f : r.failures) {
    const std::string signature = f.result.signature().to_string();
    const FailureTally::Entry* e = shrunk.count(signature) != 0 ? shrunk[signature] : nullptr;
    nlohmann::json j = record("failure", id);
    j.update({{"subtree", f.subtree},
              {"ordinal", ordinal[f.subtree]++},
              {"signature", signature},
              {"outcome", sim::outcome_name(f.result.outcome)},
              {"check", f.result.check},
              {"message", f.result.message},
              {"schedule", f.schedule},
              {"shrunk_file", e != nullptr ? e->shrunk_file : ""},
              {"replay", e != nullptr ? e->replay : ""}});
    std::cout << j.dump() << "\n";
  }
  nlohmann::json s = record("summary", id);
  sim::CoverageCounts probes;
  for (const sim::ExploredSubtree& t : r.subtrees) probes += t.coverage;
  s.update({{"subtrees", r.subtrees.size()},
            {"subtrees_total", r.subtrees_total},
            {"schedules", r.schedules},
            {"pruned", r.pruned},
            {"steps", r.steps},
            {"failures", r.failures.size()},
            {"distinct_failures", tally.to_json()},
            {"complete", r.complete},
            {"discovery_runs", r.discovery_runs},
            {"seconds", seconds},
            {"shard", shard_json(o)},
            {"probes", probes.to_json()},
            {"coverage", coverage}});
  std::cout << s.dump() << std::endl;
}

}  // namespace cowstate::cli
