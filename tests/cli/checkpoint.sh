#!/usr/bin/env bash
# `cowstate checkpoint inspect|verify` (docs/tools.md): on checkpoint files and a storage
# directory written by the checkpoint fuzz seed generator, intact and then damaged (a
# flipped byte, a truncation, a corrupt manifest): exit codes, the file and offset named,
# text and JSON, and a directory left as it was.
# usage: checkpoint.sh COWSTATE SEED_GENERATOR
cowstate=$1
seeds=$2
source "$(dirname "$0")/lib.sh"

mkdir -p "$work/files"
"$seeds" "$work/files" "$work/store" >/dev/null || { fail "the seed generator failed"; finish; exit 1; }
file=$work/files/all-zstd-40.cscp
store=$work/store

# Intact: a file and a directory.
# The seed generator's ids carry what a file was made from (fuzz/checkpoint_fuzz_backend.h,
# provenance_id): 0x4000070000280028 is 40 entries of populate seed 40, key groups 0-7.
expect_exit 0 "checkpoint id 4611693715011403816, max parallelism 8, key groups 0-7, key uint64\(2\)" -- "$cowstate" checkpoint inspect "$file"
expect_exit 0 "0 \"value\" value, namespace void\(6\), state int64\(1\)" -- "$cowstate" checkpoint inspect "$file"
expect_exit 0 "intact: every checksum verified, every block decoded" -- "$cowstate" checkpoint inspect "$file"
expect_exit 0 "all-zstd-40.cscp: intact \(8 blocks verified\)" -- "$cowstate" checkpoint verify "$file"
expect_exit 0 "3 checkpoints \(3 complete, 0 damaged\)" -- "$cowstate" checkpoint inspect "$store"
expect_exit 0 "store: intact" -- "$cowstate" checkpoint verify "$store"
json=$("$cowstate" checkpoint inspect --json "$file")
check "--json: 8 blocks, 5 states, intact" jq -e '.intact and (.blocks | length) == 8 and (.header.states | length) == 5 and .damage == null' <<<"$json"
check "--json: every block's sections add up to the entries written" \
  jq -e '[.blocks[].sections[].entries] | add > 0' <<<"$json"
dir_json=$("$cowstate" checkpoint inspect --json "$store")
check "--json directory: checkpoints 1, 2, 3 complete" \
  jq -e '[.checkpoints[] | select(.complete and .intact) | .id] == [1, 2, 3]' <<<"$dir_json"

# A flipped byte in the middle of a block: exit 1, the file and the block's offset named.
cp "$file" "$work/flip.cscp"
offset=$(jq '.blocks[4].offset' <<<"$json")
printf '\xff' | dd of="$work/flip.cscp" bs=1 seek=$((offset + 3)) conv=notrunc status=none
expect_exit 1 "DAMAGED: $work/flip.cscp: offset $offset: expected block checksum" -- "$cowstate" checkpoint verify "$work/flip.cscp"
expect_exit 1 "blocks \(4 of 8 read\)" -- "$cowstate" checkpoint inspect "$work/flip.cscp"
flip_json=$("$cowstate" checkpoint verify --json "$work/flip.cscp")
check "--json names the damaged block's offset" jq -e ".intact == false and .damage.offset == $offset" <<<"$flip_json"

# Truncated: the end magic is missing.
head -c 1000 "$file" >"$work/cut.cscp"
expect_exit 1 "cut.cscp: offset [0-9]+: .*truncated" -- "$cowstate" checkpoint verify "$work/cut.cscp"

# A directory: one data file flipped, one manifest corrupt, a temporary left by a crash.
data2=$store/chk-00000000000000000002.cscp
printf '\x01' | dd of="$data2" bs=1 seek=200 conv=notrunc status=none
printf '\x01' | dd of="$store/chk-00000000000000000003.manifest" bs=1 seek=9 conv=notrunc status=none
: >"$store/chk-00000000000000000004.cscp.tmp"
before=$(ls -l "$store" | md5sum)
expect_exit 1 "checkpoint 2: complete per its manifest, but DAMAGED" -- "$cowstate" checkpoint verify "$store"
expect_exit 1 "chk-00000000000000000002.cscp: offset [0-9]+: expected block checksum" -- "$cowstate" checkpoint verify "$store"
expect_exit 1 "checkpoint 3: DAMAGED" -- "$cowstate" checkpoint inspect "$store"
expect_exit 1 "other file: chk-00000000000000000004.cscp.tmp" -- "$cowstate" checkpoint inspect "$store"
check "inspect changes nothing in the directory" test "$(ls -l "$store" | md5sum)" = "$before"
dir_json=$("$cowstate" checkpoint inspect --json "$store")
check "--json directory: 1 intact, 2 and 3 damaged" \
  jq -e '[.checkpoints[] | select(.intact) | .id] == [1] and .checkpoints[2].complete == false' <<<"$dir_json"

# Bad usage: exit 2.
expect_exit 2 "[Nn]o such file or directory" -- "$cowstate" checkpoint verify "$work/nope"
expect_exit 2 "required" -- "$cowstate" checkpoint verify
expect_exit 2 "" -- "$cowstate" checkpoint frobnicate "$file"
finish
