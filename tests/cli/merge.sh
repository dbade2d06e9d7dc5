#!/usr/bin/env bash
# `cowstate merge`: the shards of a fuzz campaign merge into the unsharded campaign's
# summary (same runs, trace hashes, totals and distinct failures), from files or standard
# input; shards that are not the campaign exactly (one missing, one twice, another
# campaign, another build, another shard count, a shard cut off or without its summary, a
# record lost, moved or edited) are refused with exit 2, naming FILE:LINE and what
# differs; a failing campaign merges to exit 1, a campaign stopped early by its failure
# limit or its time budget says how much of it ran. usage: merge.sh PATH/TO/cowstate
cowstate=$(realpath "$1")
source "$(dirname "$0")/lib.sh"
cd "$work" || exit 1

campaign=(fuzz --seed 40 --runs 12 --ops 50)
"$cowstate" "${campaign[@]}" --json >all.jsonl
for i in 0 1 2; do "$cowstate" "${campaign[@]}" --json --shard $i/3 >s$i.jsonl; done

# Three shards are the unsharded campaign.
expect_exit 0 "coverage: runs 0\.\.11, each once \(12 of 12\)" -- "$cowstate" merge s0.jsonl s1.jsonl s2.jsonl
"$cowstate" merge --json s0.jsonl s1.jsonl s2.jsonl >merged.json
"$cowstate" merge --json all.jsonl >unsharded.json
check "--json prints one line: a consistent, complete merge of 3 shards and 12 runs" \
  jq -e -s 'length == 1 and .[0].type == "merge" and .[0].consistent and .[0].complete and .[0].runs == 12 and (.[0].shards | length) == 3' merged.json
same='{runs, failures, distinct_failures, steps, ops, snapshots, snapshots_checked, entries_checked, deep_checks, yields, trace_digest, campaign_id, version}'
check "the merged totals and trace digest are the unsharded campaign's" \
  test "$(jq -cS "$same" merged.json)" = "$(jq -cS "$same" unsharded.json)"
check "and its steps are the unsharded summary line's" \
  test "$(jq .steps merged.json)" = "$(jq -s '.[-1].steps' all.jsonl)"
check "each shard is listed with its runs, time and stop reason" \
  jq -e '[.shards[] | .runs] == [4, 4, 4] and all(.shards[]; .stopped_by == "runs" and (.seconds | type) == "number")' merged.json
check "standard input (-) holds the shards one after another" \
  test "$(cat s0.jsonl s1.jsonl s2.jsonl | "$cowstate" merge --json - | jq -c .trace_digest)" = "$(jq -c .trace_digest merged.json)"
check "no FILE reads standard input too" \
  test "$(cat s2.jsonl s0.jsonl s1.jsonl | "$cowstate" merge --json | jq -c .trace_digest)" = "$(jq -c .trace_digest merged.json)"

# Shards that are not the campaign exactly: exit 2, and what is wrong.
expect_exit 2 "missing 1 of the 3 shards of campaign [0-9a-f]{16} \(begun at s0.jsonl:1\): shard 2" -- \
  "$cowstate" merge s0.jsonl s1.jsonl
expect_exit 2 "s1.jsonl:1: shard 1/3 again \(also at s1.jsonl:1\)" -- "$cowstate" merge s0.jsonl s1.jsonl s1.jsonl s2.jsonl
"$cowstate" fuzz --seed 41 --runs 12 --ops 50 --json --shard 1/3 >other.jsonl
expect_exit 2 "other.jsonl:1: shard 1/3 is not of the campaign of s0.jsonl:1 \(shard 0/3\): seed 41 here, 40 there" -- \
  "$cowstate" merge s0.jsonl other.jsonl s2.jsonl
"$cowstate" "${campaign[@]}" --json --shard 1/2 >half.jsonl
expect_exit 2 "half.jsonl:1: shard 1/2 is not of .*: shard count 2 here, 3 there" -- "$cowstate" merge s0.jsonl half.jsonl s2.jsonl
version=$(jq -r -s '.[0].version' s1.jsonl)
sed "s/\"version\":\"$version\"/\"version\":\"0.1.0 (git 000000000000)\"/" s1.jsonl >old.jsonl
expect_exit 2 "old.jsonl:1: shard 1/3 is not of .*: built by cowstate 0.1.0 \(git 000000000000\) here, [0-9.]+ \(git [0-9a-f]+(-dirty)?\) there" -- \
  "$cowstate" merge s0.jsonl old.jsonl s2.jsonl
head -c -30 s2.jsonl >cut.jsonl
expect_exit 2 "cut.jsonl:6: not valid JSON .*the last line and has no newline: the shard was cut off while writing it" -- \
  "$cowstate" merge s0.jsonl s1.jsonl cut.jsonl
head -3 s2.jsonl >unfinished.jsonl
expect_exit 2 "unfinished.jsonl:1: shard 2/3 opened here has no summary line: it did not finish" -- \
  "$cowstate" merge s0.jsonl s1.jsonl unfinished.jsonl
