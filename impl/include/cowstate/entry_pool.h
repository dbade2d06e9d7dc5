// EntryPool<T>: slab storage for map entries, named by 32-bit indices.
//
// Index 0 means "none". Slots live in chunks that never move: chunk k holds 64 << k
// slots, so a map of n entries wastes at most half a chunk and the chunk directory has a
// fixed size (26 pointers cover 2^32 - 64 slots). Chunk k starts at slot 64 * (2^k - 1) + 1,
// so slots 64w + 1 .. 64w + 63 always share a chunk and lie next to each other in memory
// (kRunSlots; a snapshot scan walks them without a lookup per slot). Because chunks never move, a
// snapshot reader on another thread may dereference any index it can reach while the writer
// allocates new chunks; only the writer allocates, constructs and destroys.
//
// The pool does not construct objects: allocate() hands out raw, suitably aligned
// storage for the caller to placement-new into; destroy() runs the destructor and puts the
// slot on the free list.
//
// Thread safety: allocate/destroy on the writer thread only; at() on any thread for a slot
// the caller knows to be constructed and not concurrently destroyed.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

#include "cowstate/assert.h"
#include "cowstate/chunk_memory.h"

namespace cowstate {

template <class T>
class EntryPool {
 public:
  static constexpr unsigned kFirstChunkLog2 = 6;
  static constexpr unsigned kMaxChunks = 32 - kFirstChunkLog2;
  // Every chunk starts at a slot 64m + 1: slots 64w + r, r in [1, 63], are contiguous.
  static constexpr std::uint32_t kRunSlots = 1u << kFirstChunkLog2;

  EntryPool() = default;
  EntryPool(const EntryPool&) = delete;
  EntryPool& operator=(const EntryPool&) = delete;
  ~EntryPool() {
    for (unsigned k = 0; k < kMaxChunks; ++k) {
      if (chunks_[k] != nullptr) {
        detail::free_chunk(chunks_[k]);
      }
    }
  }

  // REQUIRES: `i` names a slot handed out by allocate().
  T& at(std::uint32_t i) noexcept {
    // Slot i lives in chunk k = bit_width(j) - 7 with j = i + 63; base_[k] is the address
    // chunk k would have if its slots were numbered by j, so the slot is base_[k] + j.
    // `31 ^ clz` is the bit scan itself, and k as a size_t lets the compiler fold the
    // "- 6" into the load's displacement: 31 - clz - 6 in 32 bits cost two more
    // instructions on every lookup (GCC 12).
    const std::uint32_t j = i + (1u << kFirstChunkLog2) - 1;  // >= 64: clz is defined
    const std::size_t k =
        static_cast<std::size_t>(31 ^ __builtin_clz(j)) - std::size_t{kFirstChunkLog2};
    return *reinterpret_cast<T*>(base_[k] + std::uintptr_t{j} * sizeof(T));
  }
  const T& at(std::uint32_t i) const noexcept { return const_cast<EntryPool*>(this)->at(i); }

  // Raw storage for one T; the caller constructs it in place.
  std::uint32_t allocate() {
    if (has_free_slot()) return reuse_free_slot();
    return allocate_new();
  }
  bool has_free_slot() const noexcept { return !free_.empty(); }
  // Puts a never-used slot on the free list when it is empty (has_free_slot() after).
  void ensure_free_slot() {
    if (free_.empty()) free_.push_back(allocate_new());
  }
  // allocate() when has_free_slot(): the most recently freed slot (or, after
  // order_free_list(), the lowest).
  std::uint32_t reuse_free_slot() noexcept {
    COWSTATE_ASSERT(!free_.empty(), "REQUIRES", "reuse_free_slot with no free slot");
    const std::uint32_t i = free_.back();
    free_.pop_back();
    return i;
  }

  // Destroys the object in slot `i` and makes the slot reusable.
  void destroy(std::uint32_t i) noexcept {
    at(i).~T();
    free_.push_back(i);
  }

