// CheckpointStorage: checkpoints in a directory of a real file system, published so that a
// crash at any moment leaves the previous complete checkpoint restorable and never a
// partial one that looks complete.
//
// Layout of the directory
// -----------------------
//   chk-<id>.cscp       the checkpoint file (checkpoint.h), id as 20 decimal digits
//   chk-<id>.manifest   its manifest: the one thing that makes checkpoint <id> complete
//   *.tmp               a file being written; never read, removed on open()
// The manifest (format in docs/checkpoint-format.md) names the checkpoint id, the data
// file's size and its XXH3-64, for an incremental checkpoint its chain (the ids of its
// parent, the parent's parent, ... back to a full checkpoint), and has its own checksum.
//
// Publishing (PendingCheckpoint::commit)
// ---------------------------------------
//   1. the data was appended to chk-<id>.cscp.tmp; fsync it, close it
//   2. rename it to chk-<id>.cscp; fsync the directory
//   3. write chk-<id>.manifest.tmp, fsync, close; rename to chk-<id>.manifest; fsync the
//      directory: from here on the checkpoint is complete
//   4. prune: for each complete checkpoint beyond the newest `retain` that no retained
//      checkpoint's chain names (nor the chain of one still being written), and each damaged
//      one older than every retained checkpoint and named by no chain, remove its manifest (so it
//      is no longer complete), newest first, fsyncing the directory after each; then remove
//      their data files
// A crash before the manifest's rename leaves at most a data file without a manifest (an
// orphan), which is never taken for complete and is removed by the next open(). Files
// shared by several checkpoints (chain members) are counted through the manifests: a file
// goes only once no retained manifest names it (C11), so no crash or prune can take a
// member from a retained chain. A crash or an error in
// the middle of pruning leaves an older checkpoint complete or an orphan, both harmless:
// a chain names only older checkpoints, so removing manifests newest first, each durably
// before the next, never leaves one whose chain lost a member; and the directory fsync
// between the manifests and the data files keeps a power loss from bringing back a
// manifest whose data file is gone.
// fsync before each rename makes the order hold across power loss, not only process death.
//
// Cancelling (PendingCheckpoint::cancel, from any thread)
// --------------------------------------------------------
// Flink never acknowledges a cancelled async snapshot, and neither do we. One atomic phase
// decides the race between a cancel and the commit: commit() moves it from open to
// committing before it touches the directory, cancel() from open to cancelled. Whichever
// comes first wins:
//   - a cancel accepted first: the checkpoint is never published; the writer stops at its
//     next section or block (cancel_requested()), a later append or commit() is refused,
//     and the temporary file is removed by the owner's commit(), abort() or the destructor;
//   - a cancel after commit() began: CancelResult::too_late; the commit goes on and
//     publishes the checkpoint unless it fails on its own.
//
// Finding checkpoints
// -------------------
// A checkpoint is complete when its manifest reads back valid (size, magic, checksum,
// version, its own id), its data file exists and every member of its chain is complete. A
// manifest under a final name that is not valid, whose data file is missing or whose chain
// has a member that is not complete makes the checkpoint damaged: the commit discipline
// never leaves one behind, so it means the medium or somebody else changed the directory.
// scan() lists both, with the reason for each damaged one. latest() never passes over a
// damaged checkpoint silently: by default a damaged checkpoint newer than the newest
// complete one is an error naming it and why; StorageOptions::fall_back_past_damaged makes
// latest() return the newest complete one instead (the caller asked for the rollback, and
// scan() says what was skipped). read(id) returns the data file after checking its size and
// XXH3 against the manifest, so a torn or bit-rotten file is an error naming it rather than
// a restore of wrong data; read_chain(id) does so for each member of an incremental
// checkpoint's chain.
//
// I/O layer
// ---------
// All file system access goes through a FileSystem (an interface): posix_file_system() for
// real files, and FaultInjectionFileSystem wrapping another to fail one chosen mutating
// operation (create, append, sync, close, rename, remove, directory sync), so tests and the
// simulator can put an I/O error at any write of a checkpoint. With StorageOptions::io_thread
// the data file's appends go to a thread of their own (make_async_writable_file). The file
// systems are in cowstate/file_system.h, the async file in cowstate/async_file.h.
//
// Thread safety
// -------------
// A CheckpointStorage and its PendingCheckpoints are used by one thread at a time (the
// async checkpoint thread, typically), except PendingCheckpoint::cancel() and
// cancel_requested(), which any thread may call at any time. One process writes a
// directory at a time.
//
// Invariants (docs/invariants.md)
//  C5  A manifest is renamed into place only after its data file was fsynced, renamed into
//      place and the directory fsynced; only a checkpoint with a manifest is complete.
//  C6  A PendingCheckpoint is committed or aborted once; an aborted or failed one leaves
//      no file under a final name.
//  C7  A checkpoint whose cancel was accepted is never published, and its temporary file
//      is gone once its owner commits, aborts or destroys it; a cancel that finds the
//      commit begun returns too_late.
//  C11 Pruning removes no file of a checkpoint that a retained checkpoint's chain names; a
//      checkpoint is complete only while every member of its chain is; a prune cut short by
//      an error or a power loss leaves no manifest whose chain lost a member.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cowstate/async_file.h"
#include "cowstate/checkpoint.h"
#include "cowstate/checksum.h"
#include "cowstate/file_system.h"
#include "cowstate/status.h"

