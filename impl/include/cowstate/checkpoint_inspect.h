// Looking inside checkpoints without a backend: what `cowstate checkpoint inspect` prints and
// what `cowstate checkpoint verify` decides, as data.
//
// A checkpoint file (docs/checkpoint-format.md) is read as a restore would read it, but with
// no state registered: the header and index through read_checkpoint_layout, then every block
// in key-group order (checksum, decompression), and its sections decoded by the serializer
// ids the header records, not by types. Built-in serializer ids (serializers.h, 1-8) are
// decoded; a state whose serializers are not built in has its block checksums verified but
// its entries counted only by the section headers (CheckpointFileReport::undecoded names
// those states). Every key of a key type with a built-in hash (int32, int64, uint64, string)
// must hash to its block's key group.
//
// A storage directory (checkpoint_storage.h) is opened read-only: every checkpoint with a
// manifest, complete or damaged (CheckpointStorage::scan), its manifest, and its data file
// inspected as above and compared with the manifest's size and checksum; other files in the
// directory (temporaries and orphaned data files a crash left, which the next open() removes)
// are listed too.
//
// The first damage is reported with the file and the byte offset where it was found: the
// start of the part that failed its check (a block, the header, the index or the footer), or
// the exact byte when a decoded field is wrong. Reading stops at the first damage of a file:
// nothing after a failed check is trusted.
//
// Thread safety: pure functions; a FileSystem is used by one thread at a time.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cowstate/checkpoint.h"
#include "cowstate/checkpoint_storage.h"
#include "cowstate/file_system.h"
#include "cowstate/status.h"

namespace cowstate {

// Where a file first failed a check.
struct CheckpointDamage {
  std::string file;
  std::optional<std::uint64_t> offset;  // none when the message names no offset
  std::string message;                  // the reader's error, naming file and offset
};

// One state's section in one block.
struct CheckpointSectionReport {
  std::uint32_t state = 0;  // index into the header's states
  // As the section header says; all decoded unless undecoded. In a delta block: its
  // records (removals and puts).
  std::uint64_t entries = 0;
};

// One block: what the index says and what its sections hold.
struct CheckpointBlockReport {
  CheckpointBlockInfo info{};
  std::vector<CheckpointSectionReport> sections;
};

struct CheckpointFileReport {
  std::string name;
  std::uint64_t size = 0;
  std::optional<CheckpointLayout> layout;     // when header and index are valid
  std::vector<CheckpointBlockReport> blocks;  // the blocks read before any damage
  std::vector<std::uint32_t> undecoded;       // states whose serializers are not built in
  std::optional<CheckpointDamage> damage;

  bool intact() const noexcept { return !damage.has_value(); }
};

// Reads everything of one checkpoint file. Never throws on any input (but bad_alloc).
CheckpointFileReport inspect_checkpoint(const std::string& name, std::span<const std::byte> bytes);

// One checkpoint of a storage directory.
struct StoredCheckpointReport {
  std::uint64_t id = 0;
  bool complete = false;                       // the storage's view (CheckpointStorage::scan)
  std::string reason;                          // why it is damaged, when not complete
  std::optional<CheckpointManifest> manifest;  // when the manifest reads back valid
  std::optional<CheckpointFileReport> file;    // when the data file could be read
  std::optional<CheckpointDamage> damage;      // the first damage of manifest or data file

  bool intact() const noexcept { return complete && !damage.has_value(); }
};

struct CheckpointDirectoryReport {
  std::string dir;
  std::vector<StoredCheckpointReport> checkpoints;  // ascending id
  std::vector<std::string> other_files;             // neither a manifest nor its data file
};

// Inspects the storage directory `dir` through `fs` without changing it. An error only when
// the directory cannot be listed.
Result<CheckpointDirectoryReport> inspect_checkpoint_directory(const std::string& dir,
                                                               FileSystem& fs);

// The byte offset a reader's error message names ("...: offset N: ..."), if any.
std::optional<std::uint64_t> offset_in_message(const std::string& message);

}  // namespace cowstate
