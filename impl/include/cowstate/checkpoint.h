// Checkpoints of a keyed state backend: the snapshot object the sync phase produces, the
// async writer that turns it into a checkpoint file in bounded steps, and the reader that
// restores one or several checkpoint files into a backend's state tables.
//
// Format (versions 2 and 3; the full layout is in docs/checkpoint-format.md)
// ------
//   header   magic "CSCP", format version, flags, header size, checkpoint id, max
//            parallelism, key-group range, key serializer id, (3) parent checkpoint id,
//            state metadata (name, kind, serializer ids, TTL config) and an XXH3-64 of the
//            header
//   blocks   one per key group of the range, in key-group order: the entries of every
//            state in that key group; each optionally compressed (LZ4 or zstd)
//   index    per key group: offset, stored size, raw size, compression, XXH3-64 of the
//            stored bytes, (3) block kind
//   footer   index offset, index size, XXH3-64 of index + footer, end magic "CSCP_END"
// The blocks tile the bytes between header and index exactly, so every byte of a file is
// covered by a checksum or checked against a fixed value: there is no unchecked padding.
//
// Incremental checkpoints (format 3)
// ----------------------------------
// A full checkpoint has no parent and is written in format 2. An incremental one names its
// parent, the checkpoint whose image it changes, and each key group's block is of a kind:
//   full       the key group's entries, as in format 2;
//   delta      per state, the records that turn the parent's image of the key group into
//              this one: removals (key, namespace) first, then puts (key, namespace,
//              state); a state without a section did not change;
//   unchanged  no bytes: the key group is as in the parent.
// A chain is a checkpoint and its ancestors back to one that holds each needed key group in
// full. Restoring a key group reads the nearest full block of the chain, then applies the
// newer deltas oldest first (C10). Which blocks are deltas, and when a whole checkpoint is
// full, the backend decides (keyed_state_backend.h, "Incremental checkpoints").
//
// Writing (async phase)
// ---------------------
// KeyedStateBackend::snapshot() (the sync phase, on the writer thread) takes one map
// snapshot per (state, key group) and returns a BackendSnapshot. A CheckpointWriter then
// writes it, on any one thread, through a CheckpointSink (a file of CheckpointStorage, or
// memory): step(k) writes at most k entries plus the block and index bookkeeping they
// complete; a key group's block goes to the sink as soon as it is complete, and that key
// group's map snapshots are released right then. On a sink error or cancel() every map
// snapshot still held is released at once; the destructor releases what is left. A sink
// may also be cancelled from another thread (PendingCheckpoint::cancel): the writer sees it
// through CheckpointSink::cancel_requested() before every header, section and block it
// writes, and stops as if cancel() had been called.
//
// Reading (restore)
// -----------------
// read_checkpoint_layout validates header and index completely (magic, version, flags,
// sizes, checksums, key-group order and coverage, block tiling) before any block is
// touched. restore_state_tables then restores from one or several checkpoint files into
// fresh tables of a target key-group range: blocks of key groups outside the range are
// skipped unread; each block's checksum is verified before it is decompressed (to exactly
// its recorded raw size) and decoded; a state is identified by its name, so each file's
// state numbering is mapped to the backend's own; a key group found in two files is an
// error. Only when every file restored completely are the fresh tables swapped in, so an
// error leaves the backend as it was: nothing is half-restored. Every error names the file,
// the byte offset and what was expected and found; no input crashes the reader.
//
// Thread safety
// -------------
// A BackendSnapshot and its CheckpointWriter belong to one thread at a time (hand them
// over with the usual synchronization, e.g. a queue); the backend's writer thread may keep
// writing meanwhile, the maps' copy-on-write keeps the snapshot frozen. The backend (and
// its maps) must outlive every BackendSnapshot. Reading functions are pure apart from the
// tables they fill, which belong to the writer thread.
//
// Invariants (docs/invariants.md)
//  C1  A written block holds, for every state with a live map snapshot in that key group,
//      exactly the snapshot's entries (less what full-snapshot TTL cleanup left out; a
//      section left empty is dropped); blocks are written in key-group order, one per key
//      group of the snapshot's range.
//  C2  A key group's map snapshots are released once its block is in the sink, and all of
//      them once the writer fails, is cancelled or is destroyed.
//  C3  The index's blocks tile [header size, index offset) in key-group order, and index
//      offset + index size + footer size = file size.
//  C4  A restore changes the backend only if every input restored completely.
//  C10 A key group restored from a chain equals its image at the newest checkpoint: the
//      nearest full block, then every newer delta in checkpoint order.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cowstate/assert.h"
#include "cowstate/bytes.h"
#include "cowstate/checksum.h"
#include "cowstate/key_groups.h"
#include "cowstate/state_table.h"
#include "cowstate/status.h"

