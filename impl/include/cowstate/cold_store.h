// ColdStore: the cold tier of the spill tier (spill_tier.h), one LMDB environment per backend.
//
// Why LMDB
// --------
// LMDB is a copy-on-write B+tree in one memory-mapped file with a single writer and MVCC read
// transactions: a read transaction sees the database as of its start for as long as it lives,
// whatever the writer does meanwhile. That is our map snapshot's contract, so a snapshot of a
// spilled (state, key group) is a read transaction. It starts no threads of its own, so it
// runs deterministically under the simulator.
//
// Layout
// ------
// One unnamed database. A key is a 6-byte prefix, the table id (u32, big-endian) and the key
// group (u16, big-endian), followed by the entry's key and namespace in their serializers'
// layouts; the value is the state in its serializer's layout. So one (table, key group) is one
// contiguous key range, found with MDB_SET_RANGE on its prefix, and its records are exactly
// the bytes a checkpoint block holds (key, namespace, state). Table ids are handed out per
// StateTable object, never per state, so a restore's fresh tables fill ranges of their own
// while the tables they replace still own theirs.
//
// Opened for speed
// ----------------
// Nothing here needs to survive the process (checkpoints give durability). The environment
// lives in a fresh directory, which is removed with its files right after the open: LMDB
// keeps working through its descriptors and maps, and a crashed or killed process leaves
// nothing on disk. Its flags: MDB_NOSYNC and MDB_NOMETASYNC (no fsync), MDB_WRITEMAP (writes
// go straight into the map), MDB_NORDAHEAD (random access) and MDB_NOTLS (reader slots belong
// to transactions, not threads: several read transactions live on one thread, and one may be
// used on a thread other than the one that began it, as a checkpoint's async phase does).
// The map size is a reservation of address space (the file is sparse).
//
// Transactions
// ------------
// The writer thread keeps one write transaction and one cursor in it open across calls (a
// call that lands on the leaf page the last one left the cursor on skips the descent) and
// commits it every `commit_every_writes` writes and before a read transaction begins
// (read_txn()), so that the read transaction sees every write made so far. Reads on the writer
// thread go through the write transaction and see its uncommitted writes.
//
// Errors
// ------
// open() returns a Status. Calls in the middle of a state access have no way to return one
// (ValueState::update returns nothing), so an LMDB failure there (a full disk, a key longer
// than LMDB's limit of 511 bytes) throws ColdStoreError naming the call and LMDB's message;
// spill and load catch it and report it as a Status.
//
// Thread safety
// -------------
// The writer thread calls everything but ColdCursor and ColdReadTxn, which one other thread at
// a time may use and destroy (a checkpoint's writer). LMDB serializes what it shares.
//
// Invariants (docs/invariants.md)
//  P1  A read transaction begins only after the write transaction committed: it sees every
//      write made before read_txn() returned and none made after.
//  P2  A key is prefix(table, key group) + key + namespace: one (table, key group) is one
//      contiguous key range, disjoint from every other.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>

#include "cowstate/status.h"

struct MDB_env;
struct MDB_txn;
struct MDB_cursor;

namespace cowstate {

struct ColdStoreOptions {
  // Where the store's own directory is made (removed once open); empty: $TMPDIR or /tmp.
  std::string parent_directory;
  // Address space reserved for the database file (sparse).
  std::size_t map_size_bytes = std::size_t{256} << 30;
  // Read transactions alive at once (live checkpoints reading spilled key groups).
  unsigned max_readers = 512;
  // Writes between two commits of the writer's transaction (bounds its dirty pages).
  std::size_t commit_every_writes = std::size_t{1} << 20;
};

class ColdStoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline constexpr std::size_t kColdPrefixSize = 6;
using ColdPrefix = std::array<std::byte, kColdPrefixSize>;
ColdPrefix cold_prefix(std::uint32_t table_id, std::int32_t key_group) noexcept;

// A read transaction: what the database held when it began. Aborted when the last owner
// drops it. Any one thread at a time.
class ColdReadTxn {
 public:
  ColdReadTxn(MDB_txn* txn, unsigned dbi) noexcept : txn_(txn), dbi_(dbi) {}
  ~ColdReadTxn();
  ColdReadTxn(const ColdReadTxn&) = delete;
  ColdReadTxn& operator=(const ColdReadTxn&) = delete;
  MDB_txn* txn() const noexcept { return txn_; }
  unsigned dbi() const noexcept { return dbi_; }

