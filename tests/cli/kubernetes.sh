#!/usr/bin/env bash
# The shell commands of docs/distributed.md's Kubernetes manifests, run here as the pods
# would run them, with no cluster: the Indexed Job's for every JOB_COMPLETION_INDEX of its
# `completions`, the merge Job's after them, /results a scratch folder, `cowstate` the
# binary under test and the campaign cut to a few runs a shard. The merge must be complete
# and pass; with one shard's file removed it must exit 2. usage: kubernetes.sh BIN_DIR SOURCE_DIR
bin_dir=$(realpath "$1")
source_dir=$(realpath "$2")
source "$(dirname "$0")/lib.sh"
doc="$source_dir/docs/distributed.md"

# The folded (`- >-`) args of each container in the yaml block, one line each.
mapfile -t commands < <(awk '
  /^```yaml/ { yaml = 1; next }
  /^```/ { yaml = 0 }
  !yaml { next }
  folding && match($0, /^ */) && RLENGTH > indent { text = text (text == "" ? "" : " ") substr($0, RLENGTH + 1); next }
  folding { print text; folding = 0 }
  /^ *- >-$/ { folding = 1; text = ""; match($0, /^ */); indent = RLENGTH }
' "$doc")
check "the manifests hold a shard and a merge command (found ${#commands[@]})" test "${#commands[@]}" -eq 2
shards=$(sed -nE 's/^  completions: ([0-9]+).*/\1/p' "$doc")
check "the Indexed Job says its shard count ($shards)" test -n "$shards"
check "and is an Indexed Job" grep -q "^  completionMode: Indexed$" "$doc"
pod() { # pod COMMAND: as the container's sh -c runs it, here
  local cmd=${1//\/results/$work/results}
  cmd=${cmd//--runs 100000/--runs $((shards * 3))}
  PATH="$bin_dir:$PATH" sh -c "$cmd"
}
mkdir -p "$work/results"
for ((i = 0; i < shards; i++)); do
  JOB_COMPLETION_INDEX=$i pod "${commands[0]}" || fail "shard $i exits non-zero"
done
check "every pod wrote its shard" test "$(ls "$work"/results/shard-*.jsonl | wc -l)" -eq "$shards"
expect_exit 0 "coverage: runs 0\.\.$((shards * 3 - 1)), each once" -- pod "${commands[1]}"
check "the merge Job's merged.json is complete" jq -e '.complete and .failures == 0' "$work/results/merged.json"
rm "$work/results/shard-1.jsonl"
expect_exit 2 "missing 1 of the $shards shards .*: shard 1$" -- pod "${commands[1]}"
finish
