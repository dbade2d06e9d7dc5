#!/usr/bin/env bash
# JSON lines of `fuzz --json` and what a failing campaign hands back: a campaign header, one
# record per run, a summary; trace hashes as 16 hex digits (exact in jq and JavaScript);
# shards that add up to the unsharded campaign; failures with their message, signature,
# case file, shrunk scenario, replay command and tool version; --keep-going and
# --max-failures with failures counted by signature. usage: json.sh PATH/TO/cowstate
cowstate=$1
source "$(dirname "$0")/lib.sh"
version=$("$cowstate" --version | sed 's/^cowstate //')

"$cowstate" fuzz --seed 40 --runs 6 --ops 50 --json >"$work/all.jsonl"
check "every line is a JSON object" jq -e -s 'length == 8' "$work/all.jsonl"
check "the first line is the campaign header" \
  jq -e -s --arg v "$version" '.[0] | .type == "campaign" and .version == $v and .campaign.seed == 40 and .campaign.runs == 6 and .shard.count == 1 and (.campaign_id | test("^[0-9a-f]{16}$"))' "$work/all.jsonl"
check "six passing run records with the campaign's id, the version and a 16-hex-digit trace hash" \
  jq -e -s --arg v "$version" '.[0].campaign_id as $id | [.[] | select(.type == "run")] | length == 6 and all(.campaign_id == $id and .outcome == "pass" and .version == $v and (.trace_hash | type == "string" and test("^[0-9a-f]{16}$")) and (.elapsed_ms | type == "number") and (.deep_checks > 0))' "$work/all.jsonl"
check "the last line is the summary" \
  jq -e -s '.[-1] | .type == "summary" and .runs == 6 and .failures == 0 and .distinct_failures == []' "$work/all.jsonl"

# Shards together run exactly the unsharded campaign (same runs, same trace hashes).
"$cowstate" fuzz --seed 40 --runs 6 --ops 50 --json --shard 0/2 >"$work/s0.jsonl"
"$cowstate" fuzz --seed 40 --runs 6 --ops 50 --json --shard 1/2 >"$work/s1.jsonl"
key() { jq -r 'select(.type == "run") | "\(.run) \(.seed) \(.trace_hash)"' "$@" | sort; }
check "shards 0/2 and 1/2 add up to the unsharded campaign" \
  test "$(key "$work/all.jsonl")" = "$(key "$work/s0.jsonl" "$work/s1.jsonl")"
check "shards of one campaign share its id" \
  test "$(jq -r 'select(.type == "campaign") | .campaign_id' "$work/s0.jsonl")" = "$(jq -r 'select(.type == "campaign") | .campaign_id' "$work/all.jsonl")"

# A case file from a JSON record replays with the same trace hash.
jq -r 'select(.type == "run") | "\(.seed) \(.trace_hash) \(.options)"' "$work/all.jsonl" | head -1 >"$work/first"
read -r seed hash options <"$work/first"
printf 'seed %s\nstrategy random\npct_depth 3\noptions %s\ntrace_hash %s\n' "$seed" "$options" "$hash" >"$work/ok.case"
expect_exit 0 "trace hash $hash matches the recorded run" -- "$cowstate" replay "$work/ok.case"
# A recorded hash that this run does not reproduce fails the replay.
sed -i "s/^trace_hash .*/trace_hash 0123456789abcdef/" "$work/ok.case"
expect_exit 1 "trace hash $hash DIFFERS from the recorded 0123456789abcdef with the same outcome" -- "$cowstate" replay "$work/ok.case"

# Failing runs (in a build without planted bugs: a backend whose checkpoint directory
# cannot be made, so every run fails in its setup with check `setup`).
export COWSTATE_SIM_TMPDIR="$work/no/such/dir"
"$cowstate" fuzz --workload backend --runs 5 --ops 20 --json --out "$work/fail" >"$work/f1.jsonl"
code=$?
check "a failing campaign exits with the failure's code (2: its setup failed; got $code)" test $code -eq 2
check "it stops at the first failure by default" \
  jq -e -s '[.[] | select(.type == "run")] | length == 1' "$work/f1.jsonl"
check "the failure's record has the message, signature, case file, replay command and version" \
  jq -e -s --arg v "$version" '.[] | select(.type == "run") | .outcome == "invalid" and .check == "setup" and (.message | test("cannot create a checkpoint directory")) and .signature == "invalid at check setup" and (.case_file | test("/fail/case-1.txt$")) and (.replay | test(" replay .*/fail/case-1.txt$")) and .version == $v and .shrink.reproduced == false' "$work/f1.jsonl"
casefile=$(jq -r 'select(.type == "run") | .case_file' "$work/f1.jsonl")
check "the case file exists and records the version and the real trace hash" \
  grep -qxF "version $version" "$casefile"
check "the case file's trace hash is the record's" \
  grep -qx "trace_hash $(jq -r 'select(.type == "run") | .trace_hash' "$work/f1.jsonl")" "$casefile"
"$cowstate" fuzz --workload backend --runs 5 --ops 20 --json --keep-going --out "$work/fail" >"$work/f2.jsonl"
check "--keep-going writes one record per failing run" \
  jq -e -s '[.[] | select(.type == "run" and .outcome == "invalid")] | length == 5' "$work/f2.jsonl"
check "the summary counts five failures of one signature, with its first case file" \
  jq -e -s '.[-1] | .failures == 5 and (.distinct_failures | length == 1) and .distinct_failures[0].runs == 5 and .distinct_failures[0].signature == "invalid at check setup" and (.distinct_failures[0].case_file | test("case-1.txt$"))' "$work/f2.jsonl"
"$cowstate" fuzz --workload backend --runs 5 --ops 20 --json --max-failures 3 --out "$work/fail" >"$work/f3.jsonl"
check "--max-failures 3 stops after three failing runs" \
  jq -e -s '[.[] | select(.type == "run")] | length == 3' "$work/f3.jsonl"
out=$("$cowstate" fuzz --workload backend --runs 3 --ops 20 --keep-going --out "$work/fail")
check "the text summary lists distinct failures" grep -q "failures: 3 runs failed, 1 distinct" <<<"$out"
unset COWSTATE_SIM_TMPDIR
finish
