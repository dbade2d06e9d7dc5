// The map behaviour suite, written once and run on four subjects (STYLE.md, "Tests"):
//
//   Model        model::VersionedMap, the reference model. Running the suite on it first
//                proves the suite: every expectation below is written by hand, not read
//                from the model.
//   DefaultMap   CowStateMap with default options.
//   TinyMap      CowStateMap starting at capacity 1: it doubles on the 2nd, 3rd, 5th, 8th,
//                14th, 26th, ... insert, so the small tests run right through rehashes and
//                the large ones go through a dozen (each in flight for a quarter of the
//                operations until the next doubling).
//   ChainedMap   CowStateMap with IdentityHash and a maximum capacity of 4: never rehashes
//                past 4 buckets, so chains grow long and every write under a snapshot
//                copies long chain prefixes.
//
// Only the observable contract is tested here (results, contents, snapshot images, versions);
// internals (entry identity, retirement, rehash position) are tested in map_test.cc.
#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cowstate/cow_state_map.h"
#include "cowstate/model/versioned_map.h"

namespace {

using Key = std::uint64_t;
using Ns = std::int32_t;
using State = std::string;
using Image = std::map<std::pair<Key, Ns>, State>;

// The factory trait: one subject type per row of the table above, each with a uniform make().
struct Model {
  using Map = cowstate::model::VersionedMap<Key, Ns, State>;
  static Map make() { return Map(); }
};

struct DefaultMap {
  using Map = cowstate::CowStateMap<Key, Ns, State>;
  static Map make() { return Map(); }
};

struct TinyMap {
  using Map = cowstate::CowStateMap<Key, Ns, State>;
  static Map make() {
    return Map(
        cowstate::MapOptions{.initial_capacity = 1, .min_capacity = 1, .max_capacity = 1u << 30});
  }
};

struct ChainedMap {
  using Map = cowstate::CowStateMap<Key, Ns, State, cowstate::IdentityHash<Key, Ns>>;
  static Map make() {
    return Map(cowstate::MapOptions{.initial_capacity = 4, .min_capacity = 4, .max_capacity = 4});
  }
};

// Every (key, ns) -> state the live map's for_each visits; a key visited twice fails.
template <class Map>
Image live(const Map& map) {
  Image out;
  map.for_each([&out](const Key& key, const Ns& ns, const State& state) {
    const bool fresh = out.emplace(std::make_pair(key, ns), state).second;
    CHECK(fresh);
  });
  return out;
}

// The same for a snapshot; also checks that size() agrees with what it visits.
template <class Snapshot>
Image frozen(const Snapshot& snapshot) {
  Image out;
  snapshot.for_each([&out](const Key& key, const Ns& ns, const State& state) {
    const bool fresh = out.emplace(std::make_pair(key, ns), state).second;
    CHECK(fresh);
  });
  CHECK(snapshot.size() == out.size());
  return out;
}

template <class Map>
std::optional<State> value(Map& map, Key key, Ns ns = 0) {
  const State* s = map.get(key, ns);
  return s == nullptr ? std::nullopt : std::optional<State>(*s);
}

State text(Key k) { return "s" + std::to_string(k); }

}  // namespace

// Each test case runs its SECTIONs one at a time, each on a fresh map from make(). (Sections
// rather than one test case per behaviour: every CTest test is a process, and under the
// sanitizers a process costs more than these checks.)
#define BEHAVIOUR_TEST(name) \
  TEMPLATE_TEST_CASE(name, "[behaviour]", Model, DefaultMap, TinyMap, ChainedMap)

