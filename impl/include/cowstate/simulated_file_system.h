// A deterministic in-memory disk behind the FileSystem interface, with a durability model
// (after FoundationDB's non-durable files and ALICE/CrashMonkey crash states), for power-loss
// tests of checkpoint storage.
//
// The disk
//
// Files are inodes: each has durable bytes (what survives a power loss for sure) and current
// bytes (what reads see). Directories are named by path and map entry names to a file's inode
// or to a subdirectory; each has durable entries and current entries. Paths are
// '/'-separated: "a/b" lives in directory "a", "a" in the root "" and "/a" in the root "/";
// both roots always exist and are durable. sync_dir(".") syncs the root "", as POSIX code
// syncs the current directory.
//
// What becomes durable when
//
//   - WritableFile::append (and the truncation by create_file of an existing name) changes
//     the file's current bytes only; WritableFile::sync() makes all of them durable.
//   - create_file of a new name, create_dir, rename_file and remove_file change the current
//     entries of the parent directory only; sync_dir(parent) makes all of them durable.
//
// Every change not yet durable is a pending operation, kept in one log in the order the
// operations happened (pending_operations() prints it).
//
// Power loss
//
// power_loss(choices) decides, through the injected DiskChoices, for every pending operation
// whether it is kept or lost, then makes the outcome the whole disk (current == durable)
// and kills every open WritableFile (their calls return an error Status). The outcomes are
// exactly the allowed ones:
//   1. Directory operations are decided first, in log order, replayed on the durable
//      entries. One is kept only if it still applies where it lands: a rename or a removal
//      only if its name still names the same file, a creation only if its name is free.
//      One that does not apply is lost without a choice.
//   2. A file or directory no longer reachable from a root vanishes with its data; a file
//      whose creation is lost is such a file. Its pending writes are lost without a choice.
//   3. The pending writes of each remaining file are decided in log order, and what survives
//      is a prefix: once one is lost or torn, the later ones are lost without a choice. A
//      kept write may be torn (with PowerLossOptions::torn_writes): only the part before
//      one of the 512-byte sector boundaries (of the file) inside it survives.
// A rename carries the file, so a kept rename's target holds whatever survived of the
// source's data. DiskChoices answers "keep" with 1 and "lose" with 0, and a tear choice's
// largest answer keeps the whole write, so keep_everything() keeps all and lose_everything()
// loses all.
//
// Faults
//
// Armed explicitly, each for a path, each firing once (first armed, first fired): read faults
// apply to the next read_file of the path, write faults to the next append to a file created
// at the path (or a later one: `skip`). A fault that lands beyond the end of what is read changes
// nothing, and is spent. A lost write returns OK and changes neither the current nor the durable
// bytes; a misdirected write grows the file by the append's size with zeros and puts the bytes at
// another offset (zero-filling up to it if that is past the end).
//
// History and crash states
//
// Mutating operations (create, append, sync, close, rename, remove, directory sync and
// creation) are numbered from 1 in the order they are called, as FaultInjectionFileSystem
// numbers them; each one that succeeds is recorded in history(). for_each_crash_state()
// replays the history on the disk it started from (the empty disk, or the one the last power
// loss left) and, after every prefix of it (0 to all operations), runs power_loss through
// every sequence of answers without tears: one crash state per allowed subset of the pending
// operations (rules 1-3 above). Two subsets can give the same image (a creation kept and its
// removal kept, or both lost); both are counted.
//
// Thread safety: a SimulatedFileSystem and its files are used by one thread at a time, like
// the other file systems. Nothing reads a clock and every output is in a fixed order, so the
// same operations and the same choices give the same disk.
//
// Invariants
//   1. current == durable plus the pending operations applied in log order.
//   2. After power_loss() nothing is pending and no file opened before it works.
//   3. A file's pending writes and a directory's pending operations are all numbered above
//      the last sync of that file or directory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cowstate/file_system.h"
#include "cowstate/status.h"

namespace cowstate {

// Where every nondeterministic decision of a SimulatedFileSystem comes from.
class DiskChoices {
 public:
  virtual ~DiskChoices() = default;
  // A value in [0, n); `what` says what is decided, for traces.
  // REQUIRES: n >= 1.
  virtual std::uint64_t choose(std::uint64_t n, const char* what) = 0;
  // The choices that follow decide pending operation `op` (its description, without its
  // number in the history).
  virtual void about(std::string_view /*op*/) {}
};

// Choices from a splitmix64 stream started afresh for each operation from the seed and what
// the operation is: its description with every run of 8 or more digits (the ids in file
// names) left out, and how many operations so described came before it. The same seed
// gives the same choices, and an operation's fate depends neither on the operations that
// were pending before it nor on the ids of the files it touches, so a scenario shrunk
// around a power loss keeps what the loss decides.
class SeededDiskChoices final : public DiskChoices {
 public:
  explicit SeededDiskChoices(std::uint64_t seed) noexcept : seed_(seed), state_(seed) {}
  std::uint64_t choose(std::uint64_t n, const char* what) override;
  void about(std::string_view op) override;

