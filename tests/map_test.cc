// Unit tests of CowStateMap: each operation and each copy-on-write rule, read through
// CowStateMapAccess so entry identity, versions and retirement are visible.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cowstate/append_log.h"
#include "cowstate/box_pool.h"
#include "cowstate/cow_state_map.h"
#include "cowstate/cow_state_map_access.h"
#include "cowstate/entry_pool.h"
#include "cowstate/serializers.h"

namespace {

using cowstate::CowStateMap;
using cowstate::CowStateMapAccess;
using cowstate::IdentityHash;
using cowstate::MapOptions;
using cowstate::VisitCursor;
using cowstate::VisitResult;

// Integer states are stored inline; string and vector states are boxed and shared.
using IntMap = CowStateMap<std::uint64_t, std::int32_t, std::int64_t,
                           IdentityHash<std::uint64_t, std::int32_t>>;
using StrMap = CowStateMap<std::uint64_t, std::int32_t, std::string,
                           IdentityHash<std::uint64_t, std::int32_t>>;
using VecMap = CowStateMap<std::uint64_t, std::int32_t, std::vector<std::int64_t>>;

constexpr MapOptions kFour{.initial_capacity = 4, .min_capacity = 4, .max_capacity = 1u << 30};

template <class Map, class Snap>
std::map<std::pair<std::uint64_t, std::int32_t>, typename Map::state_type> contents(const Snap& s) {
  std::map<std::pair<std::uint64_t, std::int32_t>, typename Map::state_type> out;
  s.for_each([&](std::uint64_t k, std::int32_t n, const auto& v) {
    out.emplace(std::make_pair(k, n), v);
  });
  return out;
}

template <class Map>
std::map<std::pair<std::uint64_t, std::int32_t>, typename Map::state_type> live(const Map& m) {
  return contents<Map>(m);
}

template <class Map>
CowStateMapAccess::EntryInfo entry(const Map& m, std::uint64_t k, std::int32_t n = 0) {
  return CowStateMapAccess::find(m, k, n);
}

}  // namespace

// The snapshot scan relies on it to walk a bitmap word's slots 1..63 by address. And at()
// finds a slot's chunk from the bit scan of its index, so every slot of chunks 0..10 (the
// index ranges where the scan changes) must have storage of its own.
TEST_CASE("entry pool slots 64w + 1 .. 64w + 63 lie next to each other and no two overlap",
          "[map][pool]") {
  struct Slot {
    std::uint64_t a, b, c;
  };
  cowstate::EntryPool<Slot> pool;
  std::vector<std::uintptr_t> address;
  for (std::uint32_t i = 1; i <= 70000; ++i) {
    REQUIRE(pool.allocate() == i);
    address.push_back(reinterpret_cast<std::uintptr_t>(&pool.at(i)));
    pool.at(i).a = i;  // writable storage (ASan checks the bounds)
  }
  for (std::uint32_t i = 1; i <= 70000; ++i) {
    CHECK(pool.at(i).a == i);
    if (i % 64 == 0) continue;
    const std::uint32_t first = i - i % 64 + 1;
    CHECK(&pool.at(i) == &pool.at(first) + (i - first));
  }
  std::sort(address.begin(), address.end());
  std::size_t overlaps = 0;
  for (std::size_t k = 1; k < address.size(); ++k) {
    if (address[k] - address[k - 1] < sizeof(Slot)) ++overlaps;
  }
  CHECK(overlaps == 0);
}

// The map's retirement records: appends in order across every growth, has_room() false
// exactly when the log is full, truncate() keeps a prefix and frees its room.
TEST_CASE("append log keeps its records in order across growth and truncation", "[map][pool]") {
  struct Record {
    std::uint32_t index, birth, retired_at;
  };
  cowstate::AppendLog<Record> log;
  CHECK(log.empty());
  CHECK(log.size() == 0);
  CHECK_FALSE(log.has_room());  // no storage before the first append
  for (std::uint32_t i = 0; i < 1000; ++i) {
    const std::size_t capacity = log.capacity();
    CHECK(log.has_room() == (log.size() < capacity));
    log.append(Record{i, i + 1, i + 2});
    CHECK(log.size() == i + 1);
  }
  CHECK(log.capacity() >= 1000);
  std::uint32_t expected = 0;
  for (const Record& r : log) {
    CHECK((r.index == expected && r.birth == expected + 1 && r.retired_at == expected + 2));
    ++expected;
  }
  CHECK(expected == 1000);
  const std::size_t capacity = log.capacity();
  log.truncate(10);
  CHECK(log.size() == 10);
  CHECK(log.capacity() == capacity);
  CHECK(log.end() - log.begin() == 10);
  CHECK(log[9].index == 9);
  while (log.has_room()) log.append_unchecked(Record{7, 7, 7});
  CHECK(log.size() == capacity);
  CHECK(log[10].index == 7);
  log.truncate(0);
  CHECK(log.empty());
}

// A lookup reads an entry's key and then its state: an entry whose size divides a cache
// line must sit within one line (malloc's 16-byte alignment put every other 32-byte entry
// across two), and so must a box of such a size.
namespace {

template <std::size_t Bytes>
struct SlotOf {
  std::uint64_t words[Bytes / 8];
};

// Counts the slots of T that cross a cache line among `count` from each pool, and checks
// there are none.
template <class T>
void check_no_straddling_slots(std::uint32_t count) {
  auto straddles = [](const void* p) {
    const auto at = reinterpret_cast<std::uintptr_t>(p);
    return at / 64 != (at + sizeof(T) - 1) / 64;
  };
  INFO(sizeof(T) << "-byte slots");
  cowstate::EntryPool<T> entries;
  std::size_t entry_straddles = 0;
  for (std::uint32_t i = 1; i <= count; ++i) {  // chunks 0..10, the large ones mmapped
    REQUIRE(entries.allocate() == i);
    if (straddles(&entries.at(i))) ++entry_straddles;
  }
  CHECK(entry_straddles == 0);
  cowstate::BoxPool<T> boxes;
  std::vector<T*> held;
  std::size_t box_straddles = 0;
  for (std::uint32_t i = 0; i < count; ++i) {
    held.push_back(boxes.allocate());
    if (straddles(held.back())) ++box_straddles;
  }
  CHECK(box_straddles == 0);
  for (T* b : held) boxes.deallocate(b);
}

}  // namespace

TEST_CASE("pool slots whose size divides 64 never straddle a cache line", "[map][pool]") {
  check_no_straddling_slots<SlotOf<16>>(70000);
  check_no_straddling_slots<SlotOf<32>>(70000);
  check_no_straddling_slots<SlotOf<64>>(70000);
}

