// Key groups: Flink's hash, ranges and operator assignment (cowstate/key_groups.h).
#include "cowstate/key_groups.h"

#include <catch2/catch.hpp>
#include <climits>
#include <cstdint>
#include <string>
#include <vector>

using cowstate::KeyGroupRange;

TEST_CASE("murmur_hash is Flink's MathUtils.murmurHash, pinned for fixed inputs", "[keygroups]") {
  // Golden values of the published algorithm (one Murmur3 round + fmix32, made
  // non-negative), computed independently; key groups at max parallelism 128.
  CHECK(cowstate::murmur_hash(2) == 1085422463);
  const std::vector<std::int32_t> groups = {94, 86, 127, 113, 7, 126, 18, 113, 15, 51};
  for (std::int32_t k = 0; k < 10; ++k) {
    CHECK(cowstate::key_group_for_hash(k, 128) == groups[static_cast<std::size_t>(k)]);
  }
  for (std::int32_t k = -1000; k < 1000; ++k) {
    CHECK(cowstate::murmur_hash(k * 7919) >= 0);
  }
}

TEST_CASE("the key-group assigner gives key_group_for_hash for every max parallelism",
          "[keygroups]") {
  // The edges of the dividend (murmur_hash of these hashes covers 0 and values near 2^31)
  // and a fixed pseudo-random spread, at every max parallelism in [1, 32768].
  std::vector<std::int32_t> hashes = {0, 1, -1, 2, 0x7fffffff, INT32_MIN, 12345, -98765};
  std::uint64_t x = 0x9e3779b97f4a7c15ULL;
  for (int i = 0; i < 56; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    hashes.push_back(static_cast<std::int32_t>(static_cast<std::uint32_t>(x)));
  }
  std::uint64_t mismatches = 0;
  for (std::int32_t m = 1; m <= cowstate::kUpperBoundMaxParallelism; ++m) {
    const cowstate::KeyGroupAssigner assign(m);
    for (const std::int32_t h : hashes) {
      if (assign(h) != cowstate::key_group_for_hash(h, m)) ++mismatches;
    }
  }
  CHECK(mismatches == 0);
  const cowstate::KeyGroupAssigner by128(128);
  CHECK(by128.max_parallelism() == 128);
  for (std::int32_t k = 0; k < 10; ++k) CHECK(by128(k) == cowstate::key_group_for_hash(k, 128));
}

TEST_CASE("key hashes follow Java's hashCode for integers and ASCII strings", "[keygroups]") {
  CHECK(cowstate::KeyHash<std::int32_t>{}(-5) == -5);
  CHECK(cowstate::KeyHash<std::int64_t>{}(std::int64_t{1} << 32) == 1);  // Long.hashCode
  CHECK(cowstate::KeyHash<std::uint64_t>{}(0xffffffff00000000ULL) == -1);
  CHECK(cowstate::KeyHash<std::string>{}("a") == 97);
  CHECK(cowstate::KeyHash<std::string>{}("flink") == 97520992);  // "flink".hashCode()
}

TEST_CASE("the key-group ranges of three instances of 128 are Flink's", "[keygroups]") {
  CHECK(cowstate::key_group_range_for_operator(128, 3, 0) == KeyGroupRange(0, 42));
  CHECK(cowstate::key_group_range_for_operator(128, 3, 1) == KeyGroupRange(43, 85));
  CHECK(cowstate::key_group_range_for_operator(128, 3, 2) == KeyGroupRange(86, 127));
  CHECK(cowstate::operator_index_for_key_group(128, 3, 42) == 0);
  CHECK(cowstate::operator_index_for_key_group(128, 3, 43) == 1);
  CHECK(cowstate::operator_index_for_key_group(128, 3, 127) == 2);
}

TEST_CASE(
    "for every parallelism the ranges partition 0 .. max parallelism - 1 and agree with "
    "the operator index",
    "[keygroups]") {
  for (std::int32_t max_par : {1, 2, 7, 128, 1000, 32768}) {
    for (std::int32_t par = 1; par <= max_par; par += (par < 16 ? 1 : max_par / 7 + 1)) {
      std::int32_t next = 0;
      for (std::int32_t op = 0; op < par; ++op) {
        const KeyGroupRange r = cowstate::key_group_range_for_operator(max_par, par, op);
        REQUIRE(r.start() == next);
        for (std::int32_t g : {r.start(), r.end()}) {
          if (!r.empty()) REQUIRE(cowstate::operator_index_for_key_group(max_par, par, g) == op);
        }
        next = r.empty() ? next : r.end() + 1;
      }
      REQUIRE(next == max_par);
    }
  }
}

TEST_CASE("an inclusive key-group range has size, containment, intersection and an empty form",
          "[keygroups]") {
  const KeyGroupRange a(10, 20);
  CHECK(a.size() == 11);
  CHECK(a.contains(10));
  CHECK(a.contains(20));
  CHECK_FALSE(a.contains(21));
  CHECK(a.intersection(KeyGroupRange(15, 30)) == KeyGroupRange(15, 20));
  CHECK(a.intersection(KeyGroupRange(21, 30)).empty());
  CHECK(KeyGroupRange().size() == 0);
  CHECK(KeyGroupRange(5, 4) == KeyGroupRange::empty_range());
  CHECK(a.contains(KeyGroupRange()));
  CHECK(a.contains(KeyGroupRange(12, 13)));
  CHECK(a.to_string() == "[10, 20]");
}

TEST_CASE("parallelism bounds are validated as operating errors", "[keygroups]") {
  CHECK(cowstate::validate_parallelism(128, 3).ok());
  CHECK(cowstate::validate_parallelism(32768, 32768).ok());
  const auto too_big = cowstate::validate_parallelism(32769, 1);
  REQUIRE_FALSE(too_big.ok());
  CHECK(too_big.message() == "expected a max parallelism in [1, 32768], found 32769");
  CHECK_FALSE(cowstate::validate_parallelism(128, 129).ok());
  CHECK_FALSE(cowstate::validate_parallelism(0, 1).ok());
}
