// Map snapshot files: MapSnapshotWriter turns a frozen CowStateMap snapshot into bytes a
// bounded number of entries at a time; read_map_snapshot restores a fresh map from them.
//
// Format (version 1; docs/snapshot-format.md). All integers little-endian.
//
//   offset  size  field
//   0       4     magic "CSMS"
//   4       2     format version (u16) = 1
//   6       2     key serializer id (u16)
//   8       2     namespace serializer id (u16)
//   10      2     state serializer id (u16)
//   12      8     entry count n (u64) = snapshot.size()
//   20      ...   entries: key, namespace, state, each in its serializer's layout
//   E       8     entries actually written (u64); equals n in a good file
//   E+8     8     XXH3-64 (seed 0) of bytes [0, E+8)
//
// Entries appear in the order of the snapshot's Scan (ascending pool slot); the order
// carries no meaning and a reader must not depend on it.
//
// Writing. The writer walks the snapshot's Scan (pool-slot order). step(k) appends at most
// k entries and, in the step that reaches the end, the trailer; the checksum is fed step by
// step, so no step costs more than its entries. When all three serializers are fixed-width
// the buffer is reserved once for the whole file. When they also store directly
// (DirectSerializer), a step writes chunks of 1024 entries: one bounds check per chunk, an
// entry costs three little-endian stores, and each chunk is hashed right after it is
// written, while it is still in cache.
//
// Reading. read_map_snapshot checks, in order and before building anything: magic, format
// version, serializer ids (a file of other types is foreign), presence of the trailer, the
// checksum, trailer count == header count, and that the count fits in the bytes present.
// Only then does it allocate a map pre-sized for n entries and decode into it; a short or
// malformed value, a duplicate (key, namespace) or bytes left before the trailer is an
// error. Every error is a Status naming the byte offset, what was expected and what was
// found; no input crashes the reader, and an error never returns a partially restored map.
//
// Thread safety. A writer belongs to one thread at a time (the snapshot's async writer);
// it reads only the frozen snapshot, never the live map, so the map's writer thread may
// keep writing meanwhile. read_map_snapshot is pure.
//
// Invariants
//  S1  Between steps, bytes() holds the header and exactly the entries counted by
//      entries_written(), plus the trailer once done().
//  S2  When done, the entries visited (written + dropped by a mutant) equal snapshot.size().
//  S3  The trailer count equals the number of entries in the bytes.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cowstate/assert.h"
#include "cowstate/bytes.h"
#include "cowstate/checksum.h"
#include "cowstate/cow_state_map.h"
#include "cowstate/hooks.h"
#include "cowstate/serializers.h"
#include "cowstate/status.h"

namespace cowstate {

inline constexpr std::array<std::byte, 4> kMapSnapshotMagic = {std::byte{'C'}, std::byte{'S'},
                                                               std::byte{'M'}, std::byte{'S'}};
inline constexpr std::uint16_t kMapSnapshotFormatVersion = 1;
inline constexpr std::size_t kMapSnapshotHeaderSize = 20;
inline constexpr std::size_t kMapSnapshotTrailerSize = 16;

namespace detail {
struct MapSnapshotIds {
  std::uint16_t key;
  std::uint16_t ns;
  std::uint16_t state;
};

// Checks everything but the entries: magic, version, serializer ids, trailer presence,
// checksum, trailer count == header count, and count <= entry bytes / min_entry_size
// (when min_entry_size > 0). On success `count` is the header's entry count.
Status check_map_snapshot_frame(std::span<const std::byte> bytes, MapSnapshotIds expected,
                                std::size_t min_entry_size, std::uint64_t& count);

// `inner` with " (entry i+1 of n)" appended.
Status map_snapshot_entry_error(const Status& inner, std::uint64_t i, std::uint64_t n);
Status map_snapshot_duplicate_error(std::size_t entry_offset, std::uint64_t i, std::uint64_t n);
Status map_snapshot_trailing_error(std::size_t offset, std::size_t extra, std::uint64_t n);
}  // namespace detail

template <class Map, class KS, class NS, class SS>
requires Serializer<KS, typename Map::key_type> && Serializer<NS, typename Map::namespace_type> &&
    Serializer<SS, typename Map::state_type>
class MapSnapshotWriter {
 public:
  using Snapshot = typename Map::Snapshot;
  using K = typename Map::key_type;
  using N = typename Map::namespace_type;
  using S = typename Map::state_type;

