#!/usr/bin/env bash
# The GNU parallel command lines of docs/distributed.md, run as written (-j2, four shards
# piped into `cowstate merge`) with the binary under test: each must exit 0 with a complete
# merge whose counts are those of the same campaign or exploration run unsharded (a fuzz
# campaign's trace digest too). Exit 77 (skipped) only where parallel is not installed.
# usage: parallel.sh BIN_DIR SOURCE_DIR
bin_dir=$(realpath "$1")
source_dir=$(realpath "$2")
if ! command -v parallel >/dev/null; then
  echo "SKIP: GNU parallel is not installed (scripts/install-deps installs Debian's parallel)"
  exit 77
fi
source "$(dirname "$0")/lib.sh"
cd "$source_dir" || exit 1

mapfile -t lines < <(awk '/^```/ { block = !block; next } block && /^parallel -j2 /' docs/distributed.md)
check "docs/distributed.md shows a fuzz and an explore line (found ${#lines[@]})" test "${#lines[@]}" -eq 2
counts='{runs, subtrees, schedules, pruned, steps, failures, trace_digest}'
for line in "${lines[@]}"; do
  cmd=${line//build\/release\/sim\//$bin_dir/}
  "${bin_dir}/cowstate" merge --json < <(bash -c "${cmd%% | *}") >"$work/merged.json"
  out=$(bash -c "$cmd" 2>&1)
  code=$?
  if [[ $code -ne 0 ]] || ! grep -q "^PASS$" <<<"$out"; then
    fail "'$line' exits $code:"
    echo "$out" | tail -5 | sed 's/^/    /'
    continue
  fi
  pass
  # The same command without --shard and parallel: the unsharded campaign.
  unsharded=$(sed -E -e 's/^parallel -j2 //' -e 's/ --shard \{\}\/4 ::: 0 1 2 3 \| .*$//' <<<"$cmd")
  bash -c "$unsharded" >"$work/unsharded.jsonl"
  check "'$line' merges 4 shards into a complete campaign" \
    jq -e '.consistent and .complete and (.shards | length) == 4' "$work/merged.json"
  check "'$line' has the counts of '$unsharded'" \
    test "$(jq -cS "$counts" "$work/merged.json")" = \
    "$(jq -cS "$counts" <("$bin_dir/cowstate" merge --json "$work/unsharded.jsonl"))"
done
finish