// Boxed states come from the map's BoxPool: distinct, aligned boxes, handed out in address
// order within a chunk, a freed box reused first (LIFO), chunks doubling up to a cap.
TEST_CASE("box pool hands out distinct aligned boxes and reuses freed ones first", "[map][pool]") {
  using Pool = cowstate::BoxPool<std::string>;
  Pool pool;
  CHECK(pool.bytes_reserved() == 0);
  constexpr std::size_t kBoxes = 300000;  // past the cap: 64 + ... + 65536 = 131008 boxes
  std::vector<std::string*> boxes;
  std::size_t misaligned = 0, out_of_order = 0, largest_step = 0;
  for (std::size_t i = 0; i < kBoxes; ++i) {
    const std::size_t before = pool.bytes_reserved();
    std::string* b = pool.allocate();
    largest_step = std::max(largest_step, pool.bytes_reserved() - before);
    if (reinterpret_cast<std::uintptr_t>(b) % alignof(std::string) != 0) ++misaligned;
    // Chunks hold 64 << k boxes (at most kMaxChunkBoxes), so each starts at a multiple of 64.
    if (i % 64 != 0 && b != boxes.back() + 1) ++out_of_order;
    boxes.push_back(new (b) std::string(std::to_string(i) + " is long enough for the heap"));
  }
  CHECK(misaligned == 0);
  CHECK(out_of_order == 0);
  // The largest chunk (plus the chunk list's growth) is the cap, not the doubling's 131072.
  CHECK(largest_step >= Pool::kMaxChunkBoxes * sizeof(std::string));
  CHECK(largest_step < Pool::kMaxChunkBoxes * sizeof(std::string) + 4096);
  std::vector<std::string*> sorted = boxes;
  std::sort(sorted.begin(), sorted.end());
  CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < kBoxes; ++i) {
    if (*boxes[i] != std::to_string(i) + " is long enough for the heap") ++wrong;
  }
  CHECK(wrong == 0);
  const std::size_t reserved = pool.bytes_reserved();
  for (std::size_t i : {7u, 99999u, 3u}) {
    boxes[i]->~basic_string();
    pool.deallocate(boxes[i]);
  }
  CHECK(pool.allocate() == boxes[3]);
  CHECK(pool.allocate() == boxes[99999]);
  CHECK(pool.allocate() == boxes[7]);
  CHECK(pool.bytes_reserved() == reserved);  // reuse took no new chunk
  for (std::size_t i : {7u, 99999u, 3u}) new (boxes[i]) std::string("again");
  for (std::string* b : boxes) {
    b->~basic_string();
    pool.deallocate(b);
  }
}

// A snapshot that saw every key written frees, on release, the entries its copies replaced,
// in the order the writes came in. The map orders its free list after so large a batch, so
// the next snapshot's copies go to ascending, neighbouring slots instead of scattered ones.
TEST_CASE("after a large reclaim, copies under the next snapshot fill ascending slots",
          "[map][pool]") {
  using Map = cowstate::CowStateMap<std::uint64_t, std::int32_t, std::int64_t>;
  using Access = cowstate::CowStateMapAccess;
  constexpr std::uint64_t kKeys = 10000;  // frees more than Map's kOrderFreeListMin at once
  Map m;
  for (std::uint64_t k = 0; k < kKeys; ++k) m.put(k, 0, 0);
  std::vector<std::uint64_t> order(kKeys);
  for (std::uint64_t k = 0; k < kKeys; ++k) order[k] = (k * 7919) % kKeys;  // 7919 is prime
  for (int round = 1; round <= 3; ++round) {
    auto snap = m.snapshot();
    std::vector<std::uint32_t> slots;
    for (const std::uint64_t k : order) {
      const std::uint32_t before = Access::find(m, k, 0).index;
      m.put(k, 0, round);
      // A key copied earlier as part of a chain prefix takes no new slot now.
      const std::uint32_t after = Access::find(m, k, 0).index;
      if (after != before) slots.push_back(after);
    }
    CHECK(slots.size() > kKeys / 2);
    snap.release();
    REQUIRE(m.retired_count() == 0);
    REQUIRE(m.check_invariants());
    // Round 1 copies into fresh slots; later rounds into the slots round r - 1 freed.
    std::size_t descents = 0;
    for (std::size_t i = 1; i < slots.size(); ++i) descents += slots[i] < slots[i - 1] ? 1u : 0u;
    INFO("round " << round);
    CHECK(descents == 0);
  }
  for (std::uint64_t k = 0; k < kKeys; ++k) CHECK(*m.get(k, 0) == 3);
}

TEST_CASE("a copy into the first slot past the live-slot bitmap's last segment is covered",
          "[map][pool][cow]") {
  using Map = cowstate::CowStateMap<std::uint64_t, std::int32_t, std::int64_t>;
  using Access = cowstate::CowStateMapAccess;
  // Slots 1 .. 32767 fill the bitmap's first segment (32Ki slots) and leave no free slot,
  // so the copy under the snapshot takes slot 32768, the first of a segment not yet made.
  constexpr std::uint64_t kKeys = 32767;
  Map m;
  for (std::uint64_t k = 0; k < kKeys; ++k) m.put(k, 0, 0);
  REQUIRE(Access::pool_slots(m) == kKeys);
  auto snap = m.snapshot();
  m.put(7, 0, 1);
  CHECK(Access::find(m, 7, 0).index == kKeys + 1);
  CHECK(*m.get(7, 0) == 1);
  REQUIRE(m.check_invariants());
  snap.release();
  REQUIRE(m.check_invariants());
}

// A state that counts its live instances, so destruction is checked in every build.
struct Counted {
  static inline int live = 0;
  std::string text;
  explicit Counted(std::string t = "") : text(std::move(t)) { ++live; }
  Counted(const Counted& o) : text(o.text) { ++live; }
  Counted(Counted&& o) noexcept : text(std::move(o.text)) { ++live; }
  Counted& operator=(const Counted&) = default;
  Counted& operator=(Counted&&) noexcept = default;
  ~Counted() { --live; }
};