 private:
  std::uint64_t seed_;
  std::uint64_t state_;
  std::map<std::string, std::uint64_t> seen_;  // described operations -> how many so far
};

// Always the largest answer: every pending operation is kept, whole.
DiskChoices& keep_everything() noexcept;
// Always 0: every pending operation is lost.
DiskChoices& lose_everything() noexcept;

// The files (path -> bytes) and directories (paths, the roots left out) of a disk.
struct DiskImage {
  std::map<std::string, std::vector<std::byte>> files;
  std::set<std::string> dirs;
  bool operator==(const DiskImage&) const = default;
};

struct PowerLossOptions {
  // A kept write may survive only up to a sector boundary inside it.
  bool torn_writes = true;
};

// One crash state: the durable disk after the first `prefix_len` operations of the history
// and a power loss that kept one allowed subset of the pending ones.
struct CrashState {
  std::size_t prefix_len = 0;
  DiskImage image;
};

class SimulatedFileSystem final : public FileSystem {
 public:
  static constexpr std::size_t kSectorBytes = 512;

  // A mutating operation that succeeded, as history() records it.
  struct Operation {
    enum class Kind : std::uint8_t { create, append, sync, close, rename, remove, sync_dir, mkdir };
    std::uint64_t number = 0;  // from 1, counting failed calls too
    Kind kind = Kind::create;
    std::string path;               // the file's path for append, sync and close
    std::string to;                 // rename only
    std::uint64_t file = 0;         // create, append, sync, close: which create_file's file
    std::vector<std::byte> bytes;   // append only
    bool lost = false;              // append only: a lost write
    std::int64_t misdirected = -1;  // append only: the offset a misdirected write went to
  };

  // An empty disk: the two roots only. A copy is a separate disk with the same contents,
  // log, faults and history; files opened on the original still write to the original.
  SimulatedFileSystem();
  // A disk holding exactly `image`, all of it durable, with an empty history: what a power
  // loss in the state `image` describes leaves for a restart to find.
  explicit SimulatedFileSystem(const DiskImage& image);

  // FileSystem. Errors name the operation and the path, as the POSIX file system's do.
  // REQUIRES (every path): no trailing '/', no empty component.
  Result<std::unique_ptr<WritableFile>> create_file(const std::string& path) override;
  Result<std::vector<std::byte>> read_file(const std::string& path) override;
  // REQUIRES: `from` and `to` are in the same directory.
  Status rename_file(const std::string& from, const std::string& to) override;
  Status remove_file(const std::string& path) override;
  Status sync_dir(const std::string& dir) override;
  Status create_dir(const std::string& dir) override;
  Result<std::vector<std::string>> list_dir(const std::string& dir) override;

  // Power loss: see the header comment. Returns one line per pending operation saying
  // whether it was kept (whole or up to which byte) or lost.
  std::vector<std::string> power_loss(DiskChoices& choices, PowerLossOptions options = {});
  // Power loss as if it had struck right after operation number `op`: the operations of
  // history() numbered above it never happened (the disk is history()'s start with the
  // rest replayed), then power_loss(choices). Numbering goes on from operations().
  std::vector<std::string> power_loss_after(std::uint64_t op, DiskChoices& choices,
                                            PowerLossOptions options = {});

  // Read faults on the next read_file of `path`.
  // The bit `bit` of the byte at `offset` is flipped. REQUIRES: bit < 8.
  void flip_bit_on_read(const std::string& path, std::uint64_t offset, unsigned bit);
  // Sector `sector` reads as zeros.
  void zero_sector_on_read(const std::string& path, std::uint64_t sector);
  // Sector `sector` reads as sector `from_sector`'s bytes (zeros past the end of the file).
  // REQUIRES: sector != from_sector.
  void misdirect_read(const std::string& path, std::uint64_t sector, std::uint64_t from_sector);
  // Only the first `bytes` bytes are read.
  void short_read(const std::string& path, std::uint64_t bytes);

  // Write faults on an append to the file created at `path`: the next one, or with `skip`
  // the one after `skip` more appends to it have gone through untouched.
  // The append returns OK and changes nothing on the medium.
  void lose_write(const std::string& path, std::uint64_t skip = 0);
  // The bytes land at `offset` instead of the end.
  void misdirect_write(const std::string& path, std::uint64_t offset, std::uint64_t skip = 0);
  // Armed faults that have not fired yet.
  std::size_t armed_faults() const noexcept;

