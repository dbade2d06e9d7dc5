// The simulator's pseudo-random numbers: project-owned, so a seed means the same run on
// every build, compiler and standard library. No std:: distributions anywhere in sim/.
//
// SplitMix64 expands seeds (and derives one independent stream per task); Xoshiro256**
// produces the streams. Both are pinned by golden-value tests (tests/sim_random_test.cc).
#pragma once

#include <cstddef>
#include <cstdint>

namespace cowstate::sim {

__extension__ typedef unsigned __int128 Uint128;

// Steele, Lea, Flood: SplitMix64. One 64-bit word of state.
class SplitMix64 {
 public:
  explicit constexpr SplitMix64(std::uint64_t seed) noexcept : state_(seed) {}
  constexpr std::uint64_t next() noexcept {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

 private:
  std::uint64_t state_;
};

// A seed for stream `stream` of run seed `seed`: independent streams per task, so one
// task's choices never depend on how others were interleaved.
constexpr std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t stream) noexcept {
  SplitMix64 sm(seed ^ (stream * 0xd1b54a32d192ed03ULL));
  sm.next();
  return sm.next();
}

// Blackman, Vigna: xoshiro256**.
class Prng {
 public:
  explicit constexpr Prng(std::uint64_t seed) noexcept {
    SplitMix64 sm(seed);
    for (auto& w : s_) w = sm.next();
  }

  constexpr std::uint64_t next() noexcept {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // The generator's state, for state digests.
  constexpr const std::uint64_t* state() const noexcept { return s_; }

  // Uniform in [0, n); n > 0. Lemire's multiply-shift with rejection: unbiased and the
  // same on every platform.
  constexpr std::uint64_t below(std::uint64_t n) noexcept {
    Uint128 m = static_cast<Uint128>(next()) * n;
    auto low = static_cast<std::uint64_t>(m);
    if (low < n) {
      const std::uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        m = static_cast<Uint128>(next()) * n;
        low = static_cast<std::uint64_t>(m);
      }
    }
    return static_cast<std::uint64_t>(m >> 64);
  }

  // Uniform in [lo, hi].
  constexpr std::uint64_t between(std::uint64_t lo, std::uint64_t hi) noexcept {
    return lo + below(hi - lo + 1);
  }

  // True with probability numerator / denominator.
  constexpr bool chance(std::uint64_t numerator, std::uint64_t denominator) noexcept {
    return below(denominator) < numerator;
  }

 private:
  static constexpr std::uint64_t rotl(std::uint64_t x, int k) noexcept {
    return (x << k) | (x >> (64 - k));
  }
  std::uint64_t s_[4] = {};
};

// The index that `x` selects when each index covers as many values as its weight, in order.
// REQUIRES: x < the sum of the weights.
template <class Weights>
std::size_t weighted_index(const Weights& weights, std::uint64_t x) noexcept {
  std::size_t i = 0;
  for (auto w : weights) {
    if (x < w) return i;
    x -= w;
    ++i;
  }
  return i - 1;
}

// Index chosen with probability proportional to its weight; REQUIRES a positive total.
template <class Weights>
std::size_t pick_weighted(Prng& rng, const Weights& weights) {
  std::uint64_t total = 0;
  for (auto w : weights) total += w;
  return weighted_index(weights, rng.below(total));
}

}  // namespace cowstate::sim