  // Bytes per entry when every serializer is fixed-width, else 0.
  static constexpr std::size_t kFixedEntrySize =
      (KS::fixed_size > 0 && NS::fixed_size > 0 && SS::fixed_size > 0)
          ? KS::fixed_size + NS::fixed_size + SS::fixed_size
          : 0;
  // Entries are stored straight into the buffer (every serializer has `store`).
  static constexpr bool kDirect = kFixedEntrySize > 0 && DirectRecord<KS, K, NS, N, SS, S>;
  // Entries per directly stored chunk: 1024 x 20 bytes stays well inside L1/L2 until hashed.
  static constexpr std::size_t kChunkEntries = 1024;

  // Writes the header.
  // REQUIRES: `snapshot` is valid and stays live (not released, not destroyed) until the
  // writer is done or destroyed.
  explicit MapSnapshotWriter(const Snapshot& snapshot);

  // Writes at most `max_entries` entries; writes the trailer and returns true when the
  // last entry is written (then and on every later call).
  bool step(std::size_t max_entries) {
    return step(max_entries, [](const K&, const N&, const S&) {});
  }
  // As step(max_entries), calling on_entry(key, ns, state) after each entry written.
  template <class F>
  bool step(std::size_t max_entries, F&& on_entry);

  bool done() const noexcept { return done_; }
  std::size_t entries_written() const noexcept { return written_; }
  // The bytes so far: a complete file once done().
  const std::vector<std::byte>& bytes() const noexcept { return out_.vector(); }
  // REQUIRES: done(). Leaves bytes() empty.
  std::vector<std::byte> take_bytes() {
    COWSTATE_ASSERT(done_, "REQUIRES", "take_bytes() before the snapshot writer is done");
    return out_.take();
  }

 private:
  void finish();

  // Set at construction.
  const Snapshot* snapshot_;