// The destructor walks the pool's slots (live, retired, free) rather than the chains: each
// live state and each retired one is destroyed exactly once, including retired items a
// released snapshot left behind that no writer operation has reclaimed yet.
TEST_CASE("destroying a map destroys every live and retired state once", "[map][pool]") {
  for (const bool reclaim_first : {false, true}) {
    {
      CowStateMap<std::uint64_t, std::int32_t, Counted> m(kFour);
      for (std::uint64_t k = 0; k < 300; ++k) m.put(k, 0, Counted("state " + std::to_string(k)));
      for (std::uint64_t k = 0; k < 300; k += 7) m.remove(k, 0);  // free slots
      auto snap = m.snapshot();
      for (std::uint64_t k = 1; k < 300; k += 3) m.put(k, 0, Counted("changed"));  // retires
      for (std::uint64_t k = 2; k < 300; k += 5) m.remove(k, 0);
      for (std::uint64_t k = 1000; k < 1100; ++k) m.put(k, 0, Counted("new"));
      REQUIRE(m.retired_count() > 0);
      snap.release();  // the retired items stay until the writer's next operation
      if (reclaim_first) {
        CHECK(m.retired_count() == 0);  // reclaims
        CHECK(Counted::live == static_cast<int>(m.size()));
      } else {
        CHECK(Counted::live > static_cast<int>(m.size()));  // retired states still exist
      }
    }
    CHECK(Counted::live == 0);
  }
}

TEST_CASE("get, contains and size see what put wrote, per namespace", "[map][ops]") {
  IntMap m(kFour);
  CHECK(m.get(1, 0) == nullptr);
  CHECK_FALSE(m.contains(1, 0));
  m.put(1, 0, 10);
  m.put(1, 1, 11);
  REQUIRE(m.get(1, 0) != nullptr);
  CHECK(*m.get(1, 0) == 10);
  CHECK(*m.get(1, 1) == 11);
  CHECK(m.contains(1, 1));
  CHECK_FALSE(m.contains(2, 0));
  CHECK(m.size() == 2);
  m.put(1, 0, 12);
  CHECK(*m.get(1, 0) == 12);
  CHECK(m.size() == 2);
  CHECK(m.check_invariants());
}

TEST_CASE("put_and_get_old and remove_and_get_old return the previous state", "[map][ops]") {
  StrMap m(kFour);
  CHECK_FALSE(m.put_and_get_old(3, 0, "a").has_value());
  CHECK(m.put_and_get_old(3, 0, "b") == std::optional<std::string>("a"));
  CHECK(m.remove_and_get_old(3, 0) == std::optional<std::string>("b"));
  CHECK_FALSE(m.remove_and_get_old(3, 0).has_value());
  CHECK_FALSE(m.remove(3, 0));
  CHECK(m.empty());
  CHECK(m.check_invariants());
}

TEST_CASE("remove unlinks heads, middles and tails of a chain", "[map][ops]") {
  IntMap m(kFour);
  for (std::uint64_t k : {1ull, 5ull, 9ull, 13ull})
    m.put(k, 0, static_cast<std::int64_t>(k));  // one bucket
  CHECK(CowStateMapAccess::chain(m, 0, 1).size() == 4);
  CHECK(m.remove(9, 0));   // middle
  CHECK(m.remove(13, 0));  // head (newest first)
  CHECK(m.remove(1, 0));   // tail
  CHECK(live(m) == decltype(live(m)){{{5, 0}, 5}});
  CHECK(m.check_invariants());
}

TEST_CASE("transform puts fn(old, value), with nullptr for an absent key", "[map][ops]") {
  IntMap m(kFour);
  auto add = [](const std::int64_t* old, std::int64_t v) { return (old ? *old : 100) + v; };
  m.transform(7, 0, std::int64_t{5}, add);
  CHECK(*m.get(7, 0) == 105);
  m.transform(7, 0, std::int64_t{5}, add);
  CHECK(*m.get(7, 0) == 110);
}

TEST_CASE("an in-place transform keeps the state with no snapshot and copies it under one",
          "[map][ops]") {
  VecMap m(kFour);
  using List = std::vector<std::int64_t>;
  auto append = [](List& list, const std::int64_t& v) { list.push_back(v); };
  m.transform(3, 0, std::int64_t{1}, append);  // absent: starts as an empty list
  CHECK(*m.get(3, 0) == List{1});
  const List* before = m.get(3, 0);
  m.transform(3, 0, std::int64_t{2}, append);
  CHECK(m.get(3, 0) == before);  // no snapshot: the same state object, changed in place
  CHECK(*m.get(3, 0) == List{1, 2});

  auto s = m.snapshot();
  m.transform(3, 0, std::int64_t{3}, append);
  CHECK(m.get(3, 0) != before);  // the snapshot shares the state: copied first
  CHECK(*m.get(3, 0) == List{1, 2, 3});
  CHECK(contents<VecMap>(s) == decltype(contents<VecMap>(s)){{{3, 0}, List{1, 2}}});
  const List* copy = m.get(3, 0);
  m.transform(3, 0, std::int64_t{4}, append);  // the copy is the writer's own now
  CHECK(m.get(3, 0) == copy);
  CHECK(contents<VecMap>(s) == decltype(contents<VecMap>(s)){{{3, 0}, List{1, 2}}});
  s.release();
  CHECK(m.check_invariants());
}

TEST_CASE("an in-place transform of an inline state leaves the snapshot its value", "[map][ops]") {
  IntMap m(kFour);
  auto add = [](std::int64_t& state, const std::int64_t& v) { state += v; };
  m.transform(7, 0, std::int64_t{5}, add);
  CHECK(*m.get(7, 0) == 5);
  auto s = m.snapshot();
  m.transform(7, 0, std::int64_t{5}, add);
  CHECK(*m.get(7, 0) == 10);
  CHECK(contents<IntMap>(s) == decltype(contents<IntMap>(s)){{{7, 0}, 5}});
  s.release();
}

TEST_CASE("an in-place transform that throws on an absent key inserts nothing", "[map][ops]") {
  StrMap m(kFour);
  auto boom = [](std::string& state, const int&) {
    state = "half";
    throw std::runtime_error("boom");
  };
  CHECK_THROWS(m.transform(1, 0, 0, boom));
  CHECK_FALSE(m.contains(1, 0));
  CHECK(m.size() == 0);
}

TEST_CASE("a throwing transform changes nothing", "[map][ops]") {
  StrMap m(kFour);
  m.put(1, 0, "x");
  auto s = m.snapshot();
  auto boom = [](const std::string*, int) -> std::string { throw std::runtime_error("boom"); };
  CHECK_THROWS(m.transform(1, 0, 0, boom));
  CHECK(*m.get(1, 0) == "x");
  CHECK(CowStateMapAccess::retired_entries(m) == 0);
  s.release();
}

