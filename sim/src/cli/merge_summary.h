// What `cowstate merge` adds up once the shards are known to be one campaign (merge.h): a
// shard's own summary checked against its records, the merged summary of every shard as
// one JSON object, and that object printed for a person.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/shard_reader.h"

namespace cowstate::cli {

// The problems of a shard's summary line: a count that is not its records' sum, a stop
// reason the campaign does not allow, a finished shard that does not hold all its work.
// `subtrees_total`: an explore campaign's subtree count, as the first shard says.
void check_summary(const Shard& s, std::uint64_t subtrees_total, std::vector<std::string>* p);

// The merged summary (`type` merge): the campaign, the shards with their timings, the
// totals, coverage and the distinct failures. REQUIRES: shards passed every check.
nlohmann::json merge_summary(const std::vector<Shard>& shards);

void print_merge_summary(const nlohmann::json& merged);

}  // namespace cowstate::cli
