#!/usr/bin/env bash
# The command line's contract: exit codes, subcommands, --version, numbers checked rather
# than wrapped, input files checked before they are read, and error messages that say where
# and what. usage: contract.sh PATH/TO/cowstate
cowstate=$1
source "$(dirname "$0")/lib.sh"

# Help, subcommands, version.
expect_exit 0 "Exit codes: 0 pass, 1 correctness failure, 2 bad input" -- "$cowstate" --help
expect_exit 2 "subcommand" -- "$cowstate"
expect_exit 2 "unknown subcommand 'bogus'; the subcommands are fuzz, replay, mutants, run, explore, explain" -- "$cowstate" bogus
expect_exit 0 "^cowstate [0-9]+\.[0-9]+\.[0-9]+ \(git ([0-9a-f]{12}(-dirty)?|unknown)\)$" -- "$cowstate" --version

# Numbers are refused, not wrapped or rounded; the bounds are readable.
expect_exit 2 "--seed: expected an unsigned integer in \[0, 18446744073709551615\], found '-1'" -- "$cowstate" fuzz --seed -1
expect_exit 2 "--seed: expected an unsigned integer in \[0, 18446744073709551615\], found '99999999999999999999999'" -- "$cowstate" fuzz --seed 99999999999999999999999
expect_exit 2 "--runs: expected an unsigned integer in \[1, 1099511627776\], found '-1'" -- "$cowstate" fuzz --runs -1
expect_exit 2 "--time: expected a number of seconds in \[0, 31536000\], found 'nan'" -- "$cowstate" fuzz --time nan
expect_exit 2 "--time: expected a number of seconds in \[0, 31536000\], found 'inf'" -- "$cowstate" fuzz --time inf
expect_exit 2 "--time: .*found '-3'" -- "$cowstate" fuzz --time -3
expect_exit 2 "--ops: expected an unsigned integer in \[1, 10000000\], found '1e3'" -- "$cowstate" fuzz --ops 1e3
expect_exit 2 "--ops: .*found '0'" -- "$cowstate" fuzz --ops 0
expect_exit 2 "--pct-depth: .*\[1, 64\], found '65'" -- "$cowstate" fuzz --pct-depth 65
expect_exit 2 "--preemption-bound: .*\[0, 64\], found 'x'" -- "$cowstate" explore x --preemption-bound x
expect_exit 2 "--time-per-mutant: .*found '0'" -- "$cowstate" mutants --time-per-mutant 0
expect_exit 2 "--shrink-runs: .*found '0'" -- "$cowstate" mutants --shrink-runs 0
expect_exit 2 "--runs-per-mutant: .*found '-1'" -- "$cowstate" mutants --runs-per-mutant -1
expect_exit 2 "--shard expects I/N" -- "$cowstate" fuzz --shard 3/2
expect_exit 2 "--shard expects I/N" -- "$cowstate" fuzz --shard x
expect_exit 2 "--shard expects I/N" -- "$cowstate" fuzz --shard -1/2
expect_exit 2 "strategy" -- "$cowstate" fuzz --strategy nope
expect_exit 2 "workload" -- "$cowstate" fuzz --workload nope
# The help's defaults are what a bare command does.
expect_exit 0 "--runs UINT=100 " -- "$cowstate" fuzz --help
expect_exit 0 "--seed UINT=1 " -- "$cowstate" fuzz --help
expect_exit 0 "--shrink-seconds SECONDS=30 " -- "$cowstate" fuzz --help
out=$("$cowstate" fuzz --ops 5 --shrink-seconds 0)
check "a bare fuzz runs the 100 runs its help says (got: $(grep '^runs ' <<<"$out"))" grep -q '^runs 100,' <<<"$out"
out=$("$cowstate" fuzz --ops 5 --time 0.3)
check "fuzz --time without --runs runs until the time is spent" grep -qE 'seed 1, runs until 0.3 s are spent' <<<"$out"

# Input files: a regular file within the size limit, with at least one step.
for sub in run explore explain; do
  expect_exit 2 "/dev/zero is not a regular file \(a device\)" -- timeout 10 "$cowstate" $sub /dev/zero