TEST_CASE("get_mutable hands out the live state for in-place mutation", "[map][ops]") {
  VecMap m;
  m.put(1, 0, {1, 2});
  std::vector<std::int64_t>* v = m.get_mutable(1, 0);
  REQUIRE(v != nullptr);
  v->push_back(3);
  CHECK(*m.get(1, 0) == std::vector<std::int64_t>{1, 2, 3});
  CHECK(m.get_mutable(2, 0) == nullptr);
}

TEST_CASE("iteration over the live map visits every entry once, in both tables mid-rehash",
          "[map][ops]") {
  IntMap m(kFour);
  std::map<std::pair<std::uint64_t, std::int32_t>, std::int64_t> expected;
  for (std::uint64_t k = 0; k < 40; ++k) {
    m.put(k, 0, static_cast<std::int64_t>(k * 3));
    expected[{k, 0}] = static_cast<std::int64_t>(k * 3);
    CHECK(live(m) == expected);
  }
  CHECK(m.size() == 40);
}

TEST_CASE("with no live snapshot nothing is copied: identity is preserved", "[map][cow]") {
  StrMap m(kFour);
  m.put(1, 0, "a");
  m.put(5, 0, "b");
  const auto before = entry(m, 1);
  m.put(1, 0, "c");
  *m.get_mutable(1, 0) += "!";
  m.remove(5, 0);
  const auto after = entry(m, 1);
  CHECK(after.index == before.index);
  CHECK(after.state == before.state);  // the boxed state was assigned in place
  CHECK(*m.get(1, 0) == "c!");
  CHECK(CowStateMapAccess::retired_entries(m) == 0);
  CHECK(CowStateMapAccess::retired_states(m) == 0);
  // A snapshot taken and released leaves the next write in place too.
  m.snapshot().release();
  m.put(1, 0, "d");
  CHECK(entry(m, 1).index == before.index);
}

TEST_CASE("a put after a snapshot copies the chain prefix and leaves the snapshot untouched",
          "[map][cow]") {
  IntMap m(kFour);
  m.put(5, 0, 50);  // tail
  m.put(1, 0, 10);  // head: bucket 1 holds 1 -> 5
  const auto head = entry(m, 1), tail = entry(m, 5);
  auto s = m.snapshot();
  m.put(5, 0, 51);  // the tail changes: head and tail are copied
  const auto head2 = entry(m, 1), tail2 = entry(m, 5);
  CHECK(head2.index != head.index);
  CHECK(tail2.index != tail.index);
  CHECK(head2.entry_version == m.map_version());
  CHECK(tail2.entry_version == m.map_version());
  CHECK(contents<IntMap>(s) == decltype(contents<IntMap>(s)){{{1, 0}, 10}, {{5, 0}, 50}});
  CHECK(live(m) == decltype(live(m)){{{1, 0}, 10}, {{5, 0}, 51}});
  CHECK(CowStateMapAccess::retired_entries(m) == 2);
  CHECK(m.check_invariants());
  // A second write to the same key after the copy is in place.
  m.put(5, 0, 52);
  CHECK(entry(m, 5).index == tail2.index);
  s.release();
  CHECK(m.retired_count() == 0);
}

TEST_CASE("a write to the head of a chain copies only the head", "[map][cow]") {
  IntMap m(kFour);
  m.put(5, 0, 50);
  m.put(1, 0, 10);  // head
  const auto tail = entry(m, 5);
  auto s = m.snapshot();
  m.put(1, 0, 11);
  CHECK(entry(m, 5).index == tail.index);  // the suffix is still shared
  CHECK(CowStateMapAccess::retired_entries(m) == 1);
  CHECK(contents<IntMap>(s).at({1, 0}) == 10);
  s.release();
}

TEST_CASE("removing from a shared chain copies the prefix up to the predecessor", "[map][cow]") {
  IntMap m(kFour);
  for (std::uint64_t k : {13ull, 9ull, 5ull, 1ull})
    m.put(k, 0, static_cast<std::int64_t>(k));  // 1 -> 5 -> 9 -> 13
  const auto e13 = entry(m, 13);
  auto s = m.snapshot();
  CHECK(m.remove(9, 0));
  CHECK(entry(m, 13).index == e13.index);  // after the removed entry: still shared
  CHECK(entry(m, 1).index != 0);
  CHECK(CowStateMapAccess::chain(m, 0, 1).size() == 3);
  CHECK(contents<IntMap>(s).size() == 4);
  // Retired: copies replaced 1 and 5; 9 was unlinked while the snapshot sees it.
  CHECK(CowStateMapAccess::retired_entries(m) == 3);
  CHECK(m.check_invariants());
  s.release();
  CHECK(m.retired_count() == 0);
}

TEST_CASE("an entry copied because its next changes shares its boxed state", "[map][cow]") {
  StrMap m(kFour);
  m.put(5, 0, std::string(4096, 'x'));
  m.put(1, 0, std::string(4096, 'y'));  // head, large state
  const auto head = entry(m, 1);
  auto s = m.snapshot();
  m.remove(5, 0);  // relinks the head: the head entry is copied, its state is not
  const auto head2 = entry(m, 1);
  CHECK(head2.index != head.index);
  CHECK(head2.state == head.state);
  CHECK(head2.state_version == head.state_version);
  CHECK(CowStateMapAccess::retired_states(m) == 1);  // only the removed entry's state
  s.release();
}

TEST_CASE("a removed boxed entry still shows its state to the snapshot that sees it",
          "[map][cow][regression]") {
  // Regression (scenarios/regressions/001-removed-entry-state-nulled.case): remove() cleared
  // the state pointer of the entry it retired, so the snapshot read a null state.
  StrMap m(kFour);
  m.put(1, 0, "one");
  m.put(5, 0, "five");
  auto s = m.snapshot();
  CHECK(m.remove(1, 0));
  CHECK(m.remove(5, 0));
  CHECK(contents<StrMap>(s) == decltype(contents<StrMap>(s)){{{1, 0}, "one"}, {{5, 0}, "five"}});
  s.release();
  CHECK(m.retired_count() == 0);
}

TEST_CASE("get_mutable copies a state a live snapshot can see, once", "[map][cow]") {
  StrMap m(kFour);
  m.put(1, 0, "old");
  const auto before = entry(m, 1);
  auto s = m.snapshot();
  std::string* p = m.get_mutable(1, 0);
  *p = "new";
  const auto after = entry(m, 1);
  CHECK(after.state != before.state);
  CHECK(after.state_version == m.map_version());
  CHECK(m.get_mutable(1, 0) == p);  // the copy is ours now: no second copy
  CHECK(contents<StrMap>(s).at({1, 0}) == "old");
  CHECK(*m.get(1, 0) == "new");
  s.release();
  CHECK(m.retired_count() == 0);
}

