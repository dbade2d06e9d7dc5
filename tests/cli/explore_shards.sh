#!/usr/bin/env bash
# `cowstate explore --split-depth D --shard I/N --json`: the shards of a bounded exhaustive
# exploration merge (`cowstate merge`) into the counts of the unsharded exploration with
# the same split depth: subtrees, schedules explored, pruned, steps and failures, and the
# same distinct failures. Shards of another split depth, bound or scenario, a shard
# missing, or an explore shard among fuzz shards are refused with exit 2; --shard without
# --split-depth is refused with what to add. usage: explore_shards.sh PATH/TO/cowstate SOURCE_DIR
cowstate=$(realpath "$1")
source_dir=$(realpath "$2")
source "$(dirname "$0")/lib.sh"
cd "$work" || exit 1

scenario="$source_dir/scenarios/smoke/free-schedule-two-snapshots.scenario"
explore=(explore "$scenario" --split-depth 2)
"$cowstate" "${explore[@]}" --json >all.jsonl
for i in 0 1 2; do "$cowstate" "${explore[@]}" --json --shard $i/3 >e$i.jsonl; done
expect_exit 0 "coverage: ([0-9]+) of \1 subtrees, each once; space exhausted" -- \
  "$cowstate" merge e0.jsonl e1.jsonl e2.jsonl
"$cowstate" merge --json e0.jsonl e1.jsonl e2.jsonl >merged.json
counts='{subtrees, subtrees_total, schedules, pruned, steps, failures}'
check "the merged counts are the unsharded exploration's summary line's" \
  test "$(jq -cS "$counts" merged.json)" = "$(jq -cS -s ".[-1] | $counts" all.jsonl)"
check "and the merge of the unsharded exploration's own lines" \
  test "$(jq -cS "$counts" merged.json)" = "$(jq -cS "$counts" <("$cowstate" merge --json all.jsonl))"
check "every subtree was explored by one shard, in its residue class" \
  jq -e -s '[.[] | select(.type == "subtree") | .subtree] | sort == [range(length)]' e0.jsonl e1.jsonl e2.jsonl
schedules=$(jq .schedules merged.json)
expect_exit 0 "schedules explored $schedules, pruned as equivalent $(jq .pruned merged.json)," -- \
  "$cowstate" "${explore[@]}"
check "each shard runs the first schedule of the subtrees it skips, and does not count it" \
  jq -e -s '.[-1].discovery_runs > 0' e1.jsonl

# A wrong expectation fails every schedule: the failures add up, one distinct signature,
# and each shard's shrunk files are named by subtree so that no two shards write one file.
sed 's/^expect s1 = {1:10, 2:20, 3:30}/expect s1 = {1:10, 2:20, 3:31}/' "$scenario" >wrong.scenario
wrong=(explore wrong.scenario --split-depth 1 --shrink-seconds 1 --show 1)
"$cowstate" "${wrong[@]}" --json --out all-out >wrong-all.jsonl
for i in 0 1; do "$cowstate" "${wrong[@]}" --json --shard $i/2 --out out$i >w$i.jsonl; done
expect_exit 1 "failures: [0-9]+ schedules failed, 1 distinct" -- "$cowstate" merge w0.jsonl w1.jsonl
check "the failing schedules add up to the unsharded exploration's" \
  test "$("$cowstate" merge --json w0.jsonl w1.jsonl | jq .failures)" = "$(jq -s '.[-1].failures' wrong-all.jsonl)"
check "the failure is the unsharded one's, first in subtree 0, with its shrunk file" \
  jq -e '.distinct_failures[0] | .first_subtree == 0 and (.shrunk_file | test("out0/wrong-explore-subtree-0-1.scenario$"))' \
  <("$cowstate" merge --json w0.jsonl w1.jsonl)

# Not one exploration: exit 2, and what differs.
expect_exit 2 "missing 1 of the 3 shards of campaign [0-9a-f]{16} \(begun at e0.jsonl:1\): shard 2" -- \
  "$cowstate" merge e0.jsonl e1.jsonl
"$cowstate" explore "$scenario" --split-depth 3 --json --shard 1/3 >depth3.jsonl
expect_exit 2 "depth3.jsonl:1: shard 1/3 is not of the campaign of e0.jsonl:1 \(shard 0/3\): split_depth 3 here, 2 there" -- \
  "$cowstate" merge e0.jsonl depth3.jsonl e2.jsonl
"$cowstate" "${explore[@]}" --preemption-bound 1 --json --shard 1/3 >bound1.jsonl
expect_exit 2 "bound1.jsonl:1: .*preemption_bound 1 here, 2 there" -- "$cowstate" merge e0.jsonl bound1.jsonl e2.jsonl
"$cowstate" explore wrong.scenario --split-depth 2 --json --shard 1/3 --shrink-seconds 0 >other.jsonl
expect_exit 2 "other.jsonl:1: .*scenario \"wrong.scenario\" here, \"free-schedule-two-snapshots.scenario\" there" -- \
  "$cowstate" merge e0.jsonl other.jsonl e2.jsonl
"$cowstate" fuzz --seed 1 --runs 6 --ops 20 --json --shard 1/3 >fuzz.jsonl
expect_exit 2 "fuzz.jsonl:1: .*command fuzz here, explore there" -- "$cowstate" merge e0.jsonl fuzz.jsonl e2.jsonl
jq -c 'if .type == "subtree" and .subtree == 1 then .schedules += 1 else . end' e1.jsonl >edited.jsonl
expect_exit 2 "the summary of shard 1/3 says schedules [0-9]+; its records add up to [0-9]+" -- \
  "$cowstate" merge e0.jsonl edited.jsonl e2.jsonl
expect_exit 2 "--shard 1/3 needs --split-depth D" -- "$cowstate" explore "$scenario" --shard 1/3
expect_exit 2 "--shard expects I/N with 0 <= I < N" -- "$cowstate" "${explore[@]}" --shard 3/3
finish
