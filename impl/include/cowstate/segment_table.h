// SegmentTable<T>: an array of T held in segments of 2^shift elements behind a directory
// of segment pointers, so that a snapshot keeps the whole array by copying the directory
// (a few KiB at most) instead of the array. The map uses two: its bucket heads
// (T = u32, one table per rehash side) and its live-slot bitmap (T = u64, a bit per pool
// slot that holds a live entry). A table whose segment size never changes (the bitmap)
// names it as the second template argument, so that finding an element's segment and
// offset takes constant shifts and masks instead of loads of the table's own.
//
// Layout
// ------
// dir_[s] points at segment s, 2^shift elements on a cache line; births_[s] is the map
// version at which segment s was made. Only the directory is shared with snapshots
// (View); the births stay with the writer. Element i is dir_[i >> shift][i & mask]: one
// load more than a flat array, from a directory small enough to stay cached.
//
// Copy-on-write
// -------------
// A snapshot at version v shares every segment born before v (births_[s] < v). So the
// writer writes into segment s in place only when births_[s] >= H (writable_or_null);
// otherwise its owner copies it first (copy_segment: the copy is born at the map version
// and replaces the original in the directory, which the owner retires with the birth/
// retirement rule entries use). A View is never written, so readers need no locks.
//
// Thread safety: one writer calls every non-const member; a View is read on any thread.
//
// Invariants
// ----------
//  G1  Every directory slot points at its own segment (no segment twice, none null).
//  G2  births_[s] <= the owner's map version; a copy is born at the map version.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <utility>
#include <vector>

#include "cowstate/assert.h"
#include "cowstate/chunk_memory.h"

namespace cowstate {

// SegmentTable's second argument for a table that chooses its segment size in assign_zero.
inline constexpr unsigned kShiftChosenAtAssign = ~0u;

template <class T, unsigned kFixedShift = kShiftChosenAtAssign>
class SegmentTable {
  static_assert(std::is_trivially_copyable_v<T>, "segments are copied bytewise");
  static_assert(kFixedShift == kShiftChosenAtAssign || kFixedShift < 32,
                "a fixed segment shift of 32 or more");
  static constexpr bool kShiftFixed = kFixedShift != kShiftChosenAtAssign;

 public:
  using value_type = T;
  // A snapshot's read-only copy of the directory.
  struct View {
    std::vector<const T*> dir;
    unsigned shift = 0;
    std::size_t length = 0;
    T operator[](std::size_t i) const noexcept {
      return dir[i >> shift][i & ((std::size_t{1} << shift) - 1)];
    }
    std::size_t size() const noexcept { return length; }
    bool empty() const noexcept { return length == 0; }
  };

  SegmentTable() = default;
  SegmentTable(const SegmentTable&) = delete;
  SegmentTable& operator=(const SegmentTable&) = delete;
  // Frees the segments the table still holds (none a live snapshot shares: the owner
  // retires those before it drops a table).
  ~SegmentTable() {
    clear([](T* segment, std::uint32_t) { free_segment(segment); });
  }
  void swap(SegmentTable& o) noexcept {
    dir_.swap(o.dir_);
    births_.swap(o.births_);
    std::swap(shift_, o.shift_);
    std::swap(mask_, o.mask_);
    std::swap(length_, o.length_);
  }