TEST_CASE("const get never copies, even under a live snapshot", "[map][cow]") {
  StrMap m(kFour);
  m.put(1, 0, "v");
  const auto before = entry(m, 1);
  auto s = m.snapshot();
  CHECK(*m.get(1, 0) == "v");
  CHECK(m.contains(1, 0));
  CHECK(entry(m, 1).index == before.index);
  CHECK(entry(m, 1).state == before.state);
  CHECK(CowStateMapAccess::retired_entries(m) + CowStateMapAccess::retired_states(m) == 0);
  s.release();
}

TEST_CASE("a put of a boxed state under a snapshot boxes a fresh state and retires the old",
          "[map][cow]") {
  StrMap m(kFour);
  m.put(1, 0, "a");
  const auto before = entry(m, 1);
  auto s = m.snapshot();
  m.put(1, 0, "b");
  CHECK(entry(m, 1).state != before.state);
  CHECK(CowStateMapAccess::retired_states(m) == 1);
  m.put(1, 0, "c");  // now in place
  CHECK(CowStateMapAccess::retired_states(m) == 1);
  CHECK(contents<StrMap>(s).at({1, 0}) == "a");
  s.release();
}

TEST_CASE("entries created after a snapshot are written in place", "[map][cow]") {
  IntMap m(kFour);
  m.put(1, 0, 1);
  auto s = m.snapshot();
  m.put(2, 0, 2);
  const auto fresh = entry(m, 2);
  m.put(2, 0, 3);
  m.put(6, 0, 6);  // same bucket as 2; prepends, 2 stays
  m.remove(6, 0);
  CHECK(entry(m, 2).index == fresh.index);
  CHECK(CowStateMapAccess::retired_entries(m) == 0);
  CHECK(contents<IntMap>(s).size() == 1);
  s.release();
}

TEST_CASE("the incremental rehash copies shared entries as it moves them", "[map][cow][rehash]") {
  IntMap m(kFour);
  for (std::uint64_t k = 0; k < 4; ++k) m.put(k, 0, static_cast<std::int64_t>(k));
  auto s = m.snapshot();
  m.put(100, 0, 100);  // size 4 > 3: doubles; the rehash starts
  REQUIRE(m.rehashing());
  const std::uint32_t old0 = entry(m, 0).index;
  m.get(0, 0);  // a read takes a rehash step
  CHECK(entry(m, 0).index != old0);
  CHECK(CowStateMapAccess::retired_entries(m) >= 1);
  CHECK(contents<IntMap>(s).size() == 4);
  CHECK(m.check_invariants());
  s.release();
  CHECK(m.retired_count() == 0);
}

TEST_CASE("every keyed operation, reads included, moves at least four entries of a rehash",
          "[map][rehash]") {
  IntMap m(MapOptions{.initial_capacity = 64, .min_capacity = 4, .max_capacity = 1u << 30});
  for (std::uint64_t k = 0; k < 49; ++k) m.put(k, 0, 1);  // 49 > 48: the 50th insert doubles
  m.put(1000, 0, 1);
  REQUIRE(m.rehashing());
  const std::size_t moved0 = CowStateMapAccess::rehash_size(m);
  m.get(12345, 0);  // a miss still moves entries
  CHECK(CowStateMapAccess::rehash_size(m) >= moved0 + 4);
  while (m.rehashing()) CHECK(m.contains(3, 0));
  CHECK(m.capacity() == 128);
  CHECK(m.check_invariants());
}

TEST_CASE("a snapshot taken mid-rehash keeps both directories and sees every entry once",
          "[map][cow][rehash]") {
  IntMap m(kFour);
  std::map<std::pair<std::uint64_t, std::int32_t>, std::int64_t> expected;
  for (std::uint64_t k = 0; k < 200; ++k) {
    m.put(k, 0, static_cast<std::int64_t>(k));
    expected[{k, 0}] = static_cast<std::int64_t>(k);
    if (!m.rehashing() || CowStateMapAccess::rehash_index(m) == 0) continue;
    auto s = m.snapshot();
    CHECK(CowStateMapAccess::snapshot_bucket_span(s) ==
          m.capacity() + CowStateMapAccess::rehash_index(m));
    CHECK(contents<IntMap>(s) == expected);
    m.put(k, 0, -1);  // a write while the snapshot is live
    CHECK(contents<IntMap>(s) == expected);
    m.put(k, 0, static_cast<std::int64_t>(k));
    s.release();
  }
  CHECK(m.check_invariants());
}

TEST_CASE("overlapping snapshots released out of order each keep their own version",
          "[map][cow][release]") {
  IntMap m(kFour);
  m.put(1, 0, 1);
  auto s1 = m.snapshot();
  m.put(1, 0, 2);
  auto s2 = m.snapshot();
  m.put(1, 0, 3);
  auto s3 = m.snapshot();
  m.put(1, 0, 4);
  CHECK(m.highest_required_version() == s3.version());
  s2.release();  // the middle one first
  CHECK(m.highest_required_version() == s3.version());
  CHECK(contents<IntMap>(s1).at({1, 0}) == 1);
  CHECK(contents<IntMap>(s3).at({1, 0}) == 3);
  s3.release();
  CHECK(m.highest_required_version() == s1.version());
  m.put(1, 0, 5);
  CHECK(contents<IntMap>(s1).at({1, 0}) == 1);
  s1.release();
  CHECK(m.highest_required_version() == 0);
  CHECK(m.retired_count() == 0);
  CHECK(m.check_invariants());
}

TEST_CASE("double release is harmless and keeps H at the largest live version", "[map][release]") {
  IntMap m(kFour);
  auto a = m.snapshot();
  auto b = m.snapshot();
  a.release();
  a.release();
  CHECK(a.released());
  CHECK(m.highest_required_version() == b.version());
  b.release();
  b.release();
  CHECK(m.highest_required_version() == 0);
  CHECK(CowStateMapAccess::live_versions(m).empty());
}

TEST_CASE("a retired entry is freed only when the last snapshot that could see it goes",
          "[map][memory]") {
  IntMap m(kFour);
  m.put(1, 0, 1);
  auto s1 = m.snapshot();  // sees 1
  m.put(1, 0, 2);          // retires the entry s1 sees (birth 0, retired at 1)
  m.put(2, 0, 20);         // born at version 1: invisible to s1
  auto s2 = m.snapshot();  // sees the copy of 1 and 2
  m.put(2, 0, 21);         // retires 2 (birth 1, retired at 2): only s2 sees it
  CHECK(CowStateMapAccess::retired_entries(m) == 2);
  s2.release();
  CHECK(m.retired_count() == 1);  // the old 2 is freed even though s1 is still live
  CHECK(contents<IntMap>(s1).at({1, 0}) == 1);
  s1.release();
  CHECK(m.retired_count() == 0);
}