  // Reorders the free list so that allocate() hands out the free slots in ascending order:
  // after a snapshot's release frees the entries its copies replaced, in the random order
  // the writes came in, the next round of copies is then written to neighbouring slots
  // rather than one cache line apart each. O(free slots + slots allocated / 64).
  void order_free_list() {
    if (free_.size() < 2) return;
    std::vector<std::uint64_t> bits(std::size_t{next_} / 64 + 1, 0);
    for (const std::uint32_t i : free_) bits[i / 64] |= std::uint64_t{1} << (i % 64);
    std::size_t out = 0;
    for (std::size_t w = bits.size(); w-- > 0;) {  // descending: the back is the lowest slot
      for (std::uint64_t word = bits[w]; word != 0;) {
        const int top = 63 - std::countl_zero(word);
        free_[out++] = static_cast<std::uint32_t>(w * 64 + static_cast<std::size_t>(top));
        word &= ~(std::uint64_t{1} << top);
      }
    }
    COWSTATE_ASSERT(out == free_.size(), "I12", "a slot on the free list twice");
  }

  std::size_t slots_allocated() const noexcept { return next_ - 1; }
  std::size_t free_slots() const noexcept { return free_.size(); }
  const std::vector<std::uint32_t>& free_list() const noexcept { return free_; }
  // bytes_reserved(), recounted by walking the chunks (a deep check of the counter).
  std::size_t bytes_recounted() const noexcept {
    std::size_t bytes = free_.capacity() * sizeof(std::uint32_t);
    for (unsigned k = 0; k < kMaxChunks; ++k) {
      if (chunks_[k] != nullptr) bytes += (std::size_t{1} << (kFirstChunkLog2 + k)) * sizeof(T);
    }
    return bytes;
  }
  // Bytes of chunk storage plus the free list. O(1).
  std::size_t bytes_reserved() const noexcept {
    return chunk_bytes_ + free_.capacity() * sizeof(std::uint32_t);
  }

 private:
  // A slot never used before, in a new chunk when the last one is full.
  std::uint32_t allocate_new() {
    if (next_ < end_) [[likely]]
      return next_++;
    return allocate_in_new_chunk();
  }
  [[gnu::noinline]] std::uint32_t allocate_in_new_chunk() {
    COWSTATE_ASSERT(next_ < kMaxIndex, "I12", "entry pool exhausted (2^32 slots)");
    const std::uint32_t i = next_++;
    const std::uint32_t j = i + (1u << kFirstChunkLog2) - 1;
    const unsigned k = static_cast<unsigned>(std::bit_width(j)) - kFirstChunkLog2 - 1;
    const std::size_t slots = std::size_t{1} << (kFirstChunkLog2 + k);
    chunks_[k] = detail::allocate_chunk<T>(slots);  // on a cache line
    chunk_bytes_ += slots * sizeof(T);
    base_[k] = reinterpret_cast<std::uintptr_t>(chunks_[k]) - slots * sizeof(T);
    // Chunk k + 1 starts at slot 64 * (2^(k+1) - 1) + 1.
    end_ = static_cast<std::uint32_t>(std::min<std::uint64_t>(
        (std::uint64_t{1} << (kFirstChunkLog2 + k + 1)) - (1u << kFirstChunkLog2) + 1, kMaxIndex));
    return i;
  }

  static constexpr std::uint32_t kMaxIndex = 0xffffffffu - (1u << kFirstChunkLog2) + 1;
  T* chunks_[kMaxChunks] = {};
  std::uintptr_t base_[kMaxChunks] = {};  // chunks_[k] minus (64 << k) slots, as an integer
  std::uint32_t next_ = 1;
  std::uint32_t end_ = 1;        // the first slot past the newest chunk
  std::size_t chunk_bytes_ = 0;  // bytes of the chunks allocated
  std::vector<std::uint32_t> free_;
};

}  // namespace cowstate