 private:
  MDB_txn* txn_;
  unsigned dbi_;
};

// Forward iteration over one (table, key group) range of a read transaction.
class ColdCursor {
 public:
  ColdCursor(std::shared_ptr<ColdReadTxn> txn, const ColdPrefix& prefix);
  ~ColdCursor();
  ColdCursor(const ColdCursor&) = delete;
  ColdCursor& operator=(const ColdCursor&) = delete;
  // The next record of the range: the key after the prefix and the value. False at the end.
  // The spans stay valid while the transaction lives.
  bool next(std::span<const std::byte>& key, std::span<const std::byte>& value);

 private:
  std::shared_ptr<ColdReadTxn> txn_;  // destroyed after the cursor is closed
  MDB_cursor* cursor_ = nullptr;
  ColdPrefix prefix_;
  bool started_ = false;
  bool done_ = false;
};

class ColdStore {
 public:
  static Result<std::unique_ptr<ColdStore>> open(const ColdStoreOptions& options = {});
  ~ColdStore();
  ColdStore(const ColdStore&) = delete;
  ColdStore& operator=(const ColdStore&) = delete;

  // A table id not handed out before by this store.
  std::uint32_t new_table_id() noexcept { return next_table_id_++; }

  // The writer thread.
  // The value stored under `key`, or false. `value` is valid until the next call.
  bool get(std::span<const std::byte> key, std::span<const std::byte>& value);
  // Stores `value` under `key`; returns whether the key was present before.
  bool put(std::span<const std::byte> key, std::span<const std::byte> value);
  // Stores under a key known to be present (one search): replaces its value.
  void overwrite(std::span<const std::byte> key, std::span<const std::byte> value);
  // Stores under a key known to be absent; returns false (and stores nothing) if present.
  bool insert(std::span<const std::byte> key, std::span<const std::byte> value);
  // Stores records under keys that are distinct, in ascending order and absent: appended
  // without a search while they sort after every key in the store (a fresh table's range),
  // inserted otherwise. Returns the index of the first record whose key was present (that
  // record and the ones after it are not stored), or the count when all were stored.
  struct Record {
    std::span<const std::byte> key;
    std::span<const std::byte> value;
  };
  std::size_t insert_sorted(std::span<const Record> records);
  // Removes `key`; returns whether it was present.
  bool erase(std::span<const std::byte> key);
  // Removes every record of the prefix's range; returns how many.
  std::size_t erase_range(const ColdPrefix& prefix);
  // Calls fn(key after the prefix, value) for each record of the range, in key order.
  template <class F>
  void scan(const ColdPrefix& prefix, F&& fn) {
    ScanState s = scan_begin(prefix);
    std::span<const std::byte> k;
    std::span<const std::byte> v;
    while (scan_next(s, k, v)) fn(k, v);
    scan_end(s);
  }
  // Commits the write transaction (P1); the next write begins another.
  void commit();
  // A read transaction of everything written so far (commits first, P1).
  std::shared_ptr<ColdReadTxn> read_txn();

  std::uint64_t commits() const noexcept { return commits_; }

 private:
  struct ScanState {
    MDB_cursor* cursor;
    ColdPrefix prefix;
    bool started;
  };
  ColdStore() = default;
  MDB_txn* write_txn();
  // The writer's cursor in the write transaction: consecutive calls that land on the leaf
  // page it stands on skip the descent from the root.
  MDB_cursor* cursor();
  void wrote();
  ScanState scan_begin(const ColdPrefix& prefix);
  bool scan_next(ScanState& s, std::span<const std::byte>& k, std::span<const std::byte>& v);
  void scan_end(ScanState& s) noexcept;

  // Set at open.
  MDB_env* env_ = nullptr;
  unsigned dbi_ = 0;
  std::size_t commit_every_ = 0;

  // Writer thread.
  MDB_txn* txn_ = nullptr;
  MDB_cursor* cursor_ = nullptr;
  std::size_t writes_in_txn_ = 0;
  std::uint32_t next_table_id_ = 1;
  std::uint64_t commits_ = 0;
};

}  // namespace cowstate