namespace cowstate {

struct StorageOptions {
  // Complete checkpoints kept; older ones are removed after each commit. At least 1.
  std::size_t retain = 3;
  // Write each data file through make_async_writable_file (a thread per pending
  // checkpoint), so that building the bytes and the kernel's copy of them overlap. Off, every
  // write happens on the calling thread and an error is reported by the append that met
  // it, which the simulator wants (its runs must be deterministic).
  bool io_thread = true;
  // Its buffers, with io_thread.
  AsyncFileOptions io_buffers;
  // Off, latest() fails when a checkpoint newer than the newest complete one is damaged; on,
  // it returns the newest complete one (an explicit rollback, as RocksDB's
  // best_efforts_recovery).
  bool fall_back_past_damaged = false;
};

// A checkpoint whose manifest is under its final name but does not make it complete.
struct DamagedCheckpoint {
  std::uint64_t id = 0;
  std::string reason;  // names the file, and the offset where the damage is
};

// What the directory holds: complete checkpoints, ascending, and damaged ones, ascending.
struct CheckpointScan {
  std::vector<std::uint64_t> complete;
  std::vector<DamagedCheckpoint> damaged;
};

// What a checkpoint's manifest says (docs/checkpoint-format.md, "Manifest").
struct CheckpointManifest {
  std::uint64_t id = 0;
  std::uint64_t size = 0;      // of the data file
  std::uint64_t checksum = 0;  // XXH3-64 of the whole data file
  // An incremental checkpoint's ancestors, its parent first, back to a full checkpoint;
  // empty for a full one (manifest version 1).
  std::vector<std::uint64_t> chain;
};

class CheckpointStorage;

// What PendingCheckpoint::cancel() achieved.
enum class CancelResult : std::uint8_t {
  accepted,  // the commit had not begun: the checkpoint is never published
  repeated,  // an earlier cancel was accepted already
  too_late,  // the commit had begun or finished: it publishes unless it fails on its own
  finished,  // the checkpoint had failed or been aborted: nothing is published anyway
};
const char* cancel_result_name(CancelResult r) noexcept;

// A checkpoint being written: a CheckpointSink into a temporary file. commit() publishes
// it; abort() (or destruction without commit) removes the temporary file; cancel() (any
// thread) makes sure it is never published unless its commit has begun (C7).
class PendingCheckpoint final : public CheckpointSink {
 public:
  ~PendingCheckpoint() override;
  PendingCheckpoint(const PendingCheckpoint&) = delete;
  PendingCheckpoint& operator=(const PendingCheckpoint&) = delete;

  std::uint64_t id() const noexcept { return id_; }
  // Refused once a cancel was accepted. REQUIRES: neither committed nor aborted.
  Status append(std::span<const std::byte> bytes) override;
  // Publishes the checkpoint (steps 1-4 above). On error nothing is published (C6) and the
  // previous complete checkpoint stays the latest. After an accepted cancel it publishes
  // nothing, removes the temporary file and says so (C7).
  // REQUIRES: neither committed nor aborted.
  Status commit();
  // Removes the temporary file (best effort). Idempotent.
  void abort() noexcept;
  // Asks that the checkpoint never be published. Any thread, any time, any number of times.
  CancelResult cancel() noexcept;
  // A cancel was accepted. Any thread.
  bool cancel_requested() const noexcept override;

 private:
  friend class CheckpointStorage;
  // Who may still publish: the one atomic word the race between cancel() and commit() is
  // decided on (see "Cancelling" above).
  enum class Phase : std::uint8_t { open, cancelled, committing, committed, aborted };