  // Mutating operations so far, failed ones included.
  std::uint64_t operations() const noexcept { return operations_; }
  // The pending operations in log order, e.g.
  // "op 2: append dir/a.tmp bytes 0-4095 (not synced)".
  std::vector<std::string> pending_operations() const;
  // The operations recorded since construction or the last power loss.
  const std::vector<Operation>& history() const noexcept { return history_; }

  // What reads see now, and what would survive a power loss for sure.
  DiskImage image() const;
  DiskImage durable_image() const;

  // Calls `visit` for each crash state of history() (see the header comment), prefixes in
  // order, at most `limit` times; returns the number of calls.
  std::uint64_t for_each_crash_state(std::uint64_t limit,
                                     const std::function<void(const CrashState&)>& visit) const;
  // The number of crash states after the first `prefix_len` operations, at most `limit`.
  // REQUIRES: prefix_len <= history().size().
  std::uint64_t crash_state_count(std::size_t prefix_len, std::uint64_t limit) const;

 private:
  friend class SimulatedFile;

  struct Write {                // a pending change of a file's bytes
    bool truncate = false;      // to size 0; the rest is unused
    bool misdirected = false;   // the bytes went to `offset` instead of the end
    std::uint64_t grow_to = 0;  // the file is at least this long afterwards (zeros)
    std::uint64_t offset = 0;
    std::vector<std::byte> bytes;
  };
  struct Inode {
    std::vector<std::byte> durable;
    std::vector<std::byte> current;
  };
  static constexpr std::uint64_t kDirEntry = 0;  // an entry naming a subdirectory
  struct Dir {
    std::map<std::string, std::uint64_t> durable;  // name -> inode, or kDirEntry
    std::map<std::string, std::uint64_t> current;
  };
  struct Pending {
    enum class Kind : std::uint8_t { write, create, mkdir, rename, remove };
    Kind kind = Kind::write;
    std::uint64_t inode = 0;  // write; create, rename and remove: the file named
    Write write;              // write only
    std::string dir;          // directory operations: the directory changed
    std::string name;         // directory operations: the name (rename: the source)
    std::string to;           // rename: the target name
    std::string path;         // for printing
  };
  struct Disk {
    std::map<std::uint64_t, Inode> inodes;
    std::map<std::string, Dir> dirs;
    std::map<std::uint64_t, Pending> pending;  // by operation number: the log
    std::uint64_t next_inode = 1;
    std::uint64_t epoch = 0;  // bumped by every power loss; files opened before are dead
  };
  struct ReadFault {
    enum class Kind : std::uint8_t { flip, zero, misdirect, shorten };
    Kind kind = Kind::flip;
    std::uint64_t at = 0;    // flip: byte offset; zero, misdirect: sector; shorten: bytes
    std::uint64_t from = 0;  // flip: bit; misdirect: the sector read instead
  };
  struct WriteFault {
    bool lost = false;
    std::uint64_t offset = 0;  // misdirected: where the bytes land
    std::uint64_t skip = 0;    // appends to let through before this one fires
  };

  struct PowerLoss;  // the steps of lose_power()

  std::uint64_t tick() noexcept { return ++operations_; }
  void apply_read_fault(const ReadFault& f, std::vector<std::byte>& bytes) const;
  // "append f bytes 0-511", "rename a to b", ...
  static std::string describe(const Pending& p);

  // The operations on disk_, numbered `n`, shared by the calls and the replay of history.
  Result<std::uint64_t> do_create(const std::string& path, std::uint64_t n);
  void do_append(std::uint64_t inode, const std::string& path, std::span<const std::byte> bytes,
                 const WriteFault* fault, std::uint64_t n);
  void do_sync(std::uint64_t inode);
  Status do_rename(const std::string& from, const std::string& to, std::uint64_t n);
  Status do_remove(const std::string& path, std::uint64_t n);
  Status do_sync_dir(const std::string& dir);
  Status do_create_dir(const std::string& dir, std::uint64_t n);
  void replay(const Operation& op, std::map<std::uint64_t, std::uint64_t>& file_inodes);
  std::uint64_t visit_crash_states(std::size_t prefix_len, std::uint64_t limit,
                                   const std::function<void(const CrashState&)>& visit) const;
  static std::vector<std::string> lose_power(Disk& disk, DiskChoices& choices,
                                             PowerLossOptions options);
  static DiskImage image_of(const Disk& disk, bool durable);

  // The disk and its log; copied whole to explore crash states.
  Disk disk_;
  Disk history_base_;  // the disk history() starts from

  // Counters and faults.
  std::uint64_t operations_ = 0;
  std::uint64_t files_created_ = 0;
  std::vector<Operation> history_;
  std::map<std::string, std::vector<ReadFault>> read_faults_;
  std::map<std::string, std::vector<WriteFault>> write_faults_;
};

}  // namespace cowstate