done
expect_exit 2 "/dev/null is not a regular file" -- "$cowstate" run /dev/null
expect_exit 2 "is not a regular file \(a directory\)" -- "$cowstate" run "$work"
expect_exit 2 "cannot open .*missing.scenario: No such file" -- "$cowstate" run "$work/missing.scenario"
: >"$work/empty.scenario"
expect_exit 2 "empty.scenario:1:1: expected at least one step line \(TASK: ACTION\), found none" -- "$cowstate" run "$work/empty.scenario"
printf '# only a comment\nconfig capacity=4\nexpect live = {}\n' >"$work/nosteps.scenario"
expect_exit 2 "nosteps.scenario:.*expected at least one step line" -- "$cowstate" run "$work/nosteps.scenario"
truncate -s 17M "$work/huge.scenario"
expect_exit 2 "huge.scenario is 17825792 bytes; expected at most 16777216 \(16 MiB\)" -- "$cowstate" run "$work/huge.scenario"
expect_exit 2 "/dev/zero is not a regular file" -- timeout 10 "$cowstate" replay /dev/zero
expect_exit 2 "cannot open" -- "$cowstate" replay "$work/missing.case"
printf 'seed 5\nstrategy random\noptions keys=4 colour=red\n' >"$work/bad.case"
expect_exit 2 "bad.case:3: options: column 8: unknown option 'colour'" -- "$cowstate" replay "$work/bad.case"
printf 'seed 5\nstrategy turbo\n' >"$work/bad2.case"
expect_exit 2 "bad2.case:2: expected strategy random or pct, found 'turbo'" -- "$cowstate" replay "$work/bad2.case"
printf 'seed 5\noptions keys=4\ntrace_hash 12345\n' >"$work/bad3.case"
expect_exit 2 "bad3.case:3: expected a trace hash of 16 hex digits \(or 0: unknown\), found '12345'" -- "$cowstate" replay "$work/bad3.case"

# Scenario errors are parse errors (exit 2), never a failure of the product (exit 1).
b='config workload=backend\nwriter: value s=count k=1 update 5\n'
printf "${b}expect versions map=1 h=0\n" >"$work/v.scenario"
expect_exit 2 "v.scenario:3:8: expected an expectation of the backend workload, found 'versions'" -- "$cowstate" run "$work/v.scenario"
printf "${b}expect retired entries=0 states=0\n" >"$work/r.scenario"
expect_exit 2 "r.scenario:3:8: expected an expectation of the backend workload, found 'retired'" -- "$cowstate" run "$work/r.scenario"
printf "${b}writer: checkpoint c1\nc1: step all\nwriter: restore c1 into 0-4 and 3-7\n" >"$work/o.scenario"
expect_exit 2 "o.scenario:5:33: expected a second range apart from the first \(0-4\).*found '3-7'" -- "$cowstate" run "$work/o.scenario"
printf "${b}writer: checkpoint c1\nc1: step all\nwriter: restore c1 into 0-8\n" >"$work/p.scenario"
expect_exit 2 "p.scenario:5:25: expected a key-group range FIRST-LAST below max_parallelism 8, found '0-8'" -- "$cowstate" run "$work/p.scenario"
# A one-element list is echoed as a list.
printf 'config workload=backend\nwriter: list s=events k=2 add 1\nexpect live s=events = {2:[2]}\n' >"$work/l.scenario"
expect_exit 1 "live events is \{2:\[1\]\}, expected \{2:\[2\]\}" -- "$cowstate" run "$work/l.scenario"

# Scenario runs: a backend file passes; explain narrates map and backend scenarios.
printf 'config workload=backend\nwriter: value s=count k=1 update 5\n' >"$work/b.scenario"
expect_exit 0 "^PASS .*b.scenario: 1 steps; " -- "$cowstate" run "$work/b.scenario"
expect_exit 0 "^PASS .*b.scenario: 1 steps in [0-9.]+ ms; " -- "$cowstate" run --timing "$work/b.scenario"
expect_exit 0 "The writer switches the current key to 1 \(key group [0-9]+\), then runs \`update 5\` on state count" -- "$cowstate" explain "$work/b.scenario"
expect_exit 0 "wrote $work/b.html" -- "$cowstate" explain "$work/b.scenario" --format html --out "$work/b.html"
check "explain --format html embeds the model and fetches nothing" \
  bash -c "grep -q '\"workload\":\"backend\"' '$work/b.html' && ! grep -qiE '(src|href)=\"(https?:)?//' '$work/b.html'"