BEHAVIOUR_TEST("the live map answers every operation as specified") {
  auto map = TestType::make();
  SECTION("get, contains and size see what put wrote, per key and namespace") {
    CHECK(map.size() == 0);
    CHECK(map.empty());
    CHECK(map.get(1, 0) == nullptr);
    CHECK_FALSE(map.contains(1, 0));
    map.put(1, 0, "a");
    map.put(1, 1, "b");
    map.put(2, 0, "c");
    CHECK(value(map, 1, 0) == "a");
    CHECK(value(map, 1, 1) == "b");
    CHECK(value(map, 2, 0) == "c");
    CHECK(map.contains(1, 1));
    CHECK_FALSE(map.contains(2, 1));
    CHECK_FALSE(map.contains(3, 0));
    CHECK(map.size() == 3);
    CHECK_FALSE(map.empty());
    map.put(1, 0, "d");  // overwrite: the size stays
    CHECK(value(map, 1, 0) == "d");
    CHECK(value(map, 1, 1) == "b");
    CHECK(map.size() == 3);
    CHECK(live(map) == Image{{{1, 0}, "d"}, {{1, 1}, "b"}, {{2, 0}, "c"}});
  }

  SECTION("put_and_get_old returns the previous state, or nothing for a new key") {
    CHECK(map.put_and_get_old(7, 0, "first") == std::nullopt);
    CHECK(map.put_and_get_old(7, 0, "second") == std::optional<State>("first"));
    CHECK(map.put_and_get_old(7, 1, "other namespace") == std::nullopt);
    CHECK(value(map, 7, 0) == "second");
    CHECK(map.size() == 2);
  }

  SECTION("remove and remove_and_get_old report what they removed and leave the key absent") {
    for (Key k = 0; k < 10; ++k) map.put(k, 0, text(k));
    CHECK(map.remove(3, 0));
    CHECK_FALSE(map.remove(3, 0));
    CHECK_FALSE(map.remove(3, 1));  // never there in that namespace
    CHECK(map.remove_and_get_old(4, 0) == std::optional<State>("s4"));
    CHECK(map.remove_and_get_old(4, 0) == std::nullopt);
    CHECK(map.remove_and_get_old(100, 0) == std::nullopt);
    CHECK_FALSE(map.contains(3, 0));
    CHECK(map.get(4, 0) == nullptr);
    CHECK(map.size() == 8);
    for (Key k = 0; k < 10; ++k) map.remove(k, 0);
    CHECK(map.size() == 0);
    CHECK(live(map).empty());
    map.put(3, 0, "back");  // a removed key can come back
    CHECK(value(map, 3) == "back");
  }

  SECTION("transform puts fn(old, value), with nullptr for an absent key") {
    auto append = [](const State* old, const std::string& v) {
      return old == nullptr ? "new:" + v : *old + "+" + v;
    };
    map.transform(5, 0, std::string("a"), append);
    CHECK(value(map, 5) == "new:a");
    map.transform(5, 0, std::string("b"), append);
    CHECK(value(map, 5) == "new:a+b");
    map.transform(5, 2, std::string("c"), append);
    CHECK(value(map, 5, 2) == "new:c");
    CHECK(map.size() == 2);
  }

  SECTION("get_mutable mutates the live state in place, and is null for an absent key") {
    map.put(1, 0, "abc");
    State* s = map.get_mutable(1, 0);
    REQUIRE(s != nullptr);
    *s += "d";
    CHECK(value(map, 1) == "abcd");
    *map.get_mutable(1, 0) += "e";
    CHECK(value(map, 1) == "abcde");
    CHECK(map.get_mutable(2, 0) == nullptr);
    CHECK(map.get_mutable(1, 1) == nullptr);
    CHECK_FALSE(map.contains(2, 0));
    CHECK(map.size() == 1);
  }

  SECTION("iteration visits every live entry exactly once") {
    Image expected;
    for (Key k = 0; k < 150; ++k) {
      const Ns ns = static_cast<Ns>(k % 4);
      map.put(k * 7, ns, text(k));
      expected[{k * 7, ns}] = text(k);
      if (k % 10 == 9) CHECK(live(map) == expected);  // at many fill levels, mid-rehash too
    }
    for (Key k = 0; k < 150; k += 3) {
      CHECK(map.remove(k * 7, static_cast<Ns>(k % 4)));
      expected.erase({k * 7, static_cast<Ns>(k % 4)});
    }
    std::size_t visits = 0;
    map.for_each([&visits](const Key&, const Ns&, const State&) { ++visits; });
    CHECK(visits == expected.size());
    CHECK(map.size() == expected.size());
    CHECK(live(map) == expected);
  }
}

