#!/usr/bin/env bash
# Every command README.md and docs/ show for the built tools works: each line of a code
# block that runs build/release/sim/cowstate or cowstate-isolation is run from the source
# directory with the binaries under test instead, time budgets cut to 1 s, and must exit 0
# (the mutants build's kill matrix runs in scripts/test instead). usage: docs_commands.sh BIN_DIR SOURCE_DIR
bin_dir=$(realpath "$1")
source_dir=$(realpath "$2")
source "$(dirname "$0")/lib.sh"
cd "$source_dir" || exit 1
ran=0
while IFS= read -r line; do
  cmd=${line%%  #*}
  cmd=$(sed -E -e "s#build/release/sim/#$bin_dir/#g" -e 's/--time [0-9]+/--time 1/' \
    -e 's/--seconds [0-9]+/--seconds 1/' -e "s#> ([a-z.]+)#> $work/\\1#" <<<"$cmd")
  # The kill matrix is scripts/test's own step, in full.
  [[ $cmd == *build/mutants/* ]] && continue
  ran=$((ran + 1))
  out=$(bash -c "$cmd" 2>&1)
  code=$?
  if [[ $code -ne 0 ]]; then
    fail "documented command '$line' exits $code:"
    echo "$out" | tail -5 | sed 's/^/    /'
  else
    pass
  fi
done < <(awk '/^```/ { block = !block; next } block && /^build\/(release|mutants)\/sim\/cowstate/' README.md docs/*.md)
check "the docs show at least six commands (ran $ran)" test "$ran" -ge 6
finish