sed 3d s0.jsonl >lost.jsonl
expect_exit 2 "lost.jsonl:1: shard 0/3 has no record of run 3, though it has later ones" -- \
  "$cowstate" merge lost.jsonl s1.jsonl s2.jsonl
expect_exit 2 "lost.jsonl:5: the summary of shard 0/3 says runs 4; its records add up to 3" -- \
  "$cowstate" merge lost.jsonl s1.jsonl s2.jsonl
{ head -2 s0.jsonl; sed -n 2p s1.jsonl; tail -n +3 s0.jsonl; } >moved.jsonl
expect_exit 2 "moved.jsonl:3: run 1 is not of shard 0/3 \(1 mod 3 = 1\)" -- "$cowstate" merge moved.jsonl s1.jsonl s2.jsonl
jq -c 'if .type == "summary" then .steps += 1 else . end' s1.jsonl >edited.jsonl
expect_exit 2 "edited.jsonl:6: the summary of shard 1/3 says steps [0-9]+; its records add up to [0-9]+" -- \
  "$cowstate" merge s0.jsonl edited.jsonl s2.jsonl
jq -c 'if .type == "campaign" then .campaign.ops = 51 else . end' s1.jsonl >forged.jsonl
expect_exit 2 "forged.jsonl:1: campaign_id [0-9a-f]{16} is not the id of its campaign object" -- \
  "$cowstate" merge s0.jsonl forged.jsonl s2.jsonl
jq -c 'if .type == "run" then del(.trace_hash) else . end' s1.jsonl >field.jsonl
expect_exit 2 "field.jsonl:2: run record: field 'trace_hash' is missing \(expected a string\)" -- \
  "$cowstate" merge s0.jsonl field.jsonl s2.jsonl
expect_exit 2 "all.jsonl:1: shard 0/1 is not of .*shard count 1 here, 3 there" -- "$cowstate" merge s0.jsonl all.jsonl
printf 'not json\n' >garbage.txt
expect_exit 2 "garbage.txt:1: not valid JSON" -- "$cowstate" merge garbage.txt
expect_exit 2 "no campaign line in the input" -- "$cowstate" merge /dev/null
expect_exit 2 "missing.jsonl: cannot open: No such file or directory" -- "$cowstate" merge missing.jsonl
expect_exit 2 "\.: a directory" -- "$cowstate" merge .
expect_exit 2 "unknown option|not expected|--bogus" -- "$cowstate" merge --bogus s0.jsonl
"$cowstate" merge --json s0.jsonl s1.jsonl >refused.json 2>/dev/null
check "an inconsistent merge with --json prints its problems as one JSON line" \
  jq -e '.type == "merge" and .consistent == false and (.problems[0] | test("missing 1 of the 3 shards"))' refused.json

# A failing campaign (every backend run fails in its setup: no checkpoint folder).
export COWSTATE_SIM_TMPDIR="$work/no/such/dir"
failing=(fuzz --workload backend --seed 5 --runs 5 --ops 20 --shrink-seconds 0 --out "$work/fail")
"$cowstate" "${failing[@]}" --keep-going --json >fail-all.jsonl
for i in 0 1 2; do "$cowstate" "${failing[@]}" --keep-going --json --shard $i/3 >f$i.jsonl; done
expect_exit 1 "failures: 5 runs failed, 1 distinct" -- "$cowstate" merge f0.jsonl f1.jsonl f2.jsonl
"$cowstate" merge --json f0.jsonl f1.jsonl f2.jsonl >fail-merged.json
check "the failures merge by signature into the unsharded campaign's (first run, seed, case file, replay)" \
  test "$(jq -cS .distinct_failures fail-merged.json)" = "$(jq -cS -s '.[-1].distinct_failures' fail-all.jsonl)"
check "the failure's first run is run 0, with its case file" \
  jq -e '.distinct_failures[0] | .first_run == 0 and .runs == 5 and (.case_file | test("/fail/case-5.txt$"))' fail-merged.json
# Without --keep-going every shard stops at its first failure: a part of the campaign ran.
for i in 0 1 2; do "$cowstate" "${failing[@]}" --json --shard $i/3 >g$i.jsonl; done
expect_exit 1 "coverage: 3 of the campaign's 5 runs, each once" -- "$cowstate" merge g0.jsonl g1.jsonl g2.jsonl
check "each shard says its failure limit stopped it" \
  jq -e '(.complete | not) and all(.shards[]; .stopped_by == "max_failures")' <("$cowstate" merge --json g0.jsonl g1.jsonl g2.jsonl)
unset COWSTATE_SIM_TMPDIR
# A campaign bounded by time: each shard runs its first runs; no run count to cover.
for i in 0 1; do "$cowstate" fuzz --seed 9 --time 0.3 --ops 30 --json --shard $i/2 >t$i.jsonl; done
expect_exit 0 "a campaign bounded by time" -- "$cowstate" merge t0.jsonl t1.jsonl
finish
