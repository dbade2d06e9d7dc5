#!/usr/bin/env bash
# CLI contract of `cowstate`: exit codes, error messages that say where and what, JSON lines,
# sharding and case files. usage: cli_test.sh PATH/TO/cowstate
set -uo pipefail
cowstate=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
passed=0

# expect_exit CODE PATTERN -- COMMAND...: the command exits CODE and its output matches PATTERN.
expect_exit() {
  local want=$1 pattern=$2
  shift 3
  local out code
  out=$("$@" 2>&1)
  code=$?
  if [[ $code -ne $want ]] || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL: $* -> exit $code (want $want), output did not match /$pattern/:"
    echo "$out" | head -20 | sed 's/^/    /'
    failures=$((failures + 1))
  else
    passed=$((passed + 1))
  fi
}

expect_exit 0 "Exit codes: 0 pass, 1 correctness failure, 2 bad input" -- "$cowstate" --help
expect_exit 2 "subcommand" -- "$cowstate"
expect_exit 2 "--shard expects I/N" -- "$cowstate" fuzz --shard 3/2
expect_exit 2 "--shard expects I/N" -- "$cowstate" fuzz --shard x
expect_exit 2 "strategy" -- "$cowstate" fuzz --strategy nope
expect_exit 2 "ops" -- "$cowstate" fuzz --ops 0
expect_exit 2 "cannot open" -- "$cowstate" replay "$work/missing.case"

printf 'seed 5\nstrategy random\noptions keys=4 colour=red\n' >"$work/bad.case"
expect_exit 2 "bad.case:3: options: column 8: unknown option 'colour'" -- "$cowstate" replay "$work/bad.case"
printf 'seed 5\nstrategy turbo\n' >"$work/bad2.case"
expect_exit 2 "bad2.case:2: expected strategy random or pct, found 'turbo'" -- "$cowstate" replay "$work/bad2.case"

expect_exit 0 "^PASS" -- "$cowstate" fuzz --runs 5 --ops 60
expect_exit 0 "^PASS" -- "$cowstate" fuzz --runs 5 --ops 60 --strategy pct --pct-depth 2

# JSON lines: one per run, each a complete object.
"$cowstate" fuzz --seed 40 --runs 6 --ops 50 --json >"$work/all.jsonl"
lines=$(grep -c '^{"check":"".*"outcome":"pass"' "$work/all.jsonl")
if [[ $lines -ne 6 ]]; then
  echo "FAIL: --json wrote $lines passing run lines, want 6"
  failures=$((failures + 1))
else
  passed=$((passed + 1))
fi

# Shards together run exactly the unsharded campaign (same seeds, same trace hashes).
"$cowstate" fuzz --seed 40 --runs 6 --ops 50 --json --shard 0/2 >"$work/s0.jsonl"
"$cowstate" fuzz --seed 40 --runs 6 --ops 50 --json --shard 1/2 >"$work/s1.jsonl"
key() { sed -E 's/.*"seed":([0-9]+).*"trace_hash":([0-9]+).*/\1 \2/' "$@" | sort; }
if [[ "$(key "$work/all.jsonl")" != "$(key "$work/s0.jsonl" "$work/s1.jsonl")" ]]; then
  echo "FAIL: shards 0/2 + 1/2 differ from the unsharded campaign"
  failures=$((failures + 1))
else
  passed=$((passed + 1))
fi

# A recorded case replays with the same trace hash.
seed=$(sed -E 's/.*"seed":([0-9]+).*/\1/' "$work/all.jsonl" | head -1)
hash=$(sed -E 's/.*"trace_hash":([0-9]+).*/\1/' "$work/all.jsonl" | head -1)
options=$(sed -E 's/.*"options":"([^"]*)".*/\1/' "$work/all.jsonl" | head -1)
printf 'seed %s\nstrategy random\npct_depth 3\noptions %s\ntrace_hash %s\n' "$seed" "$options" "$hash" >"$work/ok.case"
expect_exit 0 "trace hash $hash matches" -- "$cowstate" replay "$work/ok.case"

# The backend workload: a campaign passes, a recorded backend case replays exactly.
expect_exit 0 "^PASS" -- "$cowstate" fuzz --workload backend --runs 4 --ops 60
expect_exit 2 "workload" -- "$cowstate" fuzz --workload nope
"$cowstate" fuzz --workload backend --seed 7 --runs 2 --ops 60 --json >"$work/b.jsonl"
bseed=$(sed -E 's/.*"seed":([0-9]+).*/\1/' "$work/b.jsonl" | head -1)
bhash=$(sed -E 's/.*"trace_hash":([0-9]+).*/\1/' "$work/b.jsonl" | head -1)
boptions=$(sed -E 's/.*"options":"([^"]*)".*/\1/' "$work/b.jsonl" | head -1)
printf 'seed %s\nstrategy random\npct_depth 3\nworkload backend\noptions %s\ntrace_hash %s\n' \
  "$bseed" "$boptions" "$bhash" >"$work/b.case"
expect_exit 0 "trace hash $bhash matches" -- "$cowstate" replay "$work/b.case"
printf 'config workload=backend\nwriter: value s=count k=1 update 5\n' >"$work/b.scenario"
expect_exit 0 "^PASS" -- "$cowstate" run "$work/b.scenario"
expect_exit 2 "narrates map scenarios only" -- "$cowstate" explain "$work/b.scenario"

# explain: narrates a scenario, exits with its run's code; dot writes one graph per step.
printf 'config capacity=4 hash=identity\nwriter: put k=1 v=10 ; put k=5 v=50\nwriter: snapshot s1\nwriter: put k=1 v=11\n' >"$work/chain.scenario"
expect_exit 0 "k5: copied because entry_version 0 < H=1 \(snapshot s1 may see it\)" -- "$cowstate" explain "$work/chain.scenario"
expect_exit 0 "wrote 5 graphs to $work/dot/" -- "$cowstate" explain "$work/chain.scenario" --format dot --out "$work/dot"
if [[ ! -f "$work/dot/step-005.dot" || -e "$work/dot/step-006.dot" ]]; then
  echo "FAIL: explain --format dot did not write step-001.dot .. step-005.dot (4 lines, then s1 runs to its end)"
  failures=$((failures + 1))
else
  passed=$((passed + 1))
fi
printf 'writer: put k=1 v=10\nexpect live = {1:11}\n' >"$work/wrong.scenario"
expect_exit 1 "outcome: failure \(exit 1\)" -- "$cowstate" explain "$work/wrong.scenario"
printf 'writer: put k=1 w=10\n' >"$work/e2.scenario"
expect_exit 2 "e2.scenario:1:17: expected 'v=', found 'w'" -- "$cowstate" explain "$work/e2.scenario"
expect_exit 2 "format" -- "$cowstate" explain "$work/chain.scenario" --format svg

if "$cowstate" mutants --time-per-mutant 1 >/dev/null 2>&1; [[ $? -eq 2 ]]; then
  expect_exit 2 "this build has no mutants" -- "$cowstate" mutants --time-per-mutant 1
fi

echo "$passed passed, $failures failed"
((failures == 0))