namespace cowstate {

inline constexpr std::array<std::byte, 4> kCheckpointMagic = {std::byte{'C'}, std::byte{'S'},
                                                              std::byte{'C'}, std::byte{'P'}};
inline constexpr std::array<std::byte, 8> kCheckpointEndMagic = {
    std::byte{'C'}, std::byte{'S'}, std::byte{'C'}, std::byte{'P'},
    std::byte{'_'}, std::byte{'E'}, std::byte{'N'}, std::byte{'D'}};
// 2: TTL states store last-access times; the TTL record gained cleanup strategies.
// 3: incremental checkpoints: a parent checkpoint id and a kind per block. A checkpoint
//    without a parent is still written in format 2, which every reader since 2 reads.
inline constexpr std::uint16_t kCheckpointFullFormatVersion = 2;
inline constexpr std::uint16_t kCheckpointFormatVersion = 3;  // the newest this reader reads
inline constexpr std::size_t kCheckpointFooterSize = 32;
inline constexpr std::size_t kCheckpointIndexEntrySize = 37;    // format 2
inline constexpr std::size_t kCheckpointIndexEntrySizeV3 = 38;  // format 3: and the kind
// A compressed block may expand at most this much (the writer stores a block uncompressed
// otherwise), which bounds what a reader allocates for a block.
inline constexpr std::uint64_t kMaxCompressionRatio = 1024;

// Per-block compression. Stored in the index: never renumber.
enum class Compression : std::uint8_t { none = 0, lz4 = 1, zstd = 2 };
const char* compression_name(Compression c) noexcept;

// What a block of an incremental checkpoint holds (format 3). Stored in the index: never
// renumber.
enum class BlockKind : std::uint8_t { full = 0, delta = 1, unchanged = 2 };
const char* block_kind_name(BlockKind k) noexcept;

// What a checkpoint's header says.
struct CheckpointHeader {
  std::uint64_t checkpoint_id = 0;
  std::int32_t max_parallelism = kDefaultMaxParallelism;
  KeyGroupRange range;
  std::uint16_t key_serializer = 0;
  // The checkpoint whose image the delta and unchanged blocks change; 0: none (a full
  // checkpoint, format 2).
  std::uint64_t parent_checkpoint_id = 0;
  std::vector<StateMetaInfo> states;  // a block refers to a state by its index here
};

// The sync phase's result: one map snapshot per (state, key group) with entries. Move-only;
// releases every map snapshot it still holds when destroyed.
class BackendSnapshot {
 public:
  struct Section {
    std::uint32_t state;  // index into header().states
    std::unique_ptr<KeyGroupStateSnapshot> snapshot;
  };

  // REQUIRES: one vector per key group of header.range; sections in ascending state order;
  // `kinds` empty (every block full) or one per key group, full unless the header has a
  // parent, never unchanged (the writer finds a delta with nothing in it unchanged); the
  // sections of a delta block write deltas (KeyGroupStateSnapshot::write_delta).
  BackendSnapshot(CheckpointHeader header, std::vector<std::vector<Section>> key_groups,
                  std::vector<BlockKind> kinds = {});
  ~BackendSnapshot() { release_all(); }
  BackendSnapshot(const BackendSnapshot&) = delete;
  BackendSnapshot& operator=(const BackendSnapshot&) = delete;

