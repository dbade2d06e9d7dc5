// Reading the JSON lines of campaign shards (`fuzz --json`, `explore --json`) back, for
// `cowstate merge`: each shard as its header, its records and its summary, with the file
// and line every one came from.
//
// A stream may hold several shards one after another (`cat shard-*.jsonl`, GNU parallel's
// grouped output): a `campaign` line opens a shard, its `summary` line closes it. Every
// problem is collected with FILE:LINE and what was expected, and reading goes on, so that
// one call reports all of them: a line that is not JSON (a truncated last line, from a
// shard killed while writing it, says so), a record outside a shard, a field missing or of
// the wrong type, a shard with no summary (it did not finish). Only the fields merge uses
// are kept, so memory grows with the runs by a few hundred bytes each.
//
// What is read is not yet checked against the campaign (run indices, shard numbers,
// versions): merge.cc does that.
#pragma once

#include <cstdint>
#include <istream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cowstate/sim/coverage.h"
#include "cowstate/sim/run.h"

namespace cowstate::cli {

struct Where {
  std::string file;  // as named on the command line; "-" (standard input) reads as "<stdin>"
  std::uint64_t line = 0;
  std::string text() const { return file + ":" + std::to_string(line); }
};

// A failing run (fuzz) or explored schedule (explore): what a merged summary lists.
struct FailureRecord {
  std::string signature, outcome, check, message;
  std::string case_file, shrunk_file, replay;
};

// A `run` line of a fuzz shard, or a `subtree` line of an explore shard (its index is the
// subtree's, its stats the sum over the subtree's schedules).
struct UnitRecord {
  Where where;
  std::uint64_t index = 0;
  std::uint64_t seed = 0;        // fuzz
  std::string outcome;           // fuzz: the run's; explore: pass or failure
  std::uint64_t trace_hash = 0;  // fuzz
  double elapsed_ms = 0;
  sim::RunStats stats;
  std::uint64_t schedules = 0, pruned = 0, failures = 0;  // explore
  std::optional<FailureRecord> failure;                   // fuzz: a failing run
};

// An explore shard's `failure` line: one failing schedule of a subtree.
struct ExploredRecord {
  Where where;
  std::uint64_t subtree = 0;
  std::uint64_t ordinal = 0;  // its rank among the subtree's failures, from 0
  FailureRecord failure;
};

struct ShardSummary {
  Where where;
  std::string campaign_id, version;
  std::uint64_t units = 0, failures = 0;  // runs (fuzz) or subtrees (explore)
  sim::RunStats stats;
  std::uint64_t schedules = 0, pruned = 0, subtrees_total = 0;  // explore
  bool complete = true;                                         // explore
  double seconds = 0;
  std::string stopped_by;      // fuzz: runs, time or max_failures
  sim::CoverageReach reach{};  // the coverage report's reachable probes
};

struct Shard {
  Where header;
  std::string command;  // "fuzz" or "explore"
  std::string version, campaign_id;
  nlohmann::json campaign;  // the campaign object, as written
  std::uint32_t index = 0, count = 1;
  std::vector<UnitRecord> units;
  std::vector<ExploredRecord> explored;
  std::optional<ShardSummary> summary;

  std::string name() const {
    return "shard " + std::to_string(index) + "/" + std::to_string(count);
  }
  const char* unit() const { return command == "explore" ? "subtree" : "run"; }
  // An unsigned campaign parameter ("seed", "runs"), 0 when absent.
  std::uint64_t parameter(const char* key) const {
    auto it = campaign.find(key);
    return it != campaign.end() && it->is_number_unsigned() ? it->get<std::uint64_t>() : 0;
  }
  // How many of the indices [0, total) are this shard's (i mod count == index).
  std::uint64_t owned(std::uint64_t total) const {
    return total > index ? (total - index + count - 1) / count : 0;
  }
};

struct ReadResult {
  std::vector<Shard> shards;
  std::vector<std::string> problems;  // "FILE:LINE: what"
};

// Reads every shard of `in` (named `file` in messages) into `out`.
void read_shards(std::istream& in, const std::string& file, ReadResult* out);

}  // namespace cowstate::cli