TEST_CASE("a snapshot released on another thread is reclaimed by the writer's next operation",
          "[map][memory]") {
  VecMap m;
  m.put(1, 0, {1});
  auto s = m.snapshot();
  m.put(1, 0, {2});
  std::thread t([&s] { s.release(); });
  t.join();
  CHECK(CowStateMapAccess::retired_states(m) == 1);  // not yet: the writer has not run
  m.get(1, 0);
  CHECK(CowStateMapAccess::retired_states(m) == 0);
}

TEST_CASE("at maximum capacity chains grow longer than the bucket count", "[map][capacity]") {
  IntMap m(MapOptions{.initial_capacity = 4, .min_capacity = 4, .max_capacity = 4});
  for (std::uint64_t k = 0; k < 64; ++k) m.put(k, 0, static_cast<std::int64_t>(k));
  CHECK(m.capacity() == 4);
  CHECK_FALSE(m.rehashing());
  CHECK(CowStateMapAccess::chain(m, 0, 0).size() == 16);
  auto s = m.snapshot();
  CHECK(CowStateMapAccess::snapshot_bucket_span(s) == 4);  // I9: every bucket, 16 a chain
  for (std::uint64_t k = 0; k < 64; k += 3) m.remove(k, 0);
  CHECK(contents<IntMap>(s).size() == 64);
  CHECK(m.size() == 42);
  CHECK(m.check_invariants());
  s.release();
  CHECK(m.retired_count() == 0);
}

TEST_CASE("the incremental visitor sees whole chains, cycles, and writes through copy-on-write",
          "[map][visitor]") {
  IntMap m(kFour);
  for (std::uint64_t k = 0; k < 32; ++k) m.put(k, 0, static_cast<std::int64_t>(k));
  auto s = m.snapshot();
  VisitCursor cursor;
  std::size_t visited = 0;
  // Remove odd keys, double even ones; a bounded number of entries per call.
  auto fn = [](std::uint64_t k, std::int32_t, const std::int64_t& v) {
    if (k % 2 == 1) return VisitResult<std::int64_t>::remove();
    if (v == static_cast<std::int64_t>(k)) return VisitResult<std::int64_t>::replace(v * 2);
    return VisitResult<std::int64_t>::keep();
  };
  for (int round = 0; round < 100 && visited < 64; ++round) {
    const std::size_t n = m.visit_incremental(cursor, 5, fn);
    CHECK(n >= 1);
    visited += n;
  }
  std::map<std::pair<std::uint64_t, std::int32_t>, std::int64_t> expected;
  for (std::uint64_t k = 0; k < 32; k += 2) expected[{k, 0}] = static_cast<std::int64_t>(k * 2);
  CHECK(live(m) == expected);
  CHECK(contents<IntMap>(s).size() == 32);  // the snapshot is untouched
  CHECK(m.check_invariants());
  s.release();
  VisitCursor c2;
  IntMap empty(kFour);
  CHECK(empty.visit_incremental(c2, 10, fn) == 0);  // terminates on an empty map
}

// The visitor's bucket scan takes eight buckets per step with SSE2 and one at a time
// without; both must agree with the plain definition, at every offset and density.
TEST_CASE("the next non-empty bucket is found alike eight at a time and one at a time",
          "[map][visitor]") {
  std::uint64_t seed = 0x5eedb0c4e7ULL;
  auto next = [&seed] {
    seed += 0x9e3779b97f4a7c15ULL;
    return cowstate::detail::mix64(seed);
  };
  for (const unsigned per_mille : {0u, 20u, 300u, 700u, 1000u}) {
    for (std::size_t len = 0; len <= 40; ++len) {
      std::vector<std::uint32_t> heads(len);
      for (std::uint32_t& h : heads)
        h = next() % 1000 < per_mille ? static_cast<std::uint32_t>(1 + next() % 9) : 0u;
      for (std::size_t from = 0; from <= len; ++from) {
        for (std::size_t stop = from; stop <= len; ++stop) {
          const auto it = std::find_if(heads.begin() + static_cast<std::ptrdiff_t>(from),
                                       heads.begin() + static_cast<std::ptrdiff_t>(stop),
                                       [](std::uint32_t h) { return h != 0; });
          const auto expected = static_cast<std::size_t>(it - heads.begin());
          INFO("density " << per_mille << "/1000, length " << len << ", [" << from << ", " << stop
                          << ")");
          REQUIRE(cowstate::detail::next_nonempty_bucket(heads.data(), from, stop) == expected);
          REQUIRE(cowstate::detail::next_nonempty_bucket_scalar(heads.data(), from, stop) ==
                  expected);
        }
      }
    }
  }
}

// A visit that only reads takes no rehash step, so a map caught mid-rehash stays so while
// the cursor walks the primary table and then the rehash table.
TEST_CASE("the incremental visitor walks every entry once per cycle, in calls or in one",
          "[map][visitor]") {
  for (const bool mid_rehash : {false, true}) {
    IntMap m(kFour);
    std::uint64_t k = 0;
    while (m.size() < 40 || (mid_rehash && !m.rehashing()) || (!mid_rehash && m.rehashing())) {
      m.put(k, static_cast<std::int32_t>(k % 3), static_cast<std::int64_t>(k));
      ++k;
    }
    INFO("mid-rehash " << mid_rehash << ", " << m.size() << " entries");
    REQUIRE(m.rehashing() == mid_rehash);
    std::vector<std::uint64_t> seen;
    auto record = [&seen](std::uint64_t key, std::int32_t, const std::int64_t&) {
      seen.push_back(key);
      return VisitResult<std::int64_t>::keep();
    };
    std::set<std::uint64_t> all;
    for (std::uint64_t i = 0; i < k; ++i) all.insert(i);

    VisitCursor one;  // one call with room for everything: each entry once
    CHECK(m.visit_incremental(one, 10 * m.size(), record) == m.size());
    CHECK(seen.size() == m.size());
    CHECK(std::set<std::uint64_t>(seen.begin(), seen.end()) == all);

    // Small calls from a fresh cursor: the first size() visits are one whole cycle, and the
    // next cycle starts over in the same order.
    seen.clear();
    VisitCursor cursor;
    while (seen.size() < 2 * m.size()) {
      const std::size_t before = seen.size();
      const std::size_t visited = m.visit_incremental(cursor, 3, record);
      CHECK(visited >= 3);                     // whole chains: at least what was asked
      CHECK(visited == seen.size() - before);  // and it counts what it visited
    }
    const auto n = static_cast<std::ptrdiff_t>(m.size());
    const std::vector<std::uint64_t> first(seen.begin(), seen.begin() + n);
    const std::vector<std::uint64_t> second(seen.begin() + n, seen.begin() + 2 * n);
    CHECK(std::set<std::uint64_t>(first.begin(), first.end()) == all);
    CHECK(second == first);
    CHECK(m.rehashing() == mid_rehash);
  }
}