  const CheckpointHeader& header() const noexcept { return header_; }
  // The sections of key group `key_group`. REQUIRES: header().range.contains(key_group).
  std::vector<Section>& key_group(std::int32_t key_group);
  const std::vector<Section>& key_group(std::int32_t key_group) const;
  // Full or delta. REQUIRES: header().range.contains(key_group).
  BlockKind kind(std::int32_t key_group) const;
  // Key groups written as deltas.
  std::size_t delta_key_groups() const noexcept;
  // Entries over all states and key groups at the sync phase.
  std::size_t entries() const noexcept { return entries_; }
  // Key groups that still hold a map snapshot. The owning thread.
  std::size_t live_key_groups() const noexcept;
  // Releases the map snapshots of one key group (idempotent).
  void release_key_group(std::int32_t key_group) noexcept;
  void release_all() noexcept;

 private:
  CheckpointHeader header_;
  std::vector<std::vector<Section>> key_groups_;  // [g - range.start]
  std::vector<BlockKind> kinds_;                  // [g - range.start]; empty: all full
  std::size_t entries_ = 0;
};

// Where a CheckpointWriter puts its bytes, in order.
class CheckpointSink {
 public:
  virtual ~CheckpointSink() = default;
  // Appends `bytes`; an error is final for this checkpoint.
  virtual Status append(std::span<const std::byte> bytes) = 0;
  // Whether the checkpoint was cancelled while being written (from any thread): the writer
  // then stops before its next piece of work. Any thread.
  virtual bool cancel_requested() const noexcept { return false; }
};

// A sink into memory (tests, fuzz seeds, benchmarks).
class MemoryCheckpointSink final : public CheckpointSink {
 public:
  Status append(std::span<const std::byte> bytes) override {
    bytes_.insert(bytes_.end(), bytes.begin(), bytes.end());
    return Status();
  }
  const std::vector<std::byte>& bytes() const noexcept { return bytes_; }
  std::vector<std::byte> take() noexcept { return std::move(bytes_); }

 private:
  std::vector<std::byte> bytes_;
};

// One key group's block, as the index records it.
struct CheckpointBlockInfo {
  std::int32_t key_group;
  std::uint64_t offset;  // in the file
  std::uint64_t stored;  // bytes in the file
  std::uint64_t raw;     // bytes once decompressed (= stored when uncompressed)
  Compression compression;
  std::uint64_t checksum;  // XXH3-64 of the stored bytes
  BlockKind kind = BlockKind::full;
};

struct CheckpointWriteOptions {
  Compression compression = Compression::none;
  int zstd_level = 1;
};

// The async phase: writes a BackendSnapshot as a checkpoint file, key group by key group.
class CheckpointWriter {
 public:
  // REQUIRES: snapshot != nullptr; `sink` outlives the writer.
  CheckpointWriter(std::unique_ptr<BackendSnapshot> snapshot, CheckpointSink* sink,
                   CheckpointWriteOptions options = {});
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Writes at most `max_entries` entries, and the header, blocks, index and footer they
  // complete; a key group (even an empty one) counts as one entry, so every step is bounded.
  // Stops as cancel() does when the sink's cancel_requested() turns true (checked before
  // each section and block). Returns true once finished: done() or failed().
  // REQUIRES: max_entries > 0.
  bool step(std::size_t max_entries);
  // Stops the checkpoint: releases every map snapshot; status() becomes an error. The
  // writing thread (another thread cancels through the sink).
  void cancel();

  bool done() const noexcept { return state_ == State::done; }
  bool failed() const noexcept { return state_ == State::failed; }
  bool finished() const noexcept { return done() || failed(); }
  // The error after failed(); ok otherwise.
  const Status& status() const noexcept { return status_; }
  std::uint64_t bytes_written() const noexcept { return offset_; }
  // The snapshot being written (for observing releases); every map snapshot in it is
  // released once finished.
  const BackendSnapshot* snapshot() const noexcept { return snapshot_.get(); }

