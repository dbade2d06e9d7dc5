#!/usr/bin/env bash
# The trace hashes of fixed campaigns: `fuzz --seed 7 --runs 300` for each workload and
# strategy, run by run, must equal tests/cli/golden/trace-hashes-WORKLOAD-STRATEGY.txt. A
# change that moves no decision of the simulator keeps every hash; one that changes how
# runs are drawn or traced says so in its commit and records the new hashes:
# trace_hashes.sh COWSTATE SOURCE_DIR WORKLOAD STRATEGY --update.
# usage: trace_hashes.sh PATH/TO/cowstate SOURCE_DIR WORKLOAD STRATEGY [--update]
cowstate=$(realpath "$1")
source_dir=$2
workload=$3
strategy=$4
update=${5:-}
source "$(dirname "$0")/lib.sh"
golden="$source_dir/tests/cli/golden/trace-hashes-$workload-$strategy.txt"
"$cowstate" fuzz --seed 7 --runs 300 --workload "$workload" --strategy "$strategy" --json \
  --shrink-seconds 0 --out "$work/failures" >"$work/runs.jsonl"
check "the campaign passes" jq -e -s '.[-1].failures == 0 and .[-1].runs == 300' "$work/runs.jsonl"
jq -r 'select(.type == "run") | "\(.run) \(.seed) \(.trace_hash)"' "$work/runs.jsonl" >"$work/hashes.txt"
[[ $update == --update ]] && cp "$work/hashes.txt" "$golden"
if cmp -s "$work/hashes.txt" "$golden"; then
  pass
else
  fail "trace hashes of $workload/$strategy differ from $golden ($(diff "$golden" "$work/hashes.txt" | grep -c '^>') runs):"
  diff "$golden" "$work/hashes.txt" | head -6 | sed 's/^/    /'
fi
finish
