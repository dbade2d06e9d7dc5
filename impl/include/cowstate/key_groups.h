// Key groups, as in Apache Flink's KeyGroupRangeAssignment: the unit of state that moves
// between parallel instances when a job is rescaled.
//
// A key is mapped to a key group in [0, max_parallelism) by
//
//   key_group = murmur_hash(key_hash(key)) % max_parallelism
//
// where key_hash is a 32-bit hash of the key (KeyHash<K> below; Java's hashCode for the
// built-in types, so a key lands in the same key group as in Flink) and murmur_hash is
// Flink's MathUtils.murmurHash: one Murmur3 mixing round and the Murmur3 32-bit finalizer,
// made non-negative. A backend instance owns a contiguous, inclusive KeyGroupRange. With
// `parallelism` instances, instance i owns
//
//   start = ceil(i * max_parallelism / parallelism)
//         = (i * max_parallelism + parallelism - 1) / parallelism
//   end   = ((i + 1) * max_parallelism - 1) / parallelism
//
// and key group g belongs to instance g * parallelism / max_parallelism. These ranges
// partition [0, max_parallelism) for every parallelism in [1, max_parallelism], so a
// checkpoint taken at one parallelism can be restored at any other by handing each new
// instance the key groups of its range (scale out: a subset of one old range; scale in:
// the union of several).
//
// max_parallelism is fixed for the life of a job's state: it is stored in every checkpoint
// and a checkpoint restores only into a backend with the same value. Flink's bounds apply:
// 1 <= parallelism <= max_parallelism <= 32768 (kUpperBoundMaxParallelism); the default is
// 128. Arithmetic is done in 64 bits, so the formulas are exact up to the bound.
//
// Errors: a max parallelism or parallelism out of bounds given by a user (a config value) is
// an operating error (validate_parallelism returns a Status); passing one to the formulas
// below is a programmer error (assertion K1). A range is built only from valid numbers (K2).
//
// Thread safety: everything here is pure (constexpr where possible).
//
// Invariants (docs/invariants.md)
//  K1  1 <= parallelism <= max_parallelism <= 32768 wherever the formulas are used.
//  K2  A non-empty KeyGroupRange satisfies 0 <= start <= end < 32768; the empty range is
//      {0, -1}.
//  K3  key_group_for_hash(h, m) is in [0, m).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <string>
#include <type_traits>

#include "cowstate/assert.h"
#include "cowstate/hooks.h"
#include "cowstate/status.h"

namespace cowstate {

inline constexpr std::int32_t kDefaultMaxParallelism = 128;
inline constexpr std::int32_t kUpperBoundMaxParallelism = 1 << 15;

// An inclusive range [start, end] of key groups; empty when end < start.
class KeyGroupRange {
 public:
  constexpr KeyGroupRange() noexcept = default;  // empty
  // REQUIRES: 0 <= start <= end < kUpperBoundMaxParallelism, or end == start - 1 (empty).
  constexpr KeyGroupRange(std::int32_t start, std::int32_t end) : start_(start), end_(end) {
    COWSTATE_ASSERT(start >= 0 && end < kUpperBoundMaxParallelism, "K2",
                    "key group range outside [0, 32768)");
    COWSTATE_ASSERT(end >= start - 1, "K2", "key group range with end < start - 1");
    if (end_ < start_) {  // one spelling of empty
      start_ = 0;
      end_ = -1;
    }
  }
  static constexpr KeyGroupRange empty_range() noexcept { return KeyGroupRange(); }
  // [0, max_parallelism): everything, for a single instance.
  static constexpr KeyGroupRange all(std::int32_t max_parallelism) {
    return KeyGroupRange(0, max_parallelism - 1);
  }

  constexpr std::int32_t start() const noexcept { return start_; }
  constexpr std::int32_t end() const noexcept { return end_; }  // inclusive
  constexpr bool empty() const noexcept { return end_ < start_; }
  constexpr std::int32_t size() const noexcept { return empty() ? 0 : end_ - start_ + 1; }
  constexpr bool contains(std::int32_t key_group) const noexcept {
    return key_group >= start_ && key_group <= end_;
  }
  constexpr bool contains(const KeyGroupRange& o) const noexcept {
    return o.empty() || (o.start_ >= start_ && o.end_ <= end_);
  }
  // The key groups in both; empty when they do not overlap.
  constexpr KeyGroupRange intersection(const KeyGroupRange& o) const noexcept {
    const std::int32_t s = std::max(start_, o.start_);
    const std::int32_t e = std::min(end_, o.end_);
    return e < s ? KeyGroupRange() : KeyGroupRange(s, e);
  }
  friend constexpr bool operator==(const KeyGroupRange&, const KeyGroupRange&) = default;