 private:
  enum class State : std::uint8_t { header, blocks, done, failed };
  struct Codec;  // compression contexts (zstd), kept across blocks

  // Starts the block of key group `next_key_group_`.
  void begin_block();
  // Writes a section's header; end_section fixes its entry count to what was emitted, or
  // drops the section when nothing was (full-snapshot TTL cleanup).
  void begin_section(const BackendSnapshot::Section& s);
  void end_section(const KeyGroupStateSnapshot& s);
  // Compresses, checksums and appends the finished block; releases the key group (C2).
  bool finish_block();
  bool finish_file();
  bool emit(std::span<const std::byte> bytes);
  void fail(Status st);

  // Set at construction.
  std::unique_ptr<BackendSnapshot> snapshot_;
  CheckpointSink* sink_;
  CheckpointWriteOptions options_;
  std::unique_ptr<Codec> codec_;

  // The writing thread only.
  State state_ = State::header;
  Status status_;
  std::int32_t next_key_group_ = 0;  // the key group being written
  std::size_t section_ = 0;          // its section being written
  std::size_t section_at_ = 0;       // offset of that section's header in block_
  std::uint32_t sections_kept_ = 0;  // sections of the block with entries
  bool block_open_ = false;
  ByteWriter block_;                   // the raw block being built
  std::vector<std::byte> compressed_;  // scratch for the stored form
  std::vector<CheckpointBlockInfo> index_;
  std::uint64_t offset_ = 0;  // bytes appended to the sink
};

// One checkpoint file to restore from: a name for messages (its path), its bytes, and the
// checkpoint id the caller means to restore (0: any), checked against the file's header so
// that the bytes of another checkpoint are an error rather than a restore of older state.
//
// An incremental checkpoint also needs its ancestors: `chain` holds them, the parent first,
// back to a checkpoint that holds in full every key group still needed (the chain may end
// early where the nearer members already do). Their expected ids follow from the parent
// ids, and they must outlive the restore.
struct CheckpointInput {
  std::string name;
  std::span<const std::byte> bytes;
  std::uint64_t expected_checkpoint_id = 0;
  std::span<const CheckpointInput> chain = {};
};

struct RestoreOptions {
  // Off only for fuzzing the decoder behind the checksums and for salvage tools: without
  // checksums a corrupt file can restore wrong data (it still never crashes the reader).
  bool verify_checksums = true;
  // Off, a restore whose inputs leave a key group of the target range uncovered fails and
  // names those key groups; on, they are restored empty (a job that knows those key groups
  // had no state, or a salvage tool).
  bool allow_partial_coverage = false;
};

// A checkpoint file's header and index, validated (C3).
struct CheckpointLayout {
  std::uint16_t version = 0;  // the format version
  CheckpointHeader header;
  std::vector<std::uint64_t> state_offsets;  // where each state's metadata starts
  std::uint64_t header_size = 0;
  std::vector<CheckpointBlockInfo> blocks;  // one per key group of header.range, in order
};

// Parses and validates everything but the blocks' contents. Errors are prefixed by
// input.name.
Result<CheckpointLayout> read_checkpoint_layout(const CheckpointInput& input,
                                                const RestoreOptions& options = {});

// Restores `tables` (a backend's registered states, matched to each file's states by name)
// from `inputs` for the key groups of `range`, each key group of an incremental
// checkpoint from its chain (C10). On success every table is replaced by a fresh one
// holding exactly the restored entries; on error `tables` is untouched (C4).
// REQUIRES: no table has a live snapshot; every table's range is `range`.
Status restore_state_tables(std::vector<std::unique_ptr<StateTableBase>>& tables,
                            std::int32_t max_parallelism, KeyGroupRange range,
                            std::uint16_t key_serializer, std::span<const CheckpointInput> inputs,
                            const RestoreOptions& options = {});

}  // namespace cowstate