  // Makes the table `length` zeroed elements in segments of 2^shift, born at `version`.
  // REQUIRES: the table is empty (clear() first); 2^shift divides length or exceeds it;
  // shift is the table's fixed shift if it has one.
  void assign_zero(std::size_t length, unsigned shift, std::uint32_t version) {
    COWSTATE_ASSERT(dir_.empty(), "REQUIRES", "assign_zero on a table that holds segments");
    COWSTATE_ASSERT(!kShiftFixed || shift == kFixedShift, "REQUIRES",
                    "assign_zero with a shift other than the table's fixed one");
    shift_ = shift;
    mask_ = (std::size_t{1} << shift) - 1;
    length_ = 0;
    append_zero((length + mask_) >> shift, version);
    length_ = length;
    COWSTATE_ASSERT(length_ <= dir_.size() << shift_, "G1", "a table longer than its segments");
  }
  // Appends `segments` zeroed segments born at `version`; the length grows to cover them.
  void append_zero(std::size_t segments, std::uint32_t version) {
    const std::size_t bytes = segment_bytes();
    for (std::size_t k = 0; k < segments; ++k) {
      T* s = detail::allocate_chunk<T>(std::size_t{1} << shift());
      std::memset(static_cast<void*>(s), 0, bytes);
      dir_.push_back(s);
      births_.push_back(version);
    }
    length_ = dir_.size() << shift();
  }
  // Hands every segment with its birth to dispose(segment, birth) and leaves the table empty.
  template <class F>
  void clear(F&& dispose) {
    for (std::size_t s = 0; s < dir_.size(); ++s) dispose(const_cast<T*>(dir_[s]), births_[s]);
    dir_.clear();
    births_.clear();
    length_ = 0;
  }

  std::size_t size() const noexcept { return length_; }
  bool empty() const noexcept { return length_ == 0; }
  unsigned shift() const noexcept {
    if constexpr (kShiftFixed) {
      return kFixedShift;
    } else {
      return shift_;
    }
  }
  // Element i sits at offset i & mask() of segment i >> shift().
  std::size_t mask() const noexcept {
    if constexpr (kShiftFixed) {
      return (std::size_t{1} << kFixedShift) - 1;
    } else {
      return mask_;
    }
  }
  std::size_t segments() const noexcept { return dir_.size(); }
  std::size_t segment_bytes() const noexcept { return sizeof(T) << shift(); }
  // Bytes of the segments and the writer's directory.
  std::size_t bytes() const noexcept {
    return dir_.size() * segment_bytes() + dir_.capacity() * sizeof(T*) +
           births_.capacity() * sizeof(std::uint32_t);
  }
  std::uint32_t birth(std::size_t s) const noexcept { return births_[s]; }
  const T* segment(std::size_t s) const noexcept { return dir_[s]; }

  T operator[](std::size_t i) const noexcept { return dir_[i >> shift()][i & mask()]; }
  const T* address(std::size_t i) const noexcept { return &dir_[i >> shift()][i & mask()]; }
  // Element i for writing when its segment is the writer's alone (born at or after h), else
  // nullptr: then the owner copies the segment first.
  [[gnu::always_inline]] T* writable_or_null(std::size_t i, std::uint32_t h) noexcept {
    const std::size_t s = i >> shift();
    if (births_[s] < h) [[unlikely]]
      return nullptr;
    return const_cast<T*>(dir_[s]) + (i & mask());
  }
  // Element i for writing whatever its segment's birth: the owner decided (or a planted
  // bug decides) that no snapshot shares it.
  T* address_for_write(std::size_t i) noexcept {
    return const_cast<T*>(dir_[i >> shift()]) + (i & mask());
  }
  // Replaces segment s by a copy born at `version` and returns the original with its
  // birth, for the owner to retire.
  std::pair<T*, std::uint32_t> copy_segment(std::size_t s, std::uint32_t version) {
    COWSTATE_ASSERT(s < dir_.size(), "G1", "copying a segment past the directory");
    COWSTATE_ASSERT(births_[s] <= version, "G2", "a segment born after the map version");
    T* copy = detail::allocate_chunk<T>(std::size_t{1} << shift());
    std::memcpy(static_cast<void*>(copy), dir_[s], segment_bytes());
    T* original = const_cast<T*>(dir_[s]);
    const std::uint32_t birth = births_[s];
    dir_[s] = copy;
    births_[s] = version;
    return {original, birth};
  }
  View view() const { return View{dir_, shift(), length_}; }

  static void free_segment(T* segment) noexcept { detail::free_chunk(segment); }

 private:
  std::vector<const T*> dir_;
  std::vector<std::uint32_t> births_;
  unsigned shift_ = 0;
  std::size_t mask_ = 0;
  std::size_t length_ = 0;
};

}  // namespace cowstate