// Word-sized keys and namespaces are compared outright and hashed again when a rehash moves
// them, so their entries keep no hash; an empty namespace (VoidNamespace) takes no room.
TEST_CASE("entries of word-sized keys keep no hash and an empty namespace takes no room",
          "[map][memory]") {
  struct TwoWords {
    std::int64_t value;
    std::int64_t stamp;
  };
  using cowstate::VoidNamespace;
  CHECK(CowStateMapAccess::entry_size<CowStateMap<std::uint64_t, std::int32_t, std::int64_t>>() ==
        32);
  CHECK(CowStateMapAccess::entry_size<CowStateMap<std::uint64_t, std::int32_t, std::string>>() ==
        32);
  CHECK(CowStateMapAccess::entry_size<CowStateMap<std::uint64_t, VoidNamespace, std::int64_t>>() ==
        24);
  CHECK(CowStateMapAccess::entry_size<CowStateMap<std::uint64_t, VoidNamespace, TwoWords>>() == 32);
  // A string key keeps its hash: key 32, state 8, namespace 4, next, hash, entry version.
  CHECK(CowStateMapAccess::entry_size<CowStateMap<std::string, std::int32_t, std::int64_t>>() ==
        56);
}

TEST_CASE("a snapshot covers every bucket and keeps the heads of its start", "[map][cow]") {
  IntMap m(kFour);
  auto s0 = m.snapshot();
  CHECK(s0.size() == 0);
  CHECK(CowStateMapAccess::snapshot_bucket_span(s0) == 4);
  s0.release();
  for (std::uint64_t k = 0; k < 3; ++k) m.put(k, 0, 1);
  auto s = m.snapshot();
  CHECK(s.size() == 3);
  CHECK(s.version() == 2);
  CHECK(CowStateMapAccess::snapshot_bucket_span(s) == m.capacity());
  // New heads after the snapshot (fresh entries at the head of each bucket) stay invisible:
  // the writer copies a head segment the snapshot shares before it writes into it.
  for (std::uint64_t k = 4; k < 8; ++k) m.put(k, 0, 2);
  CHECK(contents<IntMap>(s) ==
        decltype(contents<IntMap>(s)){{{0, 0}, 1}, {{1, 0}, 1}, {{2, 0}, 1}});
  s.release();
}

// The scan finds a snapshot's entries from the pool's accounting (allocated slots less the
// free and retired ones) and walks each bitmap word's run of 63 slots by address; boxed
// states are discovered 16 entries ahead into a ring and prefetched. Sizes on both sides
// of the ring's length and its half and of a run (EntryPool::kRunSlots), slots freed before the
// snapshot, and copies, removals and inserts under it: the scan yields exactly the
// snapshot's entries, each once, with their frozen states.
TEST_CASE("a scan of boxed states visits each of the snapshot's entries once, at any size",
          "[map][snapshot]") {
  for (std::uint64_t n : {0u, 1u, 7u, 8u, 9u, 15u, 16u, 17u, 62u, 63u, 64u, 65u, 128u, 200u}) {
    StrMap m;
    for (std::uint64_t k = 0; k < n + 10; ++k) m.put(k, 0, "state " + std::to_string(k));
    for (std::uint64_t k = n; k < n + 10; ++k) m.remove(k, 0);  // free slots before it
    auto snap = m.snapshot();
    // Writes under the snapshot: copies, removals and new entries it must not see.
    for (std::uint64_t k = 0; k < n; k += 3) m.put(k, 0, "changed");
    for (std::uint64_t k = 1; k < n; k += 4) m.remove(k, 0);
    for (std::uint64_t k = 0; k < 20; ++k) m.put(n + 1000 + k, 0, "new");  // reuses free slots
    std::map<std::uint64_t, std::string> seen;
    for (auto scan = snap.scan(); !scan.done(); scan.next()) {
      const auto e = scan.get();
      CHECK(e.ns == 0);
      CHECK(seen.emplace(e.key, e.state).second);
    }
    REQUIRE(seen.size() == n);
    for (std::uint64_t k = 0; k < n; ++k) CHECK(seen[k] == "state " + std::to_string(k));
    snap.release();
    CHECK(m.check_invariants());
  }
}

TEST_CASE(
    "a snapshot start copies no segment, and the first write into a segment copies it once, "
    "counts the original as retired and frees it at release",
    "[map][cow][memory]") {
  IntMap m;
  for (std::uint64_t k = 0; k < 1000; ++k) m.put(k, 0, 1);
  while (m.rehashing()) (void)m.get(0, 0);  // the capacity stays put from here on
  using A = CowStateMapAccess;
  const std::size_t segments = A::segment_births(m, 0).size();
  REQUIRE(segments == 4);  // a quarter of 2048 buckets each
  const std::size_t before = m.memory_bytes();
  const auto live_before = m.segment_bytes().live;
  CHECK(m.segment_bytes().retired == 0);
  auto s1 = m.snapshot();
  CHECK(m.memory_bytes() == before);  // nothing copied at the start
  for (std::size_t g = 0; g < segments; ++g) CHECK(A::shares_segment(s1, m, 0, g));
  std::map<std::pair<std::uint64_t, std::int32_t>, std::int64_t> expected;
  m.for_each([&](std::uint64_t k, std::int32_t n, std::int64_t v) { expected[{k, n}] = v; });
  // A new key at the head of a bucket: its head segment and the live-slot segment are
  // copied, the originals retired for s1.
  m.put(5000, 0, 2);
  std::size_t copied = 0;
  for (std::size_t g = 0; g < segments; ++g) copied += A::shares_segment(s1, m, 0, g) ? 0u : 1u;
  CHECK(copied == 1);
  CHECK(A::retired_segments(m) == 2);
  CHECK(m.segment_bytes().live == live_before);
  CHECK(m.segment_bytes().retired > 0);
  // Every further write lands in segments the writer owns or copies once. The identity
  // hash puts keys 0..999 into buckets 0..999, segments 0 and 1; 2 and 3 stay shared.
  for (std::uint64_t k = 0; k < 1000; ++k) m.put(k, 0, 3);
  CHECK(A::retired_segments(m) == 3);
  CHECK_FALSE(A::shares_segment(s1, m, 0, 0));
  CHECK_FALSE(A::shares_segment(s1, m, 0, 1));
  CHECK(A::shares_segment(s1, m, 0, 2));
  CHECK(A::shares_segment(s1, m, 0, 3));
  CHECK(contents<IntMap>(s1) == expected);
  CHECK(m.check_invariants());
  s1.release();
  CHECK(m.retired_count() == 0);
  CHECK(m.segment_bytes().retired == 0);
  CHECK(A::retired_segments(m) == 0);
  CHECK(m.check_invariants());
}