BEHAVIOUR_TEST("a snapshot keeps showing the map as it was at its start until released") {
  auto map = TestType::make();
  SECTION("get_mutable after a snapshot changes the live map but not the snapshot") {
    for (Key k = 0; k < 12; ++k) map.put(k, 0, text(k));
    auto snapshot = map.snapshot();
    for (Key k = 0; k < 12; k += 2) *map.get_mutable(k, 0) += "!";
    *map.get_mutable(4, 0) += "?";  // a second mutation of the same state
    Image before, after;
    for (Key k = 0; k < 12; ++k) {
      before[{k, 0}] = text(k);
      after[{k, 0}] = text(k) + (k % 2 == 0 ? "!" : "");
    }
    after[{4, 0}] += "?";
    CHECK(live(map) == after);
    CHECK(frozen(snapshot) == before);
    snapshot.release();
    *map.get_mutable(1, 0) = "after release";
    CHECK(value(map, 1) == "after release");
  }

  SECTION("a snapshot is unaffected by later puts, removes, get_mutable and transform") {
    Image expected;
    for (Key k = 0; k < 20; ++k) {
      map.put(k, static_cast<Ns>(k % 3), text(k));
      expected[{k, static_cast<Ns>(k % 3)}] = text(k);
    }
    auto snapshot = map.snapshot();
    CHECK(frozen(snapshot) == expected);
    map.put(0, 0, "changed");
    map.put(100, 0, "added");
    CHECK(map.remove(4, 1));
    CHECK(map.remove_and_get_old(5, 2) == std::optional<State>("s5"));
    CHECK(map.put_and_get_old(6, 0, "swapped") == std::optional<State>("s6"));
    *map.get_mutable(7, 1) = "mutated";
    map.transform(8, 2, 1, [](const State* old, int) { return *old + "/t"; });
    map.transform(200, 0, 1, [](const State* old, int) { return old ? *old : "fresh"; });
    for (Key k = 9; k < 20; ++k) map.remove(k, static_cast<Ns>(k % 3));
    CHECK(frozen(snapshot) == expected);
    CHECK(value(map, 0) == "changed");
    CHECK(value(map, 8, 2) == "s8/t");
    CHECK(value(map, 200) == "fresh");
    CHECK(map.size() == 9);
    snapshot.release();
  }

  SECTION("a snapshot of an empty map stays empty, and one of a map emptied later stays full") {
    auto empty = map.snapshot();
    for (Key k = 0; k < 6; ++k) map.put(k, 0, text(k));
    auto full = map.snapshot();
    for (Key k = 0; k < 6; ++k) CHECK(map.remove(k, 0));
    CHECK(map.size() == 0);
    CHECK(frozen(empty).empty());
    CHECK(frozen(full).size() == 6);
    empty.release();
    full.release();
  }

  SECTION("several live snapshots each see their own version") {
    map.put(1, 0, "v0");
    map.put(2, 0, "kept");
    auto s1 = map.snapshot();
    map.put(1, 0, "v1");
    map.put(3, 0, "born after s1");
    auto s2 = map.snapshot();
    *map.get_mutable(1, 0) = "v2";
    map.remove(2, 0);
    auto s3 = map.snapshot();
    map.put(1, 0, "v3");
    CHECK(s1.version() < s2.version());
    CHECK(s2.version() < s3.version());
    CHECK(s3.version() == map.map_version());
    CHECK(map.highest_required_version() == s3.version());
    CHECK(frozen(s1) == Image{{{1, 0}, "v0"}, {{2, 0}, "kept"}});
    CHECK(frozen(s2) == Image{{{1, 0}, "v1"}, {{2, 0}, "kept"}, {{3, 0}, "born after s1"}});
    CHECK(frozen(s3) == Image{{{1, 0}, "v2"}, {{3, 0}, "born after s1"}});
    CHECK(live(map) == Image{{{1, 0}, "v3"}, {{3, 0}, "born after s1"}});
    s1.release();
    s2.release();
    s3.release();
  }

  SECTION("release is idempotent, may come in any order, and leaves the others intact") {
    map.put(1, 0, "a");
    auto s1 = map.snapshot();
    map.put(1, 0, "b");
    auto s2 = map.snapshot();
    map.put(1, 0, "c");
    auto s3 = map.snapshot();
    map.put(1, 0, "d");

    s2.release();  // the middle one first
    CHECK(s2.released());
    s2.release();
    CHECK(map.highest_required_version() == s3.version());
    map.put(1, 0, "e");
    CHECK(frozen(s1) == Image{{{1, 0}, "a"}});
    CHECK(frozen(s3) == Image{{{1, 0}, "c"}});

    s3.release();  // the newest next: the highest required version falls back to s1
    CHECK(map.highest_required_version() == s1.version());
    map.put(1, 0, "f");
    map.put(2, 0, "g");
    CHECK(frozen(s1) == Image{{{1, 0}, "a"}});
    s3.release();
    s1.release();
    s1.release();
    CHECK(s1.released());
    CHECK(map.highest_required_version() == 0);
    CHECK(live(map) == Image{{{1, 0}, "f"}, {{2, 0}, "g"}});

    {
      auto dropped = map.snapshot();  // released by its destructor
      CHECK(map.highest_required_version() == dropped.version());
    }
    CHECK(map.highest_required_version() == 0);
    auto moved_from = map.snapshot();
    auto moved_to = std::move(moved_from);
    CHECK(map.highest_required_version() == moved_to.version());
    CHECK(frozen(moved_to) == Image{{{1, 0}, "f"}, {{2, 0}, "g"}});
    moved_to.release();
    moved_from.release();  // a moved-from handle releases nothing
    CHECK(map.highest_required_version() == 0);
  }
}

