#!/usr/bin/env bash
# A failure report survives a crash and a pipe: the report is printed and flushed, and the
# case file written, before anything that could crash (shrinking); stdout is line-buffered
# when it is not a terminal; the crash hint names the failure being shrunk. A run that fails
# in its setup (nothing recorded) is reported as such instead of crashing the shrinker.
# usage: crash.sh PATH/TO/cowstate
cowstate=$1
source "$(dirname "$0")/lib.sh"

# fuzz: every backend run fails in its setup; piped, the report and the case file are all
# there, the shrinker says there is nothing to shrink, and the exit code is the failure's.
COWSTATE_SIM_TMPDIR="$work/no/such/dir" "$cowstate" fuzz --workload backend --runs 1 --ops 20 \
  --out "$work/f" 2>"$work/fuzz.err" | cat >"$work/fuzz.out"
code=${PIPESTATUS[0]}
check "a run that fails in its setup exits 2 (got $code)" test "$code" -eq 2
check "its report reached the pipe" grep -q "^FAILED: seed 1, strategy random, outcome invalid (exit 2)" "$work/fuzz.out"
check "the report names the failure" grep -q "failure: invalid at check setup" "$work/fuzz.out"
check "the report names the case file" grep -q "case:    $work/f/case-1.txt" "$work/fuzz.out"
check "the case file was written" test -s "$work/f/case-1.txt"
check "the shrinker says why it has nothing to shrink" grep -q "nothing to shrink: the run failed in its setup" "$work/fuzz.out"
check "nothing crashed" test ! -s "$work/fuzz.err"

# explore: a wrong expectation fails in every interleaving; the process then crashes while
# shrinking (COWSTATE_CRASH_WHILE), with stdout on a pipe.
printf 'config schedule=free\nwriter: put k=1 v=10\nwriter: snapshot s1\ns1: step all\nexpect live = {1:11}\n' >"$work/wrong.scenario"
COWSTATE_CRASH_WHILE=shrinking "$cowstate" explore "$work/wrong.scenario" --out "$work/e" \
  2>"$work/explore.err" | cat >"$work/explore.out"
code=${PIPESTATUS[0]}
check "the crash ends the process with a failure code (got $code)" test "$code" -ne 0
check "the failure's report reached the pipe before the crash" \
  grep -q "^failure 1: failure at \`expect live = {1:11}\`: changed {1}; in production" "$work/explore.out"
check "so did what the check saw" grep -q "the live map is {1:10}, expected {1:11}" "$work/explore.out"
if grep -q "cowstate: crashed with SIGSEGV" "$work/explore.err"; then
  check "exit 3 for a crash (got $code)" test "$code" -eq 3
  check "the crash hint names the failure being shrunk" \
    grep -q "while shrinking explored failure 1 of $work/wrong.scenario (failure at \`expect live = {1:11}\`" "$work/explore.err"
else
  # Under a sanitizer its own report replaces the hint.
  check "a sanitizer reported the crash" grep -q "Sanitizer" "$work/explore.err"
fi
finish