check "explain --format json is the model, one step" \
  bash -c "'$cowstate' explain '$work/b.scenario' --format json | jq -e '.steps | length == 1'"
printf 'config capacity=4 hash=identity\nwriter: put k=1 v=10 ; put k=5 v=50\nwriter: snapshot s1\nwriter: put k=1 v=11\n' >"$work/chain.scenario"
expect_exit 0 "k5: copied because entry_version 0 < H=1 \(snapshot s1 may see it\)" -- "$cowstate" explain "$work/chain.scenario"
expect_exit 0 "wrote 5 graphs to $work/dot/" -- "$cowstate" explain "$work/chain.scenario" --format dot --out "$work/dot"
check "explain --format dot writes step-001.dot .. step-005.dot" test -f "$work/dot/step-005.dot" -a ! -e "$work/dot/step-006.dot"
printf 'writer: put k=1 v=10\nexpect live = {1:11}\n' >"$work/wrong.scenario"
expect_exit 1 "outcome: failure \(exit 1\)" -- "$cowstate" explain "$work/wrong.scenario"
printf 'writer: put k=1 w=10\n' >"$work/e2.scenario"
expect_exit 2 "e2.scenario:1:17: expected 'v=', found 'w'" -- "$cowstate" explain "$work/e2.scenario"
expect_exit 2 "format" -- "$cowstate" explain "$work/chain.scenario" --format svg

# explore on a fixed schedule: the expectations every interleaving must meet are checked,
# the others are named on stderr with the reason; a `release` stays a release.
cat >"$work/fixed.scenario" <<'SCENARIO'
config capacity=4 hash=identity
writer: put k=1 v=10 ; put k=5 v=50
writer: snapshot s1
expect versions map=1 h=1
writer: put k=1 v=11
expect copied entries={(1,0), (5,0)} states={(1,0)}
expect live = {1:11, 5:50}
s1: step 1
releaser: release s1
writer: put k=5 v=51
expect s1 = {1:10, 5:50}
expect live = {1:11, 5:51}
SCENARIO
expect_exit 0 "^PASS" -- "$cowstate" run "$work/fixed.scenario"
"$cowstate" explore "$work/fixed.scenario" >"$work/explore.out" 2>"$work/explore.err"
check "explore passes the fixed schedule's interleavings" grep -q "^failures 0" "$work/explore.out"
check "it names the versions expectation it cannot check, and why" \
  grep -q "fixed.scenario:4: not checked in the exploration: \`expect versions map=1 h=1\`: versions and retired memory depend on when serializers and the releaser ran" "$work/explore.err"
check "and the copied one" grep -q "fixed.scenario:6: not checked in the exploration: \`expect copied" "$work/explore.err"
check "and the live one in the middle" grep -q "fixed.scenario:7: not checked in the exploration: \`expect live = {1:11, 5:50}\`" "$work/explore.err"
# (ASan builds may add their one-time fiber-stack notice, google/sanitizers#189: not ours.)
check "but no other" test "$(grep -v -e '^==[0-9]*==WARNING: ASan is ignoring requested __asan_handle_no_return' \
  -e '^False positive error reports may follow' -e '^For details see https://github.com/google/sanitizers/issues/189' \
  "$work/explore.err" | wc -l)" -eq 3
# The kept ones are checked: a wrong snapshot image fails every interleaving.
sed 's/^expect s1 = {1:10, 5:50}/expect s1 = {1:10, 5:51}/' "$work/fixed.scenario" >"$work/fixed2.scenario"
expect_exit 1 "failure at \`expect s1 = \{1:10, 5:51\}\`: changed \{5\}; by the model" -- "$cowstate" explore "$work/fixed2.scenario" --shrink-seconds 0

if "$cowstate" mutants --time-per-mutant 1 >/dev/null 2>&1; [[ $? -eq 2 ]]; then
  expect_exit 2 "this build has no mutants" -- "$cowstate" mutants --time-per-mutant 1
fi
finish