namespace {
struct ContractViolation {
  std::string invariant;
};
[[noreturn]] void throw_contract(const char*, const char* invariant, const char*, const char*,
                                 int) {
  throw ContractViolation{invariant};
}
// The invariant id an assertion inside fn names, or "" when none fired.
template <class F>
std::string violated(F&& fn) {
  const cowstate::AssertHandler previous = cowstate::set_assert_handler(&throw_contract);
  std::string id;
  try {
    fn();
  } catch (const ContractViolation& v) {
    id = v.invariant;
  }
  cowstate::set_assert_handler(previous);
  return id;
}
}  // namespace

TEST_CASE("iterating, scanning or visiting a released snapshot is caught", "[map][contract]") {
  IntMap m(MapOptions{.initial_capacity = 4});
  m.put(1, 0, 10);
  m.put(2, 0, 20);
  auto s = m.snapshot();
  CHECK(violated([&] { (void)s.cursor(); }).empty());
  CHECK(violated([&] { (void)s.scan(); }).empty());
  CHECK(violated([&] { s.for_each([](auto&&...) {}); }).empty());
  s.release();
  CHECK(violated([&] { (void)s.cursor(); }) == "I10");
  CHECK(violated([&] { (void)s.scan(); }) == "I10");
  CHECK(violated([&] { s.for_each([](auto&&...) {}); }) == "I10");
  CHECK(m.check_invariants());
}

TEST_CASE("a bulk load holds exactly its entries, in slot order, in a table sized for them",
          "[map][load]") {
  using DefaultMap = CowStateMap<std::uint64_t, std::int32_t, std::int64_t>;
  DefaultMap m;
  {
    DefaultMap::Loader loader = m.load(1000);
    for (std::uint64_t k = 0; k < 1000; ++k) {
      loader.add(k * 7919, static_cast<std::int32_t>(k % 3), static_cast<std::int64_t>(k) * 3);
    }
    CHECK_FALSE(loader.finish().has_value());
  }
  REQUIRE(m.size() == 1000);
  CHECK(m.capacity() == 2048);  // 1000 * 4/3 rounded up to a power of two
  CHECK_FALSE(m.rehashing());
  std::string why;
  CHECK(m.check_invariants(&why));
  INFO(why);
  for (std::uint64_t k = 0; k < 1000; ++k) {
    const std::int64_t* s = m.get(k * 7919, static_cast<std::int32_t>(k % 3));
    REQUIRE(s != nullptr);
    CHECK(*s == static_cast<std::int64_t>(k) * 3);
    CHECK(CowStateMapAccess::find(m, k * 7919, static_cast<std::int32_t>(k % 3)).index == k + 1);
  }
  // The loaded map is an ordinary one: writes under a snapshot copy as usual.
  auto snap = m.snapshot();
  m.put(0, 0, -1);
  m.put(1'000'000, 0, 5);
  CHECK(snap.size() == 1000);
  CHECK(m.size() == 1001);
  CHECK(m.check_invariants(&why));
}

TEST_CASE("a bulk load reports the first entry whose key an earlier one had, and empties the map",
          "[map][load]") {
  IntMap m;
  {
    IntMap::Loader loader = m.load(5);
    loader.add(1, 0, 10);
    loader.add(2, 0, 20);
    loader.add(3, 0, 30);
    loader.add(2, 0, 21);
    loader.add(1, 0, 11);
    const std::optional<std::size_t> dup = loader.finish();
    REQUIRE(dup.has_value());
    CHECK(*dup == 3);
  }
  CHECK(m.empty());
  CHECK(m.get(1, 0) == nullptr);
  CHECK(m.check_invariants());
  // The five slots are free again: five new entries reuse them.
  for (std::uint64_t k = 7; k < 12; ++k) m.put(k, 0, static_cast<std::int64_t>(k) * 10);
  CHECK(CowStateMapAccess::pool_slots(m) == 5);
  CHECK(*m.get(7, 0) == 70);
  CHECK(m.check_invariants());
}

TEST_CASE("a bulk load tells keys of one hash and one bucket apart", "[map][load]") {
  // IdentityHash: key + namespace. In a table of 16 buckets, (5, 0), (4, 1) and (21, 0) share
  // bucket 5 and the same eighth of the hash space, (5, 0) and (4, 1) even the hash.
  IntMap m;
  {
    IntMap::Loader loader = m.load(8);
    loader.add(5, 0, 1);
    loader.add(4, 1, 2);
    loader.add(21, 0, 3);
    CHECK_FALSE(loader.finish().has_value());
  }
  REQUIRE(m.capacity() == 16);
  CHECK(CowStateMapAccess::chain(m, 0, 5).size() == 3);
  CHECK(*m.get(5, 0) == 1);
  CHECK(*m.get(4, 1) == 2);
  CHECK(*m.get(21, 0) == 3);
  CHECK(m.check_invariants());
}

TEST_CASE("a bulk load of boxed states frees them on a duplicate and when dropped unfinished",
          "[map][load]") {
  StrMap dup;
  {
    StrMap::Loader loader = dup.load(3);
    loader.add(1, 0, std::string(100, 'a'));
    loader.add(2, 0, std::string(100, 'b'));
    loader.add(1, 0, std::string(100, 'c'));
    CHECK(loader.finish() == std::optional<std::size_t>(2));
  }
  CHECK(dup.empty());
  CHECK(dup.check_invariants());

  StrMap dropped;
  {
    StrMap::Loader loader = dropped.load(3);
    loader.add(1, 0, std::string(100, 'a'));
    loader.add(2, 0, std::string(100, 'b'));
  }
  CHECK(dropped.empty());
  CHECK(dropped.check_invariants());
  dropped.put(2, 0, "x");
  CHECK(*dropped.get(2, 0) == "x");
}
