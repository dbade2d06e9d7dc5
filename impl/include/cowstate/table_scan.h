// A scan over a CowStateMap's bucket heads, apart from the map so it can be read and tested
// on its own: the first non-empty bucket from a position (the incremental visitor's walk
// over the heads of one segment).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "cowstate/assert.h"

namespace cowstate::detail {

// The first b in [from, stop) with heads[b] != 0, or stop: a bucket at a time.
inline std::size_t next_nonempty_bucket_scalar(const std::uint32_t* heads, std::size_t from,
                                               std::size_t stop) noexcept {
  std::size_t b = from;
  while (b < stop && heads[b] == 0) ++b;
  return b;
}

// The same, eight buckets per branch where SSE2 is there (the incremental visitor's scan):
// in a table half full, whether a bucket is empty is a coin toss, and a branch per bucket
// is mispredicted about every other time.
inline std::size_t next_nonempty_bucket(const std::uint32_t* heads, std::size_t from,
                                        std::size_t stop) noexcept {
  std::size_t b = from;
#if defined(__SSE2__)
  const __m128i zero = _mm_setzero_si128();
  for (; stop - b >= 8; b += 8) {
    const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(heads + b));
    const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(heads + b + 4));
    const int empty = _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(lo, zero))) |
                      (_mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(hi, zero))) << 4);
    const unsigned mask = ~static_cast<unsigned>(empty) & 0xffu;
    if (mask != 0) return b + static_cast<std::size_t>(std::countr_zero(mask));
  }
#endif
  return next_nonempty_bucket_scalar(heads, b, stop);
}
}  // namespace cowstate::detail
