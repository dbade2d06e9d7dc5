#!/usr/bin/env bash
# Same seed, same trace, same bytes: `cowstate run --trace` prints nothing that depends on
# the clock, the machine or the build, so its stdout is byte-identical between two runs and
# equal to the golden files of tests/cli/golden/ in every build that runs this test (dev,
# asan, and the release-mode mutants build through scripts/test). A change that alters a
# trace on purpose updates the golden files: determinism.sh COWSTATE SOURCE_DIR --update.
# usage: determinism.sh PATH/TO/cowstate SOURCE_DIR [--update]
cowstate=$(realpath "$1")
source_dir=$2
update=${3:-}
source "$(dirname "$0")/lib.sh"
cd "$source_dir" || exit 1
golden=tests/cli/golden

for scenario in scenarios/tours/chain-prefix-copy.scenario \
  scenarios/smoke/free-schedule-two-snapshots.scenario \
  scenarios/smoke/backend-every-action.scenario \
  scenarios/tours/ttl-expiry-during-checkpoint.scenario; do
  name=$(basename "$scenario" .scenario)
  "$cowstate" run --trace "$scenario" >"$work/$name.1" 2>/dev/null
  "$cowstate" run --trace "$scenario" >"$work/$name.2" 2>/dev/null
  check "run --trace $scenario prints the same bytes twice" cmp -s "$work/$name.1" "$work/$name.2"
  if [[ $update == --update ]]; then
    cp "$work/$name.1" "$golden/run-trace-$name.txt"
  fi
  if ! cmp -s "$work/$name.1" "$golden/run-trace-$name.txt"; then
    fail "run --trace $scenario differs from $golden/run-trace-$name.txt:"
    diff "$golden/run-trace-$name.txt" "$work/$name.1" | head -10 | sed 's/^/    /'
  else
    pass
  fi
done
# Replaying a generated run: the same seed prints the same report in every build.
printf 'seed 7\nstrategy pct\npct_depth 3\noptions %s\n' \
  "$("$cowstate" fuzz --seed 7 --runs 1 --ops 80 --strategy pct --json | jq -r 'select(.type == "run") | .options')" \
  >"$work/seven.case"
"$cowstate" replay "$work/seven.case" >"$work/replay.1"
"$cowstate" replay "$work/seven.case" >"$work/replay.2"
check "replay prints the same bytes twice" cmp -s "$work/replay.1" "$work/replay.2"
finish
