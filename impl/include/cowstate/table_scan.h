// Scans over a CowStateMap's tables, apart from the map so they can be read and tested on
// their own: the first non-empty bucket from a position (the incremental visitor's and the
// cursor's walk over the heads), and the bitmap of pool slots holding entries (the
// snapshot scan's, cowstate/cow_state_map_snapshot.h).
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
// Bit i set for each pool slot i in [1, limit] that is not listed in `vacant`: the slots
// holding entries, when `vacant` lists the free and retired ones (I12).
inline std::vector<std::uint64_t> occupied_slots(std::uint32_t limit,
                                                 const std::vector<std::uint32_t>& vacant) {
  const std::size_t words = std::size_t{limit} / 64 + 1;
  // Slots [1, limit]: slot 0 names no entry, bits above `limit` name slots born later.
  std::vector<std::uint64_t> bits(words, ~std::uint64_t{0});
  bits[0] &= ~std::uint64_t{1};
  if (limit % 64 != 63) bits[words - 1] &= (std::uint64_t{2} << (limit % 64)) - 1;
  for (const std::uint32_t slot : vacant) {
    COWSTATE_ASSERT(slot != 0 && slot <= limit, "I12", "a vacant slot outside the pool");
    bits[slot / 64] &= ~(std::uint64_t{1} << (slot % 64));
  }
  return bits;
}

}  // namespace cowstate::detail
