// ChangeLog: what a CowStateMap changed, interval by interval, for incremental checkpoints.
//
// Intervals
// ---------
// The map's versions cut its life into intervals: interval v is the time while the map
// version is v, from the start of snapshot v (or the map's construction, for v = 0) to the
// start of the next snapshot. With tracking on, the map records in the open interval's
// record the pool slot of every entry it creates, copies or changes (a put, an assignment,
// a mutable hand-out through get_mutable or transform), once per entry and interval (it
// sets the entry's version to the interval's as it records it), and a tombstone (key,
// namespace) for every entry it removes. A snapshot's start seals the open record: from
// then on it is immutable and shared (shared_ptr) by the log and every snapshot that
// captured it, so a snapshot's reader thread reads it while the writer goes on.
//
// Deltas
// ------
// The base is the version of the last snapshot whose checkpoint completed (complete(b));
// until one did there is none, and a snapshot's delta is all of it. A snapshot at version
// v captures the sealed records of intervals [base, v). What changed between snapshot
// `base` and snapshot v is then: the entries of snapshot v whose
// version is at least the base (their slots are among the captured records' slots), and
// the tombstones of the captured records. Applying a delta to the image of snapshot
// `base`: remove every tombstone's key, then put every changed entry (a key removed and
// put again has both). complete(b) drops the records of intervals before b; a cancelled or
// failed checkpoint calls nothing, so the next delta still reaches back to the base.
//
// Thread safety
// -------------
// The writer thread calls every member. A Captured list may move to another thread with its
// snapshot; its records are never written after sealing.
//
// Invariants (docs/invariants.md)
//  I14 With tracking on, every live entry whose version v is at least the base has its slot
//      in interval v's record (open or sealed).
//  I15 Every key live at the base's snapshot and not live now has a tombstone in a record
//      of an interval at or after the base.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "cowstate/assert.h"

namespace cowstate {

template <class K, class N>
class ChangeLog {
 public:
  struct Tombstone {
    K key;
    N ns;
  };
  // What one interval changed.
  struct Record {
    std::uint32_t version = 0;
    std::vector<std::uint32_t> slots;
    std::vector<Tombstone> tombstones;
  };
  // The sealed records a snapshot captured, oldest first.
  struct Captured {
    bool has_base = false;
    std::uint32_t base = 0;
    std::vector<std::shared_ptr<const Record>> records;
  };

  bool on() const noexcept { return on_; }
  // Starts tracking at map version `version`. REQUIRES: not on().
  void start(std::uint32_t version) {
    COWSTATE_ASSERT(!on_, "REQUIRES", "change tracking started twice");
    on_ = true;
    start_ = version;
    open_.version = version;
  }

  void note_slot(std::uint32_t slot) { open_.slots.push_back(slot); }
  void note_removal(const K& key, const N& ns) { open_.tombstones.push_back({key, ns}); }

  // At the start of snapshot `version`: seals the open record (of interval version - 1)
  // and returns the records since the base.
  Captured seal(std::uint32_t version) {
    COWSTATE_ASSERT(on_, "REQUIRES", "sealing a change log that is not tracking");
    COWSTATE_ASSERT(open_.version < version, "I14", "sealing an interval at or after its end");
    // The next interval's slots start with room for as many as this one's: a steady
    // workload then allocates them once per interval rather than growing them from empty.
    const std::size_t room = open_.slots.size();
    if (!open_.slots.empty() || !open_.tombstones.empty()) {
      sealed_bytes_ += bytes_of(open_);
      sealed_.push_back(std::make_shared<const Record>(std::move(open_)));
    }
    open_ = Record{};
    open_.version = version;
    open_.slots.reserve(room);
    return Captured{has_base_, base_, sealed_};
  }

  // The checkpoint of snapshot `version` completed: it is the base from now on, unless a
  // newer one already is. Drops the records before it.
  void complete(std::uint32_t version) {
    COWSTATE_ASSERT(on_, "REQUIRES", "completing a checkpoint on a map that does not track");
    COWSTATE_ASSERT(version <= open_.version, "I14", "completing a snapshot not yet started");
    COWSTATE_ASSERT(version > start_, "I14", "completing a snapshot started before tracking");
    if (has_base_ && version <= base_) return;
    has_base_ = true;
    base_ = version;
    auto keep = std::find_if(sealed_.begin(), sealed_.end(),
                             [&](const auto& r) { return r->version >= version; });
    for (auto it = sealed_.begin(); it != keep; ++it) sealed_bytes_ -= bytes_of(**it);
    sealed_.erase(sealed_.begin(), keep);
  }

  bool has_base() const noexcept { return has_base_; }
  std::uint32_t base() const noexcept { return base_; }
  const Record& open() const noexcept { return open_; }
  const std::vector<std::shared_ptr<const Record>>& sealed() const noexcept { return sealed_; }
  // Bytes of the records the log holds (snapshots may hold sealed ones longer).
  std::size_t bytes() const noexcept { return on_ ? sealed_bytes_ + bytes_of(open_) : 0; }
  // bytes(), summed from scratch over the records: what a recount of the map's memory
  // compares the running count with.
  std::size_t recount_bytes() const noexcept {
    if (!on_) return 0;
    std::size_t n = bytes_of(open_);
    for (const auto& r : sealed_) n += bytes_of(*r);
    return n;
  }

 private:
  static std::size_t bytes_of(const Record& r) noexcept {
    return sizeof(Record) + r.slots.capacity() * sizeof(std::uint32_t) +
           r.tombstones.capacity() * sizeof(Tombstone);
  }

  // Writer thread only.
  bool on_ = false;
  bool has_base_ = false;  // a checkpoint completed since tracking started
  std::uint32_t start_ = 0;  // the map version when tracking started
  std::uint32_t base_ = 0;
  Record open_;
  std::vector<std::shared_ptr<const Record>> sealed_;
  std::size_t sealed_bytes_ = 0;
};

}  // namespace cowstate
