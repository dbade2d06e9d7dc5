#!/usr/bin/env bash
# The failure pipeline where there are failures to find: a mutants build, fuzzing planted
# bugs. Failing runs are reported, written as case files that replay under their mutant,
# shrunk (each distinct signature once) to scenarios whose printed replay commands fail as
# stated; a crash while shrinking keeps the report; and this release-mode build prints the
# same golden traces as the debug builds. Run by scripts/test after the mutants build.
# usage: mutants.sh PATH/TO/mutants/cowstate SOURCE_DIR
cowstate=$(realpath "$1")
source_dir=$(realpath "$2")
source "$(dirname "$0")/lib.sh"
cd "$work" || exit 1

"$cowstate" fuzz --mutant skip_chain_prefix_copy --runs 40 --ops 200 --keep-going --json \
  --shrink-seconds 10 --out "$work/f" >"$work/f.jsonl"
code=$?
check "a failing campaign exits 1 (got $code)" test $code -eq 1
check "the campaign header names the mutant" jq -e -s '.[0].campaign.mutant == "skip_chain_prefix_copy"' "$work/f.jsonl"
failing=$(jq -s '[.[] | select(.type == "run" and .outcome != "pass")] | length' "$work/f.jsonl")
check "several runs fail ($failing)" test "$failing" -ge 2
check "every failing record has a case file, a replay command and a shrunk file" \
  jq -e -s '[.[] | select(.type == "run" and .outcome != "pass")] | all((.case_file | length > 0) and (.replay | length > 0) and (.shrunk_file | length > 0))' "$work/f.jsonl"
check "each distinct signature is shrunk once" \
  jq -e -s '[.[] | select(.type == "run" and .shrink != null)] | length == ([.[] | select(.type == "run" and .outcome != "pass") | .signature] | unique | length)' "$work/f.jsonl"
check "the summary counts the failures by signature" \
  jq -e -s --argjson n "$failing" '.[-1] | .failures == $n and ((.distinct_failures | map(.runs) | add) == $n)' "$work/f.jsonl"
first=$(jq -c -s '[.[] | select(.type == "run" and .shrink != null)][0]' "$work/f.jsonl")
replay=$(jq -r '.replay' <<<"$first")
out=$(cd / && eval "$replay" 2>&1)
code=$?
check "the case replays under its mutant and fails again (exit $code)" test $code -eq 1
check "with the same trace hash" grep -q "trace hash $(jq -r '.trace_hash' <<<"$first") matches the recorded run" <<<"$out"
shrunk_replay=$(jq -r '.shrunk_replay' <<<"$first")
out=$(cd / && eval "$shrunk_replay" 2>&1)
code=$?
check "the shrunk scenario's replay command fails (exit $code)" test $code -eq 1
check "with the shrunk signature" grep -qF "failure: $(jq -r '.shrink.signature' <<<"$first")" <<<"$out"

# A crash while shrinking: the report and the case file are already out.
COWSTATE_CRASH_WHILE=shrinking "$cowstate" fuzz --mutant skip_chain_prefix_copy --runs 40 \
  --ops 200 --out "$work/c" 2>"$work/crash.err" | cat >"$work/crash.out"
code=${PIPESTATUS[0]}
check "the crash exits 3 (got $code)" test "$code" -eq 3
check "the failure's report reached the pipe" grep -q "^FAILED: seed " "$work/crash.out"
seed=$(sed -n 's/^FAILED: seed \([0-9]*\),.*/\1/p' "$work/crash.out")
check "its case file was written before the crash" test -s "$work/c/case-$seed.txt"
check "the crash hint names the failure being shrunk and its case file" \
  grep -q "while shrinking the failure of seed $seed (failure at check .*); its report is above and its case file is $work/c/case-$seed.txt" "$work/crash.err"

# The kill matrix names what failed at its end; its runs bound the shrink: with one run, the
# kill stays as found, over its bound, and so is it reported.
out=$("$cowstate" mutants --only free_retired_early --runs-per-mutant 200 --shrink-runs 1 \
  --negative "$source_dir/scenarios/negative" --out "$work/m" 2>&1)
code=$?
check "a kill shrunk over its bound fails the matrix (exit $code)" test $code -eq 1
check "the shrink says it was cut short by runs" grep -q "shrink: [0-9]* runs in .* cut short by runs" <<<"$out"
check "the last line names the mutant and why" \
  grep -q "^NOT OK free_retired_early: shrunk to [0-9]* steps, over its bound of 14 (a shrink was cut short by runs)$" <<<"$(tail -n 1 <<<"$out")"
out=$("$cowstate" mutants --only free_retired_early --runs-per-mutant 200 --shrink-runs 3000 \
  --negative "$source_dir/scenarios/negative" --out "$work/m" 2>&1)
code=$?
check "with runs enough it passes (exit $code)" test $code -eq 0
check "and its shrink reaches a fixed point" grep -q "shrink: [0-9]* runs in .* to a fixed point" <<<"$out"
# A campaign too short to kill (torn_header_accepted's first kill is run 94) fails the matrix.
out=$("$cowstate" mutants --only torn_header_accepted --runs-per-mutant 1 \
  --negative "$source_dir/scenarios/negative" 2>&1)
code=$?
check "a mutant its campaign does not kill fails the matrix (exit $code)" test $code -eq 1
check "and is named last" grep -q "^NOT OK torn_header_accepted: not killed by its campaign$" <<<"$(tail -n 1 <<<"$out")"

# The release-mode build prints the debug builds' golden traces.
out=$(bash "$source_dir/tests/cli/determinism.sh" "$cowstate" "$source_dir")
check "determinism.sh passes with this build: $out" grep -q " 0 failed" <<<"$out"
finish