BEHAVIOUR_TEST("many keys through several rehashes, with snapshots taken at many points") {
  auto map = TestType::make();
  using Snapshot = decltype(map.snapshot());
  struct Taken {
    Snapshot snapshot;
    Image image;
  };
  std::vector<Taken> taken;
  Image expected;
  constexpr Key kKeys = 1500;
  for (Key k = 0; k < kKeys; ++k) {
    map.put(k, 0, text(k));
    expected[{k, 0}] = text(k);
    if (k % 5 == 0 && k >= 10) {  // churn under whatever snapshots are live
      const Key old = k - 10;
      if (k % 3 == 0) {
        map.remove(old, 0);
        expected.erase({old, 0});
      } else if (State* s = map.get_mutable(old, 0)) {
        *s += "*";
        expected[{old, 0}] += "*";
      }
    }
    if (k % 97 == 0) taken.push_back(Taken{map.snapshot(), expected});
    if (k % 211 == 0 && taken.size() > 2) {  // release an older one, out of order
      Taken& victim = taken[taken.size() / 2];
      if (!victim.snapshot.released()) CHECK(frozen(victim.snapshot) == victim.image);
      victim.snapshot.release();
    }
  }
  CHECK(map.size() == expected.size());
  CHECK(live(map) == expected);
  for (Taken& t : taken) {
    if (t.snapshot.released()) continue;
    CHECK(frozen(t.snapshot) == t.image);
    t.snapshot.release();
  }
  for (Key k = 0; k < kKeys; ++k) map.remove(k, 0);
  CHECK(map.size() == 0);
  CHECK(map.highest_required_version() == 0);
}