  // "[start, end]" or "[] (empty)".
  std::string to_string() const {
    if (empty()) return "[] (empty)";
    return "[" + std::to_string(start_) + ", " + std::to_string(end_) + "]";
  }

 private:
  std::int32_t start_ = 0;
  std::int32_t end_ = -1;
};

// Flink's MathUtils.murmurHash(int): a non-negative 32-bit mix of a 32-bit hash.
constexpr std::int32_t murmur_hash(std::int32_t code) noexcept {
  std::uint32_t h = static_cast<std::uint32_t>(code);
  h *= 0xcc9e2d51u;
  h = std::rotl(h, 15);
  h *= 0x1b873593u;
  h = std::rotl(h, 13);
  h = h * 5u + 0xe6546b64u;
  h ^= 4u;  // the length in bytes, as Murmur3 mixes it in
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  // Made non-negative as Flink does (-h for a negative h, and 0 for MIN_VALUE), without a
  // branch: the sign of a good hash is a coin toss, and a branch on it was mispredicted on
  // every other key switch. With `neg` all ones for a negative h, (h ^ neg) - neg is the
  // two's-complement -h; MIN_VALUE is its own negation, and the mask takes it to 0.
  const std::uint32_t neg = 0u - (h >> 31);
  return static_cast<std::int32_t>(((h ^ neg) - neg) & 0x7fffffffu);
}

// Operating-error check of a user-supplied (max) parallelism: K1 as a Status.
inline Status validate_parallelism(std::int32_t max_parallelism, std::int32_t parallelism) {
  if (max_parallelism < 1 || max_parallelism > kUpperBoundMaxParallelism) {
    return Status::error("expected a max parallelism in [1, " +
                         std::to_string(kUpperBoundMaxParallelism) + "], found " +
                         std::to_string(max_parallelism));
  }
  if (parallelism < 1 || parallelism > max_parallelism) {
    return Status::error("expected a parallelism in [1, max parallelism " +
                         std::to_string(max_parallelism) + "], found " +
                         std::to_string(parallelism));
  }
  return Status();
}

namespace detail {
// K1 as an assertion.
constexpr void check_parallelism(std::int32_t max_parallelism, std::int32_t parallelism) {
  COWSTATE_ASSERT(max_parallelism >= 1 && max_parallelism <= kUpperBoundMaxParallelism, "K1",
                  "max parallelism out of [1, 32768]");
  COWSTATE_ASSERT(parallelism >= 1 && parallelism <= max_parallelism, "K1",
                  "parallelism out of [1, max parallelism]");
}
}  // namespace detail

namespace detail {
// The non-negative hash a key group is the remainder of: murmur_hash of the key's hash.
constexpr std::int32_t key_group_hash(std::int32_t key_hash) noexcept {
  if (!std::is_constant_evaluated() && COWSTATE_MUTANT(key_group_wrong_hash)) {
    return key_hash & 0x7fffffff;  // planted bug: the raw hash, unmixed
  }
  return murmur_hash(key_hash);
}
}  // namespace detail

// The key group of a key whose 32-bit hash is `key_hash`.
// REQUIRES: 1 <= max_parallelism <= kUpperBoundMaxParallelism (K1).
constexpr std::int32_t key_group_for_hash(std::int32_t key_hash, std::int32_t max_parallelism) {
  COWSTATE_ASSERT(max_parallelism >= 1 && max_parallelism <= kUpperBoundMaxParallelism, "K1",
                  "max parallelism out of [1, 32768]");
  const std::int32_t g = detail::key_group_hash(key_hash) % max_parallelism;
  COWSTATE_ASSERT(g >= 0 && g < max_parallelism, "K3", "key group out of [0, max parallelism)");
  return g;
}

// key_group_for_hash at one fixed max parallelism, for code that assigns many keys (every
// key switch, every record of a restore): the remainder by the max parallelism is a
// multiplication by a precomputed 64-bit reciprocal and a high-half product (Lemire, Kaser
// and Kurz, "Faster remainder by direct computation", 2019), exact for every 32-bit
// dividend and divisor, instead of an integer division. Same result as key_group_for_hash
// for every hash (a test checks it over every max parallelism).
class KeyGroupAssigner {
 public:
  // REQUIRES: 1 <= max_parallelism <= kUpperBoundMaxParallelism (K1).
  constexpr explicit KeyGroupAssigner(std::int32_t max_parallelism)
      : divisor_(static_cast<std::uint32_t>(max_parallelism)),
        reciprocal_(~std::uint64_t{0} / static_cast<std::uint32_t>(max_parallelism) + 1) {
    COWSTATE_ASSERT(max_parallelism >= 1 && max_parallelism <= kUpperBoundMaxParallelism, "K1",
                    "max parallelism out of [1, 32768]");
  }