  PendingCheckpoint(CheckpointStorage* storage, std::uint64_t id,
                    std::unique_ptr<WritableFile> file);
  Status refuse_cancelled();

  // Set at construction.
  CheckpointStorage* storage_;
  std::uint64_t id_;

  // Any thread.
  std::atomic<Phase> phase_{Phase::open};

  // The owning thread only.
  std::unique_ptr<WritableFile> file_;
  std::vector<std::uint64_t> chain_;  // its manifest's chain
  Checksum64Stream checksum_;
  std::uint64_t size_ = 0;
  bool finished_ = false;  // committed or aborted
  bool failed_ = false;    // an append failed: commit() is refused
  bool holds_chain_ = false;  // its chain is held against pruning until it finishes
};

class CheckpointStorage {
 public:
  // Bytes of the manifest of a full checkpoint (version 1), and of an incremental one's
  // (version 2) with a chain of n members: kManifestSize + 4 + 8n (docs/checkpoint-format.md).
  static constexpr std::size_t kManifestSize = 40;

  // Opens (creating it if needed) the checkpoint directory `dir`, and removes temporaries
  // and orphaned data files left by a crash.
  static Result<std::unique_ptr<CheckpointStorage>> open(std::string dir,
                                                         FileSystem& fs = posix_file_system(),
                                                         StorageOptions options = {});

  // Opens the existing directory `dir` without changing anything in it (nothing created,
  // synced or cleaned), for tools that look inside; begin() is refused on it.
  static Result<std::unique_ptr<CheckpointStorage>> open_read_only(
      std::string dir, FileSystem& fs = posix_file_system());

  const std::string& dir() const noexcept { return dir_; }
  // Starts checkpoint `id`; an incremental one names its parent (the header's parent
  // checkpoint id), whose chain it extends. REQUIRES: id > 0. An error if `id` is not above
  // every complete and every damaged checkpoint (ids only grow), the parent is not complete,
  // the temporary file cannot be created, or the storage was opened read-only.
  Result<std::unique_ptr<PendingCheckpoint>> begin(std::uint64_t id, std::uint64_t parent = 0);
  // The complete and the damaged checkpoints.
  Result<CheckpointScan> scan();
  // Ids of the complete checkpoints, ascending.
  Result<std::vector<std::uint64_t>> complete_checkpoints();
  // The newest complete checkpoint, or nullopt when there is none. An error when a newer
  // checkpoint is damaged, unless StorageOptions::fall_back_past_damaged.
  Result<std::optional<std::uint64_t>> latest();
  // The data of complete checkpoint `id`, checked against its manifest.
  Result<std::vector<std::byte>> read(std::uint64_t id);
  // The data of every member of checkpoint `id`'s chain (CheckpointManifest::chain, parent
  // first), each checked against its own manifest: with read(id), what a restore of an
  // incremental checkpoint needs (CheckpointInput::chain).
  Result<std::vector<std::vector<std::byte>>> read_chain(std::uint64_t id);
  // Checkpoint `id`'s manifest, checked (size, magic, checksum, version, flags, its id).
  Result<CheckpointManifest> read_manifest(std::uint64_t id);
  // Paths of checkpoint `id`'s data file and manifest.
  std::string data_path(std::uint64_t id) const;
  std::string manifest_path(std::uint64_t id) const;
  // Where the file of final name `path` is written before it is renamed into place.
  static std::string temporary_path(const std::string& path);

 private:
  friend class PendingCheckpoint;
  CheckpointStorage(std::string dir, FileSystem& fs, StorageOptions options)
      : dir_(std::move(dir)), fs_(&fs), options_(options), io_pool_(options.io_buffers.buffers) {}
  Status clean();
  Status publish(PendingCheckpoint& p);
  Status prune();
  // The chains of the incremental checkpoints begun and not yet committed or aborted: pruning
  // keeps their members too (C11), or a commit could take the parent of one being written.
  void hold_chain(std::uint64_t id, const std::vector<std::uint64_t>& chain);
  void release_chain(std::uint64_t id) noexcept;
  std::vector<std::uint64_t> held_chain_members();
  using Manifest = CheckpointManifest;

  std::string dir_;
  FileSystem* fs_;
  StorageOptions options_;
  bool read_only_ = false;
  AsyncBufferPool io_pool_;  // the data files' buffers, with io_thread
  // Pending checkpoints begin, commit and abort on their own threads.
  std::mutex held_mu_;
  std::map<std::uint64_t, std::vector<std::uint64_t>> held_chains_;  // guarded by held_mu_
};

}  // namespace cowstate
