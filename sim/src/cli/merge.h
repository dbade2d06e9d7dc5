// `cowstate merge FILE...`: the shards of one campaign (the JSON lines of `fuzz --json
// --shard I/N` or `explore --json --shard I/N`) made into one summary, after checking that
// they are exactly the campaign.
//
// Consistent means: every shard of the campaign once (none missing, none twice), all of one
// campaign (the same id, campaign parameters, command, shard count and tool version), every
// run (fuzz) or subtree (explore) once and in the shard its index belongs to, each shard
// finished (its summary line present and equal to the sum of its records), and a shard that
// ran out of work holding all of it; a shard stopped by its time budget or failure limit
// holds a prefix of its runs, and the summary says how much of the campaign ran.
//
// The summary: runs (or schedules, pruned and subtrees), steps, snapshots and entries
// checked, time (all shards added, and the longest), failures with their signatures, first
// run, case file, shrunk file and replay command, deduplicated by signature the way the
// unsharded campaign does it (the first run of a signature is the one of lowest index), and
// a digest of every run's index, outcome and trace hash (fuzz), which merging the unsharded
// campaign's own JSON lines gives too.
//
// Exit codes: 0 every run passed, 1 some run failed, 2 the shards are inconsistent or the
// input is unreadable (each problem named as FILE:LINE and what differs).
#pragma once

#include <string>
#include <vector>

namespace cowstate::cli {

struct MergeArgs {
  std::vector<std::string> files;  // "-" or none: standard input
  bool json = false;               // one JSON summary line instead of text
};

int run_merge(const MergeArgs& args);

}  // namespace cowstate::cli