  constexpr std::int32_t operator()(std::int32_t key_hash) const noexcept {
    const auto mixed = static_cast<std::uint32_t>(detail::key_group_hash(key_hash));
    const std::uint64_t low = reciprocal_ * mixed;
    const auto g = static_cast<std::int32_t>((static_cast<U128>(low) * divisor_) >> 64);
    COWSTATE_DEBUG_ASSERT(g >= 0 && static_cast<std::uint32_t>(g) < divisor_, "K3",
                          "key group out of [0, max parallelism)");
    return g;
  }
  std::int32_t max_parallelism() const noexcept { return static_cast<std::int32_t>(divisor_); }

 private:
  __extension__ using U128 = unsigned __int128;
  std::uint32_t divisor_;
  std::uint64_t reciprocal_;  // ceil(2^64 / divisor); 0 (2^64 wrapped) for divisor 1
};

// The instance (operator index) that owns key group `key_group` at `parallelism`.
// REQUIRES: K1 and 0 <= key_group < max_parallelism.
constexpr std::int32_t operator_index_for_key_group(std::int32_t max_parallelism,
                                                    std::int32_t parallelism,
                                                    std::int32_t key_group) {
  detail::check_parallelism(max_parallelism, parallelism);
  COWSTATE_ASSERT(key_group >= 0 && key_group < max_parallelism, "K3",
                  "key group out of [0, max parallelism)");
  return static_cast<std::int32_t>(std::int64_t{key_group} * parallelism / max_parallelism);
}

// The key groups instance `operator_index` owns at `parallelism`.
// REQUIRES: K1 and 0 <= operator_index < parallelism.
constexpr KeyGroupRange key_group_range_for_operator(std::int32_t max_parallelism,
                                                     std::int32_t parallelism,
                                                     std::int32_t operator_index) {
  detail::check_parallelism(max_parallelism, parallelism);
  COWSTATE_ASSERT(operator_index >= 0 && operator_index < parallelism, "K1",
                  "operator index out of [0, parallelism)");
  const std::int64_t m = max_parallelism;
  const std::int64_t p = parallelism;
  const std::int64_t i = operator_index;
  const auto start = static_cast<std::int32_t>((i * m + p - 1) / p);
  const auto end = static_cast<std::int32_t>(((i + 1) * m - 1) / p);
  return KeyGroupRange(start, end);
}

// 32-bit key hash used for key groups. The built-in types hash as Java's hashCode does, so
// a key lands in the same key group as the equal Java key in Flink:
//   32-bit integers: the value; 64-bit integers: (int)(v ^ (v >>> 32));
//   std::string: s[0]*31^(n-1) + ... + s[n-1] over the bytes (unsigned), which equals Java's
//   String.hashCode for ASCII text.
// Specialize for other key types. The hash is part of the checkpoint contract: the reader
// refuses a key that does not hash to the key group it was stored under.
template <class K, class Enable = void>
struct KeyHash;

template <class K>
struct KeyHash<K, std::enable_if_t<std::is_integral_v<K> && (sizeof(K) <= 4)>> {
  constexpr std::int32_t operator()(K v) const noexcept { return static_cast<std::int32_t>(v); }
};

template <class K>
struct KeyHash<K, std::enable_if_t<std::is_integral_v<K> && sizeof(K) == 8>> {
  constexpr std::int32_t operator()(K v) const noexcept {
    const auto u = static_cast<std::uint64_t>(v);
    return static_cast<std::int32_t>(static_cast<std::uint32_t>(u ^ (u >> 32)));
  }
};

template <>
struct KeyHash<std::string> {
  std::int32_t operator()(const std::string& s) const noexcept {
    std::uint32_t h = 0;
    for (char c : s) h = 31u * h + static_cast<unsigned char>(c);
    return static_cast<std::int32_t>(h);
  }
};

}  // namespace cowstate
