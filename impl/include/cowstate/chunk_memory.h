// Chunk memory for the map's pools (EntryPool, BoxPool): raw storage for `count` objects of
// T that starts on a cache line, so a slot whose size divides 64 never straddles two lines.
// (operator new with T's own alignment gave malloc's 16 bytes, and every other 32-byte
// entry then crossed a line boundary: a lookup read the key from one line and the state
// from the next.) One place allocates and frees, so the two alignments cannot differ.
#pragma once

#include <algorithm>
#include <cstddef>
#include <new>

namespace cowstate::detail {

inline constexpr std::size_t kCacheLineBytes = 64;

template <class T>
inline constexpr std::align_val_t kChunkAlignment{std::max(alignof(T), kCacheLineBytes)};

template <class T>
T* allocate_chunk(std::size_t count) {
  return static_cast<T*>(::operator new(count * sizeof(T), kChunkAlignment<T>));
}

template <class T>
void free_chunk(T* chunk) noexcept {
  ::operator delete(chunk, kChunkAlignment<T>);
}

}  // namespace cowstate::detail
