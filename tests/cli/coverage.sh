#!/usr/bin/env bash
# The copy-on-write coverage report (docs/simulation.md, "Copy-on-write coverage"): printed
# at the end of fuzz and explore, in their JSON summaries, each run's and subtree's probes
# in its record; shards merge to the unsharded campaign's report; a reason no run hit is
# listed as never hit; a summary whose probes are not its records' sum is refused.
# usage: coverage.sh PATH/TO/cowstate SOURCE_DIR
cowstate=$(realpath "$1")
src=$(realpath "$2")
source "$(dirname "$0")/lib.sh"
cd "$work" || exit 1

# A fuzz campaign and its two shards, map and backend.
for workload in map backend; do
  campaign=(fuzz --seed 1 --runs 6 --ops 200 --workload "$workload")
  "$cowstate" "${campaign[@]}" --json >"$workload-all.jsonl"
  for i in 0 1; do "$cowstate" "${campaign[@]}" --json --shard $i/2 >"$workload-s$i.jsonl"; done
  "$cowstate" merge --json "$workload-s0.jsonl" "$workload-s1.jsonl" >"$workload-merged.json"
  check "$workload: the merged shards' coverage is the unsharded campaign's summary's" \
    test "$(jq -cS .coverage "$workload-merged.json")" = "$(jq -cS 'select(.type == "summary") | .coverage' "$workload-all.jsonl")"
  check "$workload: the summary's probes are its run records' sum" \
    jq -e -s '(map(select(.type == "run") | .probes | to_entries[]) | group_by(.key) | map({(.[0].key): (map(.value) | add)}) | add) == (.[-1].probes)' "$workload-all.jsonl"
  check "$workload: each reason hit names the lowest run whose record has it, and its seed" \
    jq -e -s '[.[] | select(.type == "run")] as $runs | all(.[-1].coverage[] | select(.hits > 0);
      . as $c | ([$runs[] | select(.probes[$c.probe] != null)] | min_by(.run)) as $first
      | $first.run == $c.first_run and $first.seed == $c.first_seed)' "$workload-all.jsonl"
  check "$workload: every reason a run hit is one the report says the workload can reach" \
    jq -e -s '[.[-1].coverage[] | select(.hits > 0 and (.reachable | not)) | .probe] == []' "$workload-all.jsonl"
done
check "the map workload cannot reach disk faults; the backend can" \
  jq -e -s '(.[-1].coverage[] | select(.probe == "fault.power_loss") | .reachable) == false' map-all.jsonl
check "the backend's campaign hit power losses" \
  jq -e '.coverage[] | select(.probe == "fault.power_loss") | .hits > 0 and .reachable' backend-merged.json

# The text report, at the end of fuzz and of merge.
expect_exit 0 "cow\.chain_prefix_copy +copy +[0-9]+ hits +[0-9]+ runs +first run [0-9]+ \(seed [0-9]+\)" -- \
  "$cowstate" fuzz --seed 1 --runs 6 --ops 200
expect_exit 0 "fault\.power_loss +fault +-  \(this workload cannot reach it\)" -- "$cowstate" merge map-s0.jsonl map-s1.jsonl

# Never hit: one run of three operations copies nothing.
expect_exit 0 "cow\.rehash_copy +copy +NEVER HIT" -- "$cowstate" fuzz --seed 7 --runs 1 --ops 3
expect_exit 0 "[0-9]+ reachable reasons never hit" -- "$cowstate" fuzz --seed 7 --runs 1 --ops 3
"$cowstate" fuzz --seed 7 --runs 1 --ops 3 --json >tiny.jsonl
check "a never-hit reason: 0 hits, reachable, no first run" \
  jq -e -s '.[-1].coverage[] | select(.probe == "cow.rehash_copy") | .hits == 0 and .reachable and (has("first_run") | not)' tiny.jsonl

# A record whose probes were edited: its shard's summary no longer adds up.
jq -c 'if .type == "run" and .run == 2 then .probes["cow.retire"] += 1 else . end' map-s0.jsonl >edited.jsonl
expect_exit 2 "the summary of shard 0/2 says probe cow\.retire hits [0-9]+; its records add up to [0-9]+" -- \
  "$cowstate" merge edited.jsonl map-s1.jsonl
jq -c 'if .type == "run" and .run == 2 then .probes["cow.spill"] = 1 else . end' map-s0.jsonl >unknown.jsonl
expect_exit 2 "field 'probes': unknown probe 'cow.spill'" -- "$cowstate" merge unknown.jsonl map-s1.jsonl

# Explore: the report per subtree, and its shards merged.
scenario=$src/scenarios/smoke/free-schedule-two-snapshots.scenario
expect_exit 0 "map\.insert_new +yield +[0-9]+ hits +[0-9]+ subtrees +first subtree 0" -- \
  "$cowstate" explore "$scenario" --max-schedules 200
"$cowstate" explore "$scenario" --split-depth 2 --json >explore-all.jsonl
for i in 0 1; do "$cowstate" explore "$scenario" --split-depth 2 --json --shard $i/2 >explore-s$i.jsonl; done
"$cowstate" merge --json explore-s0.jsonl explore-s1.jsonl >explore-merged.json
check "explore: the merged shards' coverage is the unsharded exploration's" \
  test "$(jq -cS .coverage explore-merged.json)" = "$(jq -cS 'select(.type == "summary") | .coverage' explore-all.jsonl)"
check "explore: entries were copied, in every subtree" \
  jq -e '. as $m | any($m.coverage[]; .probe == "cow.entry_copy" and .hits > 0 and .subtrees == $m.subtrees)' explore-merged.json
finish