  // Writer state; one thread at a time.
  typename Snapshot::Scan scan_;  // entries in pool order: see CowStateMapSnapshot::Scan
  ByteWriter out_;
  Checksum64Stream checksum_;
  std::size_t hashed_ = 0;   // bytes [0, hashed_) fed to checksum_
  std::size_t visited_ = 0;  // entries passed by the cursor (written or dropped)
  std::size_t written_ = 0;  // entries in out_
  bool done_ = false;
};

// Steps a writer to completion and returns the file.
// REQUIRES: `snapshot` is valid for the duration of the call.
template <class Map, class KS, class NS, class SS>
std::vector<std::byte> write_map_snapshot(const typename Map::Snapshot& snapshot) {
  MapSnapshotWriter<Map, KS, NS, SS> writer(snapshot);
  while (!writer.step(std::size_t{1} << 16)) {
  }
  return writer.take_bytes();
}

// Restores a map from a file written by MapSnapshotWriter<Map, KS, NS, SS>. `options`
// bounds the map's capacities; its initial capacity is replaced by one sized for the file.
template <class Map, class KS, class NS, class SS>
requires Serializer<KS, typename Map::key_type> && Serializer<NS, typename Map::namespace_type> &&
    Serializer<SS, typename Map::state_type>
        Result<std::unique_ptr<Map>> read_map_snapshot(std::span<const std::byte> bytes,
                                                       MapOptions options = {});

// ---------------------------------------------------------------------------------------
// Implementation

template <class Map, class KS, class NS, class SS>
requires Serializer<KS, typename Map::key_type> && Serializer<NS, typename Map::namespace_type> &&
    Serializer<SS, typename Map::state_type>
    MapSnapshotWriter<Map, KS, NS, SS>::MapSnapshotWriter(const Snapshot& snapshot)
    : snapshot_(&snapshot) {
  COWSTATE_ASSERT(snapshot.valid(), "I10", "writing a released or empty snapshot handle");
  const std::size_t n = snapshot.size();
  if constexpr (kFixedEntrySize > 0) {
    out_.reserve(kMapSnapshotHeaderSize + n * kFixedEntrySize + kMapSnapshotTrailerSize);
  } else {
    constexpr std::size_t kMin =
        serializer_min_size<KS>() + serializer_min_size<NS>() + serializer_min_size<SS>();
    out_.reserve(kMapSnapshotHeaderSize + n * kMin + kMapSnapshotTrailerSize);
  }
  out_.put_bytes(kMapSnapshotMagic);
  out_.put_u16(kMapSnapshotFormatVersion);
  out_.put_u16(KS::id);
  out_.put_u16(NS::id);
  out_.put_u16(SS::id);
  out_.put_u64(n);
  out_.trim();
  COWSTATE_ASSERT(out_.size() == kMapSnapshotHeaderSize, "S1", "header size");
  scan_ = snapshot.scan();
}

// Long because both encodings (fixed-size records stored in chunks, others appended one by
// one) share the scan held in a local and the visit lambda; a function per encoding would
// hand the scan and the counters back and forth on the hot path.
template <class Map, class KS, class NS, class SS>
requires Serializer<KS, typename Map::key_type> && Serializer<NS, typename Map::namespace_type> &&
    Serializer<SS, typename Map::state_type>
template <class F>
bool MapSnapshotWriter<Map, KS, NS, SS>::step(std::size_t max_entries, F&& on_entry) {
  if (done_) return true;
  COWSTATE_ASSERT(snapshot_->valid(), "I10", "snapshot released while its writer is writing");
  // A local (moved) scan: stores through std::byte* may alias any member, a local whose
  // address never escapes cannot be aliased, so its position stays in registers.
  typename Snapshot::Scan c = std::move(scan_);
  std::size_t visited = 0;
  std::size_t written = 0;
  // One entry: appended by `put` unless a planted bug drops it.
  auto visit = [&](auto&& put) {
    const auto e = c.get();
    bool drop = false;
#if defined(COWSTATE_MUTANTS) && COWSTATE_MUTANTS
    // Planted bug: the last entry of a chain of two or more silently goes missing.
    drop = COWSTATE_MUTANT(writer_drops_chain_tail) && c.at_chain_end() && !c.at_chain_head();
#endif
    if (!drop) {
      put(e);
      ++written;
      on_entry(e.key, e.ns, e.state);
    }
    c.next();
    // In simulator builds the writer may run here, between two entries of one step.
    if (visited + 1 < max_entries && !c.done()) COWSTATE_YIELD("snapshot_writer.entry");
  };
  if constexpr (kDirect) {
    // Chunks of fixed-size records stored straight into the buffer (one bounds check per
    // chunk) and hashed while they are still in the L1/L2 cache.
    // Room only for the entries the snapshot still holds: the buffer was reserved for
    // exactly the file, and a whole chunk more at the end would reallocate (and copy) it.
    // At least one entry, so a scan that ran past size() still ends (and S2 fires).
    const std::size_t left = snapshot_->size() - std::min(visited_, snapshot_->size());
    while (visited < max_entries && !c.done()) {
      const std::size_t chunk = std::max<std::size_t>(
          1, std::min({kChunkEntries, max_entries - visited, left - std::min(left, visited)}));
      const std::size_t stop = visited + chunk;
      std::byte* p = out_.begin_direct((stop - visited) * kFixedEntrySize);
      for (; visited < stop && !c.done(); ++visited) {
        visit([&p](const auto& e) {
          p = KS::store(p, e.key);
          p = NS::store(p, e.ns);
          p = SS::store(p, e.state);
        });
      }
      out_.commit(p);
      checksum_.update(out_.written().subspan(hashed_));
      hashed_ = out_.size();
    }
  } else {
    if constexpr (kFixedEntrySize > 0) {
      // One growth for the whole step; every append below is then an unchecked store.
      const std::size_t left = snapshot_->size() - std::min(visited_, snapshot_->size());
      const std::size_t budget = std::min(max_entries, left);
      out_.ensure(budget * kFixedEntrySize + (budget == left ? kMapSnapshotTrailerSize : 0));
    }
    for (; visited < max_entries && !c.done(); ++visited) {
      visit([this](const auto& e) {
        KS::write(out_, e.key);
        NS::write(out_, e.ns);
        SS::write(out_, e.state);
      });
    }
  }
  const bool finished = c.done();
  scan_ = std::move(c);
  visited_ += visited;
  written_ += written;
  if constexpr (kFixedEntrySize > 0) {
    COWSTATE_ASSERT(out_.size() == kMapSnapshotHeaderSize + written_ * kFixedEntrySize, "S1",
                    "fixed-width entries do not add up to the bytes written");
  }
  if (finished) {
    finish();
  } else {
    checksum_.update(out_.written().subspan(hashed_));
    hashed_ = out_.size();
  }
  out_.trim();
  return done_;
}

template <class Map, class KS, class NS, class SS>
requires Serializer<KS, typename Map::key_type> && Serializer<NS, typename Map::namespace_type> &&
    Serializer<SS, typename Map::state_type>
void MapSnapshotWriter<Map, KS, NS, SS>::finish() {
  COWSTATE_ASSERT(visited_ == snapshot_->size(), "S2",
                  "the snapshot cursor visited a different number of entries than size()");
  COWSTATE_ASSERT(written_ <= visited_, "S3", "more entries written than visited");
  out_.put_u64(written_);
  checksum_.update(out_.written().subspan(hashed_));
  hashed_ = out_.size();
  out_.put_u64(checksum_.digest());
  done_ = true;
}

template <class Map, class KS, class NS, class SS>
requires Serializer<KS, typename Map::key_type> && Serializer<NS, typename Map::namespace_type> &&
    Serializer<SS, typename Map::state_type>
        Result<std::unique_ptr<Map>> read_map_snapshot(std::span<const std::byte> bytes,
                                                       MapOptions options) {
  using K = typename Map::key_type;
  using N = typename Map::namespace_type;
  using S = typename Map::state_type;
  constexpr std::size_t kMinEntrySize =
      serializer_min_size<KS>() + serializer_min_size<NS>() + serializer_min_size<SS>();

  std::uint64_t count = 0;
  if (Status st =
          detail::check_map_snapshot_frame(bytes, {KS::id, NS::id, SS::id}, kMinEntrySize, count);
      !st.ok()) {
    return st;
  }
  COWSTATE_ASSERT(bytes.size() >= kMapSnapshotHeaderSize + kMapSnapshotTrailerSize, "REQUIRES",
                  "frame check passed a file without header and trailer");

  auto map = std::make_unique<Map>(options);
  ByteReader r(bytes);
  r.set_limit(bytes.size() - kMapSnapshotTrailerSize);
  K key{};
  N ns{};
  S state{};
  const auto read_entry = [&r, &key, &ns, &state]() -> Status {
    state = S{};
    return read_record<KS, NS, SS>(r, key, ns, state);
  };
  {
    // Without a least entry size the frame check cannot bound the count by the bytes; the
    // bytes still bound how many entries can follow, unless they are empty ones.
    typename Map::Loader loader =
        map->load(kMinEntrySize > 0 ? count : std::min<std::uint64_t>(count, bytes.size()));
    r.seek(kMapSnapshotHeaderSize);
    for (std::uint64_t i = 0; i < count; ++i) {
      if (Status st = read_entry(); !st.ok()) return detail::map_snapshot_entry_error(st, i, count);
      if (COWSTATE_MUTANT(reader_drops_last_entry) && i + 1 == count) continue;
      loader.add(key, ns, std::move(state));
    }
    if (!r.at_end()) {
      return detail::map_snapshot_trailing_error(r.offset(), r.remaining(), count);
    }
    if (const std::optional<std::size_t> dup = loader.finish()) {
      // Read again up to the duplicate, for its offset: every entry before it read well.
      r.seek(kMapSnapshotHeaderSize);
      for (std::size_t i = 0; i < *dup; ++i) (void)read_entry();
      return detail::map_snapshot_duplicate_error(r.offset(), *dup, count);
    }
  }
  COWSTATE_ASSERT(map->size() == count || COWSTATE_MUTANT(reader_drops_last_entry), "S3",
                  "restored map size differs from the entry count");
  return Result<std::unique_ptr<Map>>(std::move(map));
}

}  // namespace cowstate
