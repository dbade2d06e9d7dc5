#!/usr/bin/env bash
# Replay commands paste: every command a report prints (the `replay:` line of a failure,
# the `Replay:` header of a shrunk scenario, the JSON record's `replay`) names the binary as
# it was invoked, made absolute, and absolute file paths, so it runs as printed from any
# directory. usage: replay.sh PATH/TO/cowstate
cowstate=$(realpath "$1")
source "$(dirname "$0")/lib.sh"
mkdir -p "$work/a" "$work/b" "$work/bin"

# Invoked by a relative path, from one directory; the commands run from another.
cp "$cowstate" "$work/bin/cowstate"
(cd "$work/a" && COWSTATE_SIM_TMPDIR=/nonexistent ../bin/cowstate fuzz --workload backend \
  --runs 1 --ops 20 --out failures >out.txt 2>&1)
replay=$(sed -n 's/^  replay:  //p' "$work/a/out.txt")
check "the replay command names the binary and the case file by absolute paths ($replay)" \
  test "$replay" = "$work/bin/cowstate replay $work/a/failures/case-1.txt"
out=$(cd "$work/b" && COWSTATE_SIM_TMPDIR=/nonexistent eval "$replay" 2>&1)
code=$?
check "pasted in another directory it replays the failure (exit $code, want 2)" test $code -eq 2
check "and names the same failure" grep -q "replayed seed 1 (random): invalid at check setup" <<<"$out"

# Found on PATH: the bare name pastes as it is.
out=$(cd "$work/a" && PATH="$work/bin:$PATH" COWSTATE_SIM_TMPDIR=/nonexistent cowstate fuzz \
  --workload backend --runs 1 --ops 20 --out failures2 --json 2>&1)
check "a binary found on PATH is named as typed" \
  test "$(jq -r 'select(.type == "run") | .replay' <<<"$out")" = "cowstate replay $work/a/failures2/case-1.txt"

# A shrunk scenario's header replays it, with the exit code it states.
printf 'config schedule=free\nwriter: put k=1 v=10\nwriter: snapshot s1\ns1: step all\nexpect live = {1:11}\n' >"$work/a/wrong.scenario"
(cd "$work/a" && ../bin/cowstate explore wrong.scenario --out shrunk >explore.txt 2>&1)
file="$work/a/shrunk/wrong-explore-1.scenario"
check "explore wrote the shrunk scenario" test -s "$file"
header=$(sed -n 's/^# Replay:   //p' "$file")
check "its header's command has no placeholder ($header)" \
  test "$header" = "$work/bin/cowstate run $file (exits 1)"
out=$(cd "$work/b" && eval "${header% (exits *}" 2>&1)
code=$?
check "pasted, it fails as the header says (exit $code)" test $code -eq 1
# The shrinker renamed key 1 to 0, in the steps and in the expectation alike.
check "with the signature the header states" \
  grep -q "failure: failure at \`expect live = {0:11}\`: changed {0}; in production" <<<"$out"
check "which it states" grep -q "^# Fails:    failure at \`expect live = {0:11}\`: changed {0}; in production" "$file"
check "the header records the tool version" grep -q "^# Shrunk: .* by cowstate [0-9.]* (git " "$file"
finish
