// Snapshot files: serializers, the byte reader/writer, MapSnapshotWriter and
// read_map_snapshot (round trips, copy-on-write while writing, malformed input).
#include "cowstate/snapshot_io.h"

#include <xxhash.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cowstate/bytes.h"
#include "cowstate/checksum.h"
#include "cowstate/cow_state_map.h"
#include "cowstate/cow_state_map_access.h"
#include "cowstate/hooks.h"
#include "cowstate/serializers.h"
#include "cowstate/status.h"

namespace {

using cowstate::ByteReader;
using cowstate::ByteWriter;
using cowstate::MapOptions;
using cowstate::Status;
using Bytes = std::vector<std::byte>;

// u64 key, i32 namespace, i64 state: the fixed-width fast path.
using IntMap = cowstate::CowStateMap<std::uint64_t, std::int32_t, std::int64_t>;
struct IntIo {
  using Map = IntMap;
  using KS = cowstate::UInt64Serializer;
  using NS = cowstate::Int32Serializer;
  using SS = cowstate::Int64Serializer;
};
// String key and state (boxed state), i32 namespace.
using StringMap = cowstate::CowStateMap<std::string, std::int32_t, std::string>;
struct StringIo {
  using Map = StringMap;
  using KS = cowstate::StringSerializer;
  using NS = cowstate::Int32Serializer;
  using SS = cowstate::StringSerializer;
};
// i64 key, string namespace, vector<int64> state.
using VectorMap = cowstate::CowStateMap<std::int64_t, std::string, std::vector<std::int64_t>>;
struct VectorIo {
  using Map = VectorMap;
  using KS = cowstate::Int64Serializer;
  using NS = cowstate::StringSerializer;
  using SS = cowstate::VectorInt64Serializer;
};

template <class Io>
using Writer = cowstate::MapSnapshotWriter<typename Io::Map, typename Io::KS, typename Io::NS,
                                           typename Io::SS>;

template <class Io>
Bytes write_all(const typename Io::Map::Snapshot& s) {
  return cowstate::write_map_snapshot<typename Io::Map, typename Io::KS, typename Io::NS,
                                      typename Io::SS>(s);
}

template <class Io>
cowstate::Result<std::unique_ptr<typename Io::Map>> read(std::span<const std::byte> bytes,
                                                         MapOptions options = {}) {
  return cowstate::read_map_snapshot<typename Io::Map, typename Io::KS, typename Io::NS,
                                     typename Io::SS>(bytes, options);
}

template <class Map>
using Image = std::map<std::pair<typename Map::key_type, typename Map::namespace_type>,
                       typename Map::state_type>;

template <class Map>
Image<Map> map_image(const Map& m) {
  Image<Map> out;
  m.for_each([&](const auto& k, const auto& n, const auto& s) { out.emplace(std::pair(k, n), s); });
  return out;
}

// Recomputes the trailing checksum so a hand-edited file passes the checksum check and
// reaches the deeper checks.
void reseal(Bytes& b) {
  REQUIRE(b.size() >= 8);
  const std::uint64_t c = cowstate::checksum64(std::span<const std::byte>(b).first(b.size() - 8));
  cowstate::detail::store_le(b.data() + b.size() - 8, c);
}

void put_u32_at(Bytes& b, std::size_t at, std::uint32_t v) {
  cowstate::detail::store_le(b.data() + at, v);
}
void put_u64_at(Bytes& b, std::size_t at, std::uint64_t v) {
  cowstate::detail::store_le(b.data() + at, v);
}

void fill_int_map(IntMap& m, std::uint64_t n) {
  for (std::uint64_t k = 0; k < n; ++k) {
    m.put(k * 7919, static_cast<std::int32_t>(k % 3) - 1, static_cast<std::int64_t>(k * k) - 500);
  }
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Status, ByteWriter, ByteReader

TEST_CASE("a Status is ok by default and carries a message when it is an error", "[io][status]") {
  const Status ok;
  CHECK(ok.ok());
  CHECK(ok.message().empty());
  CHECK(Status::success().ok());
  const Status err = Status::error("offset 3: expected x, found y");
  CHECK_FALSE(err.ok());
  CHECK(err.message() == "offset 3: expected x, found y");
  const Status copy = err;
  CHECK(copy.message() == err.message());

  cowstate::Result<int> value = 42;
  REQUIRE(value.ok());
  CHECK(*value == 42);
  CHECK(value.status().ok());
  cowstate::Result<int> failed = Status::error("bad");
  CHECK_FALSE(failed.ok());
  CHECK(failed.status().message() == "bad");
}

// checksum64 may run libxxhash's run-time dispatched (AVX2/AVX-512) XXH3; it must give
// exactly the values of the library's plain entry point, for short and long inputs (the
// vector paths only serve inputs over 240 bytes) and for any split of a stream.
TEST_CASE("checksum64 and its stream give XXH3-64's values for every length and split",
          "[io][checksum]") {
  CHECK(cowstate::checksum64({}) == 0x2d06800538d394c2ULL);  // XXH3-64 of nothing, seed 0
  Bytes data(300000);
  for (std::size_t i = 0; i < data.size(); ++i) {
    data[i] = static_cast<std::byte>((i * 131 + (i >> 9)) & 0xff);
  }
  for (const std::size_t n :
       {std::size_t{1}, std::size_t{3}, std::size_t{16}, std::size_t{129}, std::size_t{240},
        std::size_t{241}, std::size_t{1024}, std::size_t{125000}, data.size()}) {
    const auto part = std::span<const std::byte>(data).first(n);
    const std::uint64_t expected = XXH3_64bits(part.data(), part.size());
    CHECK(cowstate::checksum64(part) == expected);
    cowstate::Checksum64Stream stream;
    for (std::size_t at = 0; at < n; at += 997) {
      stream.update(part.subspan(at, std::min<std::size_t>(997, n - at)));
    }
    CHECK(stream.digest() == expected);
  }
}

TEST_CASE("the byte writer stores fixed-width integers little-endian", "[io][bytes]") {
  ByteWriter w;
  w.put_u8(0xab);
  w.put_u16(0x0102);
  w.put_u32(0x03040506u);
  w.put_u64(0x0708090a0b0c0d0eull);
  w.put_i32(-2);
  w.put_i64(-3);
  w.trim();
  const std::vector<unsigned> expected = {0xab, 0x02, 0x01, 0x06, 0x05, 0x04, 0x03, 0x0e, 0x0d,
                                          0x0c, 0x0b, 0x0a, 0x09, 0x08, 0x07, 0xfe, 0xff, 0xff,
                                          0xff, 0xfd, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  REQUIRE(w.vector().size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    CHECK(static_cast<unsigned>(w.vector()[i]) == expected[i]);
  }

  ByteReader r(w.vector());
  std::uint8_t a = 0;
  std::uint16_t b = 0;
  std::uint32_t c = 0;
  std::uint64_t d = 0;
  std::int32_t e = 0;
  std::int64_t f = 0;
  REQUIRE(r.read_u8(a, "u8").ok());
  REQUIRE(r.read_u16(b, "u16").ok());
  REQUIRE(r.read_u32(c, "u32").ok());
  REQUIRE(r.read_u64(d, "u64").ok());
  REQUIRE(r.read_i32(e, "i32").ok());
  REQUIRE(r.read_i64(f, "i64").ok());
  CHECK(a == 0xab);
  CHECK(b == 0x0102);
  CHECK(c == 0x03040506u);
  CHECK(d == 0x0708090a0b0c0d0eull);
  CHECK(e == -2);
  CHECK(f == -3);
  CHECK(r.at_end());
}

TEST_CASE("the byte writer grows across many appends and trims to what was written",
          "[io][bytes]") {
  ByteWriter w;
  for (std::uint32_t i = 0; i < 100000; ++i) w.put_u32(i);
  CHECK(w.size() == 400000);
  w.ensure(1000);
  CHECK(w.size() == 400000);
  w.trim();
  REQUIRE(w.vector().size() == 400000);
  ByteReader r(w.vector());
  for (std::uint32_t i = 0; i < 100000; ++i) {
    std::uint32_t v = 0;
    REQUIRE(r.read_u32(v, "u32").ok());
    REQUIRE(v == i);
  }
  const Bytes taken = w.take();
  CHECK(taken.size() == 400000);
  CHECK(w.size() == 0);
}

TEST_CASE(
    "a short read names the offset, the field, the bytes expected and found and consumes "
    "nothing",
    "[io][bytes]") {
  const Bytes three(3, std::byte{0});
  ByteReader r(three);
  std::uint8_t skip = 0;
  REQUIRE(r.read_u8(skip, "u8").ok());
  r.set_field("state");
  std::int64_t v = 0;
  const Status s = r.read_i64(v, "int64");
  REQUIRE_FALSE(s.ok());
  CHECK(s.message() == "offset 1: expected 8 bytes for int64 state, found 2");
  CHECK(r.offset() == 1);
}

TEST_CASE("a byte reader limit hides the bytes after it while offsets stay absolute",
          "[io][bytes]") {
  const Bytes ten(10, std::byte{1});
  ByteReader r(ten);
  r.seek(4);
  r.set_limit(6);
  CHECK(r.remaining() == 2);
  std::uint32_t v = 0;
  const Status s = r.read_u32(v, "u32");
  REQUIRE_FALSE(s.ok());
  CHECK(s.message() == "offset 4: expected 4 bytes for u32, found 2");
}

// ---------------------------------------------------------------------------------------
// Serializers

TEST_CASE("the int64 serializer round trips extreme values in eight little-endian bytes",
          "[io][serializer]") {
  using S = cowstate::Int64Serializer;
  for (std::int64_t v :
       {std::int64_t{0}, std::int64_t{-1}, std::numeric_limits<std::int64_t>::min(),
        std::numeric_limits<std::int64_t>::max(), std::int64_t{0x0102030405060708}}) {
    ByteWriter w;
    S::write(w, v);
    w.trim();
    REQUIRE(w.vector().size() == S::fixed_size);
    ByteReader r(w.vector());
    std::int64_t back = 7;
    REQUIRE(S::read(r, back).ok());
    CHECK(back == v);
    CHECK(r.at_end());
  }
  ByteWriter w;
  S::write(w, 0x0102030405060708);
  w.trim();
  CHECK(w.vector().front() == std::byte{0x08});
  CHECK(w.vector().back() == std::byte{0x01});
}

TEST_CASE("the uint64 and int32 serializers round trip extreme values and refuse short input",
          "[io][serializer]") {
  for (std::uint64_t v : {std::uint64_t{0}, std::numeric_limits<std::uint64_t>::max()}) {
    ByteWriter w;
    cowstate::UInt64Serializer::write(w, v);
    w.trim();
    REQUIRE(w.vector().size() == 8);
    ByteReader r(w.vector());
    std::uint64_t back = 1;
    REQUIRE(cowstate::UInt64Serializer::read(r, back).ok());
    CHECK(back == v);
  }
  for (std::int32_t v : {std::int32_t{0}, std::numeric_limits<std::int32_t>::min(),
                         std::numeric_limits<std::int32_t>::max(), std::int32_t{-1}}) {
    ByteWriter w;
    cowstate::Int32Serializer::write(w, v);
    w.trim();
    REQUIRE(w.vector().size() == 4);
    ByteReader r(w.vector());
    std::int32_t back = 1;
    REQUIRE(cowstate::Int32Serializer::read(r, back).ok());
    CHECK(back == v);
  }
  const Bytes short_input(3, std::byte{0});
  ByteReader r1(short_input);
  std::uint64_t u = 0;
  CHECK(cowstate::UInt64Serializer::read(r1, u).message() ==
        "offset 0: expected 8 bytes for uint64, found 3");
  ByteReader r2(std::span<const std::byte>(short_input).first(2));
  std::int32_t i = 0;
  CHECK(cowstate::Int32Serializer::read(r2, i).message() ==
        "offset 0: expected 4 bytes for int32, found 2");
}

TEST_CASE("the string serializer round trips empty, binary and long strings", "[io][serializer]") {
  using S = cowstate::StringSerializer;
  for (const std::string& v :
       {std::string(), std::string("a"), std::string("nul\0inside", 10), std::string(70000, 'x')}) {
    ByteWriter w;
    S::write(w, v);
    w.trim();
    REQUIRE(w.vector().size() == 4 + v.size());
    ByteReader r(w.vector());
    std::string back = "junk";
    REQUIRE(S::read(r, back).ok());
    CHECK(back == v);
    CHECK(r.at_end());
    // The layout: the length as a little-endian u32, then the bytes. The direct store (the
    // checkpoint writer's) fills exactly stored_size(v) bytes; the read fills a string whose
    // capacity is too small as well as one that has room.
    for (std::size_t i = 0; i < 4; ++i) {
      CHECK(std::to_integer<std::size_t>(w.vector()[i]) == ((v.size() >> (8 * i)) & 0xff));
    }
    CHECK(std::equal(v.begin(), v.end(), w.vector().begin() + 4,
                     [](char c, std::byte b) { return static_cast<std::byte>(c) == b; }));
    REQUIRE(S::stored_size(v) == w.vector().size());
    std::vector<std::byte> direct(S::stored_size(v) + 1, std::byte{0x5a});
    CHECK(S::store(direct.data(), v) == direct.data() + S::stored_size(v));
    CHECK(direct.back() == std::byte{0x5a});  // nothing past stored_size
    std::string roomy(100000, 'y');
    ByteReader r2(w.vector());
    REQUIRE(S::read(r2, roomy).ok());
    CHECK(roomy == v);
  }
}

TEST_CASE(
    "a string length larger than the remaining input is refused at its offset without "
    "allocating",
    "[io][serializer]") {
  using S = cowstate::StringSerializer;
  ByteWriter w;
  w.put_u8(0);  // so the length sits at offset 1
  w.put_u32(0xffffffffu);
  w.put_u8('a');
  w.trim();
  ByteReader r(w.vector());
  r.seek(1);
  r.set_field("key");
  std::string out;
  const Status s = S::read(r, out);
  REQUIRE_FALSE(s.ok());
  CHECK(s.message() ==
        "offset 1: expected length of string key of at most 1 (1 bytes remain), found 4294967295");
  CHECK(r.offset() == 1);
  CHECK(out.capacity() < 100);

  ByteReader two(std::span<const std::byte>(w.vector()).first(3));
  two.seek(1);
  CHECK(S::read(two, out).message() == "offset 1: expected 4 bytes for length of string, found 2");
}

TEST_CASE("the vector<int64> serializer round trips empty and long vectors", "[io][serializer]") {
  using S = cowstate::VectorInt64Serializer;
  for (const std::vector<std::int64_t>& v :
       {std::vector<std::int64_t>{}, std::vector<std::int64_t>{-1},
        std::vector<std::int64_t>{std::numeric_limits<std::int64_t>::min(), 0,
                                  std::numeric_limits<std::int64_t>::max()},
        std::vector<std::int64_t>(5000, 42)}) {
    ByteWriter w;
    S::write(w, v);
    w.trim();
    REQUIRE(w.vector().size() == 4 + 8 * v.size());
    ByteReader r(w.vector());
    std::vector<std::int64_t> back = {9, 9};
    REQUIRE(S::read(r, back).ok());
    CHECK(back == v);
    CHECK(r.at_end());
  }
}

TEST_CASE("a vector count that cannot fit in the remaining bytes is refused before allocating",
          "[io][serializer]") {
  using S = cowstate::VectorInt64Serializer;
  ByteWriter w;
  w.put_u32(0xffffffffu);
  w.put_i64(1);
  w.put_i64(2);
  w.put_u32(0);  // 20 bytes remain after the count: room for 2 values, not 3
  w.trim();
  ByteReader r(w.vector());
  r.set_field("state");
  std::vector<std::int64_t> out;
  const Status s = S::read(r, out);
  REQUIRE_FALSE(s.ok());
  CHECK(s.message() ==
        "offset 0: expected count of vector<int64> state of at most 2 (20 bytes remain), found "
        "4294967295");
  CHECK(out.capacity() == 0);
  CHECK(r.offset() == 0);

  Bytes three = w.vector();
  put_u32_at(three, 0, 3);
  ByteReader r3(three);
  CHECK_FALSE(S::read(r3, out).ok());
  CHECK(out.capacity() == 0);
  put_u32_at(three, 0, 2);
  ByteReader r2(three);
  REQUIRE(S::read(r2, out).ok());
  CHECK(out == std::vector<std::int64_t>{1, 2});
}

// ---------------------------------------------------------------------------------------
// Round trips

TEST_CASE("a map of int64 states with namespaces survives a round trip", "[io][roundtrip]") {
  IntMap m;
  fill_int_map(m, 3000);
  auto snap = m.snapshot();
  const Bytes bytes = write_all<IntIo>(snap);
  CHECK(bytes.size() ==
        cowstate::kMapSnapshotHeaderSize + 3000 * 20 + cowstate::kMapSnapshotTrailerSize);
  auto restored = read<IntIo>(bytes);
  INFO(restored.status().message());
  REQUIRE(restored.ok());
  CHECK(map_image(**restored) == map_image(m));
  CHECK((*restored)->size() == 3000);
  CHECK((*restored)->check_invariants());
  CHECK_FALSE((*restored)->rehashing());  // pre-sized: no rehash while restoring
}

TEST_CASE("a map of string states with namespaces survives a round trip", "[io][roundtrip]") {
  StringMap m;
  for (int k = 0; k < 500; ++k) {
    for (std::int32_t ns : {0, -7, 1 << 30}) {
      m.put("key-" + std::to_string(k), ns,
            std::string(static_cast<std::size_t>(k % 40), static_cast<char>('a' + k % 26)));
    }
  }
  m.put(std::string("nul\0key", 7), 0, std::string("\0\xff", 2));
  m.put("", 5, "");
  auto snap = m.snapshot();
  auto restored = read<StringIo>(write_all<StringIo>(snap));
  INFO(restored.status().message());
  REQUIRE(restored.ok());
  CHECK(map_image(**restored) == map_image(m));
  CHECK((*restored)->check_invariants());
}

TEST_CASE("a map of vector<int64> states with string namespaces survives a round trip",
          "[io][roundtrip]") {
  VectorMap m;
  for (std::int64_t k = -300; k < 300; ++k) {
    m.put(k, k % 2 == 0 ? "even" : "odd",
          std::vector<std::int64_t>(static_cast<std::size_t>(k & 15), k));
    m.put(k, "", {});
  }
  auto snap = m.snapshot();
  auto restored = read<VectorIo>(write_all<VectorIo>(snap));
  INFO(restored.status().message());
  REQUIRE(restored.ok());
  CHECK(map_image(**restored) == map_image(m));
  CHECK((*restored)->check_invariants());
}

TEST_CASE("an empty map survives a round trip as header and trailer only", "[io][roundtrip]") {
  IntMap m;
  auto snap = m.snapshot();
  Writer<IntIo> w(snap);
  CHECK(w.step(0));
  CHECK(w.done());
  CHECK(w.entries_written() == 0);
  const Bytes bytes = w.take_bytes();
  CHECK(bytes.size() == cowstate::kMapSnapshotHeaderSize + cowstate::kMapSnapshotTrailerSize);
  auto restored = read<IntIo>(bytes);
  REQUIRE(restored.ok());
  CHECK((*restored)->empty());

  StringMap sm;
  auto ssnap = sm.snapshot();
  auto srestored = read<StringIo>(write_all<StringIo>(ssnap));
  REQUIRE(srestored.ok());
  CHECK((*srestored)->empty());
}

TEST_CASE("a map at maximum capacity with chains longer than the bucket count round trips",
          "[io][roundtrip]") {
  const MapOptions tiny{.initial_capacity = 4, .min_capacity = 4, .max_capacity = 4};
  IntMap m(tiny);
  fill_int_map(m, 64);  // 16 entries per bucket on average
  REQUIRE(m.capacity() == 4);
  REQUIRE_FALSE(m.rehashing());
  auto snap = m.snapshot();
  const Bytes bytes = write_all<IntIo>(snap);
  auto restored = read<IntIo>(bytes, tiny);
  INFO(restored.status().message());
  REQUIRE(restored.ok());
  CHECK((*restored)->capacity() == 4);
  CHECK(map_image(**restored) == map_image(m));
  CHECK((*restored)->check_invariants());

  StringMap sm(tiny);
  for (int k = 0; k < 40; ++k) sm.put(std::to_string(k), k % 2, std::string(3, 'z'));
  auto ssnap = sm.snapshot();
  auto srestored = read<StringIo>(write_all<StringIo>(ssnap), tiny);
  REQUIRE(srestored.ok());
  CHECK(map_image(**srestored) == map_image(sm));
}

TEST_CASE("a snapshot taken mid-rehash round trips while the rehash goes on", "[io][roundtrip]") {
  IntMap m(MapOptions{.initial_capacity = 64, .min_capacity = 4, .max_capacity = 1u << 20});
  std::uint64_t k = 0;
  while (!m.rehashing()) {
    m.put(k, 1, static_cast<std::int64_t>(k));
    ++k;
    REQUIRE(k < 100000);
  }
  auto snap = m.snapshot();
  const auto frozen = map_image(m);
  Writer<IntIo> w(snap);
  std::size_t steps = 0;
  while (!w.step(5)) {
    m.put(k, 2, -static_cast<std::int64_t>(k));  // drives the rehash on
    m.remove(k / 2, 1);
    ++k;
    ++steps;
  }
  CHECK_FALSE(m.rehashing());
  CHECK(steps > 0);
  auto restored = read<IntIo>(w.bytes());
  INFO(restored.status().message());
  REQUIRE(restored.ok());
  CHECK(map_image(**restored) == frozen);
}

// ---------------------------------------------------------------------------------------
// Stepping and copy-on-write

TEST_CASE("a snapshot written in steps of one entry equals one written at once", "[io][step]") {
  IntMap m(MapOptions{.initial_capacity = 8});
  fill_int_map(m, 200);
  StringMap sm(MapOptions{.initial_capacity = 8});
  for (int i = 0; i < 200; ++i)
    sm.put(std::to_string(i), i % 4, std::string(static_cast<std::size_t>(i % 9), 'q'));
  auto snap = m.snapshot();
  auto ssnap = sm.snapshot();
  const Bytes at_once = write_all<IntIo>(snap);
  const Bytes s_at_once = write_all<StringIo>(ssnap);
  for (std::size_t step : {std::size_t{1}, std::size_t{2}, std::size_t{7}, std::size_t{199},
                           std::size_t{200}, std::size_t{1} << 20}) {
    Writer<IntIo> w(snap);
    Writer<StringIo> sw(ssnap);
    std::size_t calls = 0;
    while (!w.step(step)) ++calls;
    while (!sw.step(step)) {
    }
    CHECK(calls == (200 + step - 1) / step - 1);  // the trailer comes with the last entry
    CHECK(w.entries_written() == 200);
    CHECK(w.bytes() == at_once);
    CHECK(sw.bytes() == s_at_once);
    CHECK(w.step(step));  // idempotent once done
    CHECK(w.bytes() == at_once);
  }
}

TEST_CASE("a writer moved between steps continues where it left off", "[io][step]") {
  StringMap m;
  for (int i = 0; i < 30; ++i)
    m.put(std::to_string(i), i, std::string(static_cast<std::size_t>(i), 'm'));
  auto snap = m.snapshot();
  const Bytes expected = write_all<StringIo>(snap);
  Writer<StringIo> first(snap);
  REQUIRE_FALSE(first.step(10));
  Writer<StringIo> second(std::move(first));
  REQUIRE_FALSE(second.step(10));
  Writer<StringIo> third(snap);
  third = std::move(second);
  CHECK(third.step(10));
  CHECK(third.entries_written() == 30);
  CHECK(third.bytes() == expected);
}

TEST_CASE("between steps the bytes hold the header and exactly the entries written so far",
          "[io][step]") {
  IntMap m;
  fill_int_map(m, 50);
  auto snap = m.snapshot();
  Writer<IntIo> w(snap);
  CHECK(w.bytes().size() == cowstate::kMapSnapshotHeaderSize);
  for (std::size_t i = 1; i < 50; ++i) {
    std::size_t emitted = 0;
    REQUIRE_FALSE(w.step(1, [&](auto&&...) { ++emitted; }));
    CHECK(emitted == 1);
    CHECK(w.entries_written() == i);
    CHECK(w.bytes().size() == cowstate::kMapSnapshotHeaderSize + i * 20);
  }
  CHECK(w.step(1));
  CHECK(w.bytes().size() ==
        cowstate::kMapSnapshotHeaderSize + 50 * 20 + cowstate::kMapSnapshotTrailerSize);
}

TEST_CASE("on_entry sees every entry written, once, and nothing else", "[io][step]") {
  StringMap m(MapOptions{.initial_capacity = 4, .min_capacity = 4, .max_capacity = 16});
  for (int i = 0; i < 100; ++i) m.put("k" + std::to_string(i), i % 3, "v" + std::to_string(i));
  auto snap = m.snapshot();
  Writer<StringIo> w(snap);
  Image<StringMap> emitted;
  std::size_t calls = 0;
  bool finished = false;
  while (!finished) {
    std::size_t this_step = 0;
    finished = w.step(9, [&](const std::string& k, const std::int32_t& ns, const std::string& s) {
      CHECK(emitted.emplace(std::pair(k, ns), s).second);
      ++this_step;
    });
    CHECK(this_step <= 9);
    calls += this_step;
  }
  CHECK(calls == 100);
  CHECK(emitted == map_image(m));
}

TEST_CASE("writes into the live map between steps do not change the bytes", "[io][cow]") {
  SECTION("inline int64 states") {
    IntMap m(MapOptions{.initial_capacity = 16, .min_capacity = 4, .max_capacity = 64});
    fill_int_map(m, 120);
    auto snap = m.snapshot();
    const Bytes expected = write_all<IntIo>(snap);
    const auto frozen = map_image(m);
    Writer<IntIo> w(snap);
    Image<IntMap> emitted;
    std::uint64_t k = 0;
    while (!w.step(3, [&](auto key, auto ns, auto s) { emitted.emplace(std::pair(key, ns), s); })) {
      m.put(k * 7919, static_cast<std::int32_t>(k % 3) - 1, 123456);  // overwrite
      m.remove((k + 50) * 7919, static_cast<std::int32_t>((k + 50) % 3) - 1);
      m.put(1000000 + k, 9, 1);  // insert (and at max capacity, long chains)
      if (std::int64_t* s = m.get_mutable(((k + 80) % 120) * 7919,
                                          static_cast<std::int32_t>(((k + 80) % 120) % 3) - 1)) {
        *s += 1;
      }
      ++k;
    }
    CHECK(w.bytes() == expected);
    CHECK(emitted == frozen);
    CHECK(m.check_invariants());
  }
  SECTION("boxed string states") {
    StringMap m(MapOptions{.initial_capacity = 8});
    for (int i = 0; i < 80; ++i) m.put(std::to_string(i), 0, "old" + std::to_string(i));
    auto snap = m.snapshot();
    const Bytes expected = write_all<StringIo>(snap);
    Writer<StringIo> w(snap);
    int i = 0;
    while (!w.step(2)) {
      if (std::string* s = m.get_mutable(std::to_string(i), 0)) s->assign("mutated in place?");
      m.put(std::to_string(i + 1), 0, "new");
      m.remove(std::to_string(79 - i), 0);
      m.put("fresh" + std::to_string(i), 1, "x");
      ++i;
    }
    CHECK(w.bytes() == expected);
    auto restored = read<StringIo>(w.bytes());
    REQUIRE(restored.ok());
    CHECK((*restored)->size() == 80);
    CHECK(*(*restored)->get("0", 0) == "old0");
  }
}

// Regression: remove() once nulled the state pointer of an entry it retired for a live
// snapshot (fixed in 6c658e1); the writer then dereferenced null.
TEST_CASE("removing boxed-state entries between steps does not change the bytes", "[io][cow]") {
  StringMap m(MapOptions{.initial_capacity = 8});
  for (int i = 0; i < 80; ++i) m.put(std::to_string(i), 0, "old" + std::to_string(i));
  auto snap = m.snapshot();
  const Bytes expected = write_all<StringIo>(snap);
  Writer<StringIo> w(snap);
  int i = 0;
  while (!w.step(2)) {
    m.remove(std::to_string(79 - i), 0);
    m.remove_and_get_old(std::to_string(i), 0);
    ++i;
  }
  CHECK(w.bytes() == expected);
  CHECK(m.check_invariants());
}

// The writer's scan visits the pool slots allocated at the snapshot's start less those free
// or retired then; this puts both kinds (and a rehash in flight) under two live snapshots.
TEST_CASE("snapshots taken over free and retired pool slots write exactly their own entries",
          "[io][cow]") {
  IntMap m(MapOptions{.initial_capacity = 4, .min_capacity = 4, .max_capacity = 1024});
  fill_int_map(m, 200);
  for (std::uint64_t k = 0; k < 200; k += 3) {  // no snapshot yet: freed
    m.remove(k * 7919, static_cast<std::int32_t>(k % 3) - 1);
  }
  auto s1 = m.snapshot();
  const auto image1 = map_image(m);
  for (std::uint64_t k = 1; k < 200; k += 4) {  // copies: the originals are retired for s1
    m.put(k * 7919, static_cast<std::int32_t>(k % 3) - 1, -1);
  }
  for (std::uint64_t k = 2; k < 200; k += 5) {  // retired for s1, or freed
    m.remove(k * 7919, static_cast<std::int32_t>(k % 3) - 1);
  }
  for (std::uint64_t k = 0; k < 300; ++k) m.put(5000000 + k, 4, 4);     // reuses free slots
  for (std::uint64_t k = 0; k < 300; k += 7) m.remove(5000000 + k, 4);  // born after s1: freed
  REQUIRE(cowstate::CowStateMapAccess::retired_entries(m) > 0);
  REQUIRE(!cowstate::CowStateMapAccess::free_list(m).empty());
  auto s2 = m.snapshot();
  const auto image2 = map_image(m);
  REQUIRE(image2.size() == s2.size());
  Writer<IntIo> w2(s2);
  Image<IntMap> emitted2;
  std::uint64_t k = 0;
  while (!w2.step(7, [&](auto key, auto ns, auto s) {
    CHECK(emitted2.emplace(std::pair(key, ns), s).second);
  })) {
    m.put(9000000 + k, 1, 1);
    m.remove((k % 200) * 7919, static_cast<std::int32_t>((k % 200) % 3) - 1);
    ++k;
  }
  CHECK(emitted2 == image2);
  Writer<IntIo> w1(s1);
  Image<IntMap> emitted1;
  while (!w1.step(5, [&](auto key, auto ns, auto s) {
    CHECK(emitted1.emplace(std::pair(key, ns), s).second);
  })) {
  }
  CHECK(emitted1 == image1);
  CHECK(m.check_invariants());
}

// ---------------------------------------------------------------------------------------
// Malformed input

namespace {
Bytes small_int_file() {
  IntMap m;
  fill_int_map(m, 5);
  auto snap = m.snapshot();
  return write_all<IntIo>(snap);
}
Bytes small_string_file() {
  StringMap m;
  for (int i = 0; i < 4; ++i) m.put("key" + std::to_string(i), i, std::string(3, 's'));
  auto snap = m.snapshot();
  return write_all<StringIo>(snap);
}
}  // namespace

TEST_CASE("every truncation of a small valid file is refused with an error naming an offset",
          "[io][malformed]") {
  for (const Bytes& file : {small_int_file(), small_string_file()}) {
    REQUIRE(read<IntIo>(file).ok() != read<StringIo>(file).ok());
    for (std::size_t n = 0; n < file.size(); ++n) {
      const auto prefix = std::span<const std::byte>(file).first(n);
      // An exact-size copy, so ASan sees any read past the end.
      const Bytes copy(prefix.begin(), prefix.end());
      auto a = read<IntIo>(copy);
      auto b = read<StringIo>(copy);
      INFO("length " << n << ": " << a.status().message() << " | " << b.status().message());
      REQUIRE_FALSE(a.ok());
      REQUIRE_FALSE(b.ok());
      CHECK(contains(a.status().message(), "offset "));
      CHECK(contains(b.status().message(), "offset "));
    }
  }
}

TEST_CASE("every single-byte flip of a small valid file is refused with an error naming an offset",
          "[io][malformed]") {
  const Bytes file = small_int_file();
  REQUIRE(read<IntIo>(file).ok());
  for (std::size_t i = 0; i < file.size(); ++i) {
    Bytes bad = file;
    bad[i] ^= std::byte{0xff};
    auto r = read<IntIo>(bad);
    INFO("offset " << i << ": " << r.status().message());
    REQUIRE_FALSE(r.ok());
    const std::string& msg = r.status().message();
    CHECK(contains(msg, "offset "));
    if (i < 4) {
      CHECK(contains(msg, "magic"));
    } else if (i < 6) {
      CHECK(contains(msg, "format version"));
    } else if (i < 12) {
      CHECK(contains(msg, "serializer id"));
    } else {
      CHECK(contains(msg, "checksum"));
    }
  }
  const Bytes sfile = small_string_file();
  for (std::size_t i = 0; i < sfile.size(); ++i) {
    Bytes bad = sfile;
    bad[i] ^= std::byte{0xff};
    auto r = read<StringIo>(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(contains(r.status().message(), "offset "));
  }
}

TEST_CASE("a wrong magic, format version or serializer id is refused with its own message",
          "[io][malformed]") {
  const Bytes file = small_int_file();
  {
    Bytes bad = file;
    std::memcpy(bad.data(), "PK\x03\x04", 4);
    const auto r = read<IntIo>(bad);
    CHECK(
        r.status().message() ==
        "offset 0: expected magic \"CSMS\" (a cowstate map snapshot), found \"PK\\x03\\x04\": not "
        "a map snapshot file");
  }
  {
    Bytes bad = file;
    bad[4] = std::byte{2};
    const auto r = read<IntIo>(bad);
    CHECK(r.status().message() ==
          "offset 4: expected format version 1, found 2: written by an incompatible cowstate "
          "version");
  }
  {
    // A file of string keys and states read as int64 keys: refused at the key id.
    const auto r = read<IntIo>(small_string_file());
    CHECK(r.status().message() ==
          "offset 6: expected key serializer id 2 (uint64), found 4 (string): the file was "
          "written for other key/namespace/state types");
  }
  {
    Bytes bad = file;
    bad[8] = std::byte{9};
    CHECK(read<IntIo>(bad).status().message() ==
          "offset 8: expected namespace serializer id 3 (int32), found 9 (unknown): the file was "
          "written for other key/namespace/state types");
    bad = file;
    bad[10] = std::byte{3};
    CHECK(contains(read<IntIo>(bad).status().message(),
                   "offset 10: expected state serializer id 1 (int64), found 3 (int32)"));
  }
  {
    const Bytes empty;
    CHECK(read<IntIo>(empty).status().message() ==
          "offset 0: expected 4 bytes for magic \"CSMS\", found 0");
  }
  {
    Bytes bad = file;
    bad.resize(cowstate::kMapSnapshotHeaderSize + 3);
    CHECK(read<IntIo>(bad).status().message() ==
          "offset 20: expected at least 16 bytes for the trailer (entry count, checksum), found 3: "
          "the file is truncated");
  }
}

TEST_CASE("bytes appended after the trailer are refused", "[io][malformed]") {
  Bytes bad = small_int_file();
  bad.push_back(std::byte{0});
  const auto r = read<IntIo>(bad);
  REQUIRE_FALSE(r.ok());
  CHECK(contains(r.status().message(), "checksum"));
  CHECK(contains(r.status().message(), "offset "));
}

TEST_CASE(
    "a resealed file with entry bytes left before the trailer is refused as trailing "
    "garbage",
    "[io][malformed]") {
  Bytes file = small_int_file();
  const std::size_t trailer = file.size() - cowstate::kMapSnapshotTrailerSize;
  file.insert(file.begin() + static_cast<std::ptrdiff_t>(trailer), 20, std::byte{0x5a});
  reseal(file);
  const auto r = read<IntIo>(file);
  CHECK(r.status().message() ==
        "offset 120: expected the trailer after 5 entries, found 20 more bytes of entry data "
        "(trailing garbage)");
}

TEST_CASE("a resealed file whose counts disagree is refused naming the count's offset",
          "[io][malformed]") {
  const Bytes file = small_int_file();
  const std::size_t trailer = file.size() - cowstate::kMapSnapshotTrailerSize;
  {
    Bytes bad = file;
    put_u64_at(bad, trailer, 4);
    reseal(bad);
    CHECK(read<IntIo>(bad).status().message() ==
          "offset 120: expected a trailer entry count of 5 (as in the header), found 4: the "
          "writer did not write every entry");
  }
  {
    // Header and trailer agree on fewer entries than the bytes hold.
    Bytes bad = file;
    put_u64_at(bad, 12, 4);
    put_u64_at(bad, trailer, 4);
    reseal(bad);
    CHECK(contains(read<IntIo>(bad).status().message(), "trailing garbage"));
  }
  {
    // A huge count is refused before the map is allocated.
    Bytes bad = file;
    put_u64_at(bad, 12, std::uint64_t{1} << 62);
    put_u64_at(bad, trailer, std::uint64_t{1} << 62);
    reseal(bad);
    CHECK(read<IntIo>(bad).status().message() ==
          "offset 12: expected an entry count of at most 5 (100 bytes of entries, at least 20 "
          "each), found 4611686018427387904");
  }
  {
    // Five entries claimed, four present: the fifth (empty key, namespace 0) runs into the
    // trailer at its state's length.
    Bytes bad = small_string_file();
    const std::size_t strailer = bad.size() - cowstate::kMapSnapshotTrailerSize;
    bad.insert(bad.begin() + static_cast<std::ptrdiff_t>(strailer), 10, std::byte{0});
    put_u64_at(bad, 12, 5);
    put_u64_at(bad, strailer + 10, 5);
    reseal(bad);
    CHECK(read<StringIo>(bad).status().message() ==
          "offset " + std::to_string(strailer + 8) +
              ": expected 4 bytes for length of string state, found 2 (entry 5 of 5)");
  }
}

TEST_CASE("huge length fields inside entries are refused at their offset without allocating",
          "[io][malformed]") {
  Bytes file = small_string_file();
  // The first entry's key length sits right after the header.
  put_u32_at(file, cowstate::kMapSnapshotHeaderSize, 0xfffffff0u);
  reseal(file);
  const auto r = read<StringIo>(file);
  REQUIRE_FALSE(r.ok());
  CHECK(contains(r.status().message(), "offset 20: expected length of string key of at most"));
  CHECK(contains(r.status().message(), "found 4294967280 (entry 1 of 4)"));

  VectorMap vm;
  vm.put(1, "n", {1, 2, 3});
  auto snap = vm.snapshot();
  Bytes vfile = write_all<VectorIo>(snap);
  // key (8) + namespace (4 + 1) after the header: the state's count.
  put_u32_at(vfile, cowstate::kMapSnapshotHeaderSize + 13, 0xffffffffu);
  reseal(vfile);
  const auto vr = read<VectorIo>(vfile);
  CHECK(vr.status().message() ==
        "offset 33: expected count of vector<int64> state of at most 3 (24 bytes remain), found "
        "4294967295 (entry 1 of 1)");
}

TEST_CASE("a resealed file with a duplicate (key, namespace) is refused", "[io][malformed]") {
  IntMap m;
  m.put(1, 1, 10);
  m.put(2, 1, 20);
  auto snap = m.snapshot();
  Bytes file = write_all<IntIo>(snap);
  // Make the second entry's key and namespace equal to the first's.
  std::memcpy(file.data() + 40, file.data() + 20, 12);
  reseal(file);
  CHECK(read<IntIo>(file).status().message() ==
        "offset 40: expected a (key, namespace) not seen before, found a duplicate (entry 2 of 2)");
}

#if defined(COWSTATE_MUTANTS) && COWSTATE_MUTANTS
TEST_CASE("the writer_drops_chain_tail mutant loses entries and the reader notices",
          "[io][mutant]") {
  IntMap m(MapOptions{.initial_capacity = 4, .min_capacity = 4, .max_capacity = 4});
  fill_int_map(m, 20);
  auto snap = m.snapshot();
  cowstate::mutants::active() = cowstate::mutants::Mutant::writer_drops_chain_tail;
  Writer<IntIo> w(snap);
  std::size_t emitted = 0;
  while (!w.step(3, [&](auto&&...) { ++emitted; })) {
  }
  cowstate::mutants::active() = cowstate::mutants::Mutant::none;
  // Expected: one entry fewer per chain of two or more.
  std::size_t long_chains = 0;
  std::size_t length = 0;
  for (auto c = snap.cursor(); !c.done(); c.next()) {
    ++length;
    if (c.at_chain_end()) {
      if (length >= 2) ++long_chains;
      length = 0;
    }
  }
  REQUIRE(long_chains > 0);
  CHECK(w.entries_written() == 20 - long_chains);
  CHECK(emitted == 20 - long_chains);
  CHECK(contains(read<IntIo>(w.bytes()).status().message(), "trailer entry count"));
}

TEST_CASE("the reader_drops_last_entry mutant restores one entry fewer", "[io][mutant]") {
  IntMap m;
  fill_int_map(m, 20);
  auto snap = m.snapshot();
  const Bytes file = write_all<IntIo>(snap);
  cowstate::mutants::active() = cowstate::mutants::Mutant::reader_drops_last_entry;
  auto r = read<IntIo>(file);
  cowstate::mutants::active() = cowstate::mutants::Mutant::none;
  REQUIRE(r.ok());
  CHECK((*r)->size() == 19);
}
#endif
