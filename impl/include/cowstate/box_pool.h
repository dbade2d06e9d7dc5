// BoxPool<T>: storage for a map's boxed states (CowStateMap keeps states that are not small
// and trivially copyable apart from the entry, so that entry copies share them).
//
// Boxes are carved from chunks that never move, handed out in address order from the
// newest chunk, and a freed box goes on an intrusive LIFO free list that is used first.
// Chunk k holds 64 << k boxes up to kMaxChunkBoxes, so a small map wastes little and a
// large one allocates in large steps. Against one heap allocation per box this saves the
// allocator's header and its per-call work, and boxes allocated together (a restore, a
// fill) lie together, which a snapshot scan over them reads faster.
//
// Like EntryPool, the pool does not construct: allocate() hands out raw storage for the
// caller to placement-new into, deallocate() takes back storage whose object the caller
// destroyed. Under AddressSanitizer a free box is poisoned, so a read through a stale
// pointer is reported as it would be for `delete`.
//
// Thread safety: allocate/deallocate on the writer thread only; any thread may read a box
// it knows to hold a constructed object that is not concurrently deallocated.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

#include "cowstate/chunk_memory.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define COWSTATE_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define COWSTATE_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define COWSTATE_POISON(p, n) ((void)(p), (void)(n))
#define COWSTATE_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace cowstate {

template <class T>
class BoxPool {
 public:
  static constexpr std::size_t kFirstChunkBoxes = 64;
  static constexpr std::size_t kMaxChunkBoxes = std::size_t{1} << 16;

  BoxPool() = default;
  BoxPool(const BoxPool&) = delete;
  BoxPool& operator=(const BoxPool&) = delete;
  ~BoxPool() {
    for (const Chunk& c : chunks_) {
      COWSTATE_UNPOISON(c.slots, c.count * sizeof(Slot));
      detail::free_chunk(c.slots);
    }
  }

  // Raw storage for one T; the caller constructs it in place.
  T* allocate() {
    Slot* s = free_;
    if (s != nullptr) {
      COWSTATE_UNPOISON(s, sizeof(Slot));
      free_ = s->next;
    } else {
      if (next_ == end_) [[unlikely]]
        grow();
      s = next_++;
      COWSTATE_UNPOISON(s, sizeof(Slot));
    }
    return reinterpret_cast<T*>(s->storage);
  }

  // Takes back the storage of a box whose object the caller destroyed.
  void deallocate(T* p) noexcept {
    Slot* s = reinterpret_cast<Slot*>(p);
    s->next = free_;
    free_ = s;
    COWSTATE_POISON(s, sizeof(Slot));
  }

  // bytes_reserved(), recounted by walking the chunks (a deep check of the counter).
  std::size_t bytes_recounted() const noexcept {
    std::size_t bytes = chunks_.capacity() * sizeof(Chunk);
    for (const Chunk& c : chunks_) bytes += c.count * sizeof(Slot);
    return bytes;
  }
  // Bytes of chunk storage and chunk bookkeeping. O(1).
  std::size_t bytes_reserved() const noexcept {
    return slot_bytes_ + chunks_.capacity() * sizeof(Chunk);
  }

 private:
  union Slot {
    Slot* next;  // while free
    alignas(T) std::byte storage[sizeof(T)];
  };
  struct Chunk {
    Slot* slots;
    std::size_t count;
  };

  [[gnu::noinline]] void grow() {
    const std::size_t count =
        chunks_.empty() ? kFirstChunkBoxes : std::min(chunks_.back().count * 2, kMaxChunkBoxes);
    chunks_.reserve(chunks_.size() + 1);                // no leak if push_back would throw
    Slot* slots = detail::allocate_chunk<Slot>(count);  // on a cache line
    chunks_.push_back(Chunk{slots, count});
    slot_bytes_ += count * sizeof(Slot);
    COWSTATE_POISON(slots, count * sizeof(Slot));
    next_ = slots;
    end_ = slots + count;
  }

  std::vector<Chunk> chunks_;
  Slot* next_ = nullptr;  // the newest chunk's first box never handed out
  Slot* end_ = nullptr;
  Slot* free_ = nullptr;
  std::size_t slot_bytes_ = 0;  // bytes of the chunks' slots
};

}  // namespace cowstate

#undef COWSTATE_POISON
#undef COWSTATE_UNPOISON
