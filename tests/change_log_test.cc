// Unit tests of the map's change tracking (cowstate/change_log.h): what a snapshot's delta
// from its base holds after each kind of change, and when the base moves.
#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "cowstate/cow_state_map.h"

namespace {

using cowstate::CowStateMap;
using cowstate::IdentityHash;
using cowstate::MapOptions;

using Key = std::pair<std::uint64_t, std::int32_t>;
using IntMap = CowStateMap<std::uint64_t, std::int32_t, std::int64_t,
                           IdentityHash<std::uint64_t, std::int32_t>>;
using VecMap = CowStateMap<std::uint64_t, std::int32_t, std::vector<std::int64_t>>;

constexpr MapOptions kFour{.initial_capacity = 4, .min_capacity = 4, .max_capacity = 1u << 30};

template <class Snap>
auto image(const Snap& s) {
  std::map<Key, std::remove_cvref_t<decltype(s.cursor().get().state)>> out;
  s.for_each([&](const auto& k, const auto& n, const auto& v) { out[{k, n}] = v; });
  return out;
}
template <class Snap>
std::set<Key> changed_keys(const Snap& s) {
  std::set<Key> out;
  s.for_each_changed([&](const auto& k, const auto& n, const auto&) {
    CHECK(out.insert({k, n}).second);  // each changed entry once
  });
  return out;
}
template <class Snap>
std::set<Key> tombstones(const Snap& s) {
  std::set<Key> out;
  s.for_each_tombstone([&](const auto& k, const auto& n) { out.insert({k, n}); });
  return out;
}
// The base image with the snapshot's delta applied: tombstones removed, then changes put.
template <class Image, class Snap>
Image applied(Image base, const Snap& s) {
  s.for_each_tombstone([&](const auto& k, const auto& n) { base.erase({k, n}); });
  s.for_each_changed([&](const auto& k, const auto& n, const auto& v) { base[{k, n}] = v; });
  return base;
}

// A checkpoint of the map that completes: its snapshot's version and image, the new base.
template <class Map>
auto completed_checkpoint(Map& m) {
  auto snap = m.snapshot();
  auto out = std::make_pair(snap.version(), image(snap));
  snap.release();
  m.checkpoint_completed(out.first);
  return out;
}

TEST_CASE("a snapshot's delta holds every kind of change since the base and nothing else",
          "[map][changes]") {
  VecMap m(kFour);
  m.track_changes();
  for (std::uint64_t k = 0; k < 8; ++k) m.put(k, 0, {static_cast<std::int64_t>(k)});
  CHECK_FALSE(m.snapshot().has_change_base());  // nothing completed yet: its delta is all of it
  const auto [base_version, base_image] = completed_checkpoint(m);

  m.put(1, 0, {10});                             // put over an existing key
  m.get_mutable(2, 0)->push_back(20);            // a mutable hand-out
  m.transform(3, 0, 30, [](std::vector<std::int64_t>& s, std::int64_t x) { s.push_back(x); });
  m.transform(4, 0, 40, [](const std::vector<std::int64_t>*, std::int64_t x) {
    return std::vector<std::int64_t>{x};
  });
  m.remove(5, 0);                                // removed
  m.remove(6, 0);                                // removed and put again
  m.put(6, 0, {60});
  m.put(9, 0, {90});                             // new
  m.put(10, 0, {100});                           // new, then removed
  m.remove(10, 0);
  CHECK(m.get(7, 0) != nullptr);                 // a read changes nothing

  auto s = m.snapshot();
  REQUIRE(s.has_change_base());
  CHECK(s.change_base() == base_version);
  CHECK(changed_keys(s) == std::set<Key>{{1, 0}, {2, 0}, {3, 0}, {4, 0}, {6, 0}, {9, 0}});
  CHECK(tombstones(s) == std::set<Key>{{5, 0}, {6, 0}, {10, 0}});
  CHECK(applied(base_image, s) == image(s));
}

TEST_CASE("changes of inline states are tracked too, and an unchanged map has an empty delta",
          "[map][changes]") {
  IntMap m(kFour);
  m.track_changes();
  for (std::uint64_t k = 0; k < 6; ++k) m.put(k, 0, static_cast<std::int64_t>(k));
  const auto base_image = completed_checkpoint(m).second;

  auto quiet = m.snapshot();
  CHECK(changed_keys(quiet).empty());
  CHECK(tombstones(quiet).empty());
  quiet.release();

  *m.get_mutable(0, 0) += 100;
  m.put(1, 0, 11);
  m.transform(2, 0, 5, [](std::int64_t& s, std::int64_t x) { s += x; });
  auto s = m.snapshot();
  CHECK(changed_keys(s) == std::set<Key>{{0, 0}, {1, 0}, {2, 0}});
  CHECK(applied(base_image, s) == image(s));
}

TEST_CASE("a checkpoint that does not complete leaves the base where it was", "[map][changes]") {
  VecMap m(kFour);
  m.track_changes();
  m.put(1, 0, {1});
  m.put(2, 0, {2});
  const auto [done, base_image] = completed_checkpoint(m);

  m.put(1, 0, {11});
  m.remove(2, 0);
  auto cancelled = m.snapshot();  // its checkpoint fails: nobody calls checkpoint_completed
  cancelled.release();
  m.put(3, 0, {3});

  auto next = m.snapshot();
  CHECK(next.change_base() == done);
  CHECK(changed_keys(next) == std::set<Key>{{1, 0}, {3, 0}});  // both intervals
  CHECK(tombstones(next) == std::set<Key>{{2, 0}});
  CHECK(applied(base_image, next) == image(next));

  // An older completion after a newer one does not move the base back.
  const auto next_image = image(next);
  next.release();
  m.checkpoint_completed(next.version());
  m.checkpoint_completed(done);
  m.put(4, 0, {4});
  auto last = m.snapshot();
  CHECK(last.change_base() == next.version());
  CHECK(changed_keys(last) == std::set<Key>{{4, 0}});
  CHECK(applied(next_image, last) == image(last));
}

TEST_CASE("copies under a live snapshot and rehash moves never lose a change",
          "[map][changes][rehash]") {
  VecMap m(MapOptions{.initial_capacity = 1, .min_capacity = 1, .max_capacity = 1u << 30});
  m.track_changes();
  for (std::uint64_t k = 0; k < 20; ++k) m.put(k, k % 2 == 0 ? 0 : 1, {static_cast<std::int64_t>(k)});
  auto base = m.snapshot();
  const auto base_image = image(base);
  const std::uint32_t capacity_at_base = m.capacity();
  m.checkpoint_completed(base.version());
  // base stays live: every write below copies what it shares, and the map keeps growing
  // (and rehashing) past it.
  for (std::uint64_t k = 0; k < 40; k += 3) m.put(k, k % 2 == 0 ? 0 : 1, {-1});
  for (std::uint64_t k = 1; k < 20; k += 5) m.remove(k, k % 2 == 0 ? 0 : 1);
  m.get_mutable(2, 0)->push_back(7);
  CHECK(m.capacity() > capacity_at_base);  // the map grew (rehashed) under the live base
  auto s = m.snapshot();
  CHECK(applied(base_image, s) == image(s));
  // The base's own image is untouched by all of it.
  CHECK(image(base) == base_image);
  s.release();
  base.release();
}

TEST_CASE("a snapshot keeps the change records it captured after the log drops them",
          "[map][changes]") {
  VecMap m(kFour);
  m.track_changes();
  m.put(1, 0, {1});
  const auto a_image = completed_checkpoint(m).second;
  m.put(2, 0, {2});
  m.remove(1, 0);
  auto b = m.snapshot();
  const std::size_t held = m.change_log_bytes();
  // b completes while it is still being read: the log drops the records b captured.
  m.checkpoint_completed(b.version());
  CHECK(m.change_log_bytes() < held);
  m.put(3, 0, {3});
  CHECK(changed_keys(b) == std::set<Key>{{2, 0}});
  CHECK(tombstones(b) == std::set<Key>{{1, 0}});
  CHECK(applied(a_image, b) == image(b));
}

TEST_CASE("a map made with track_changes tracks from its first entry, a bulk load included",
          "[map][changes]") {
  VecMap m(MapOptions{.initial_capacity = 4, .track_changes = true});
  CHECK(m.tracks_changes());
  {
    auto loader = m.load(2);
    loader.add(1, 0, {1});
    loader.add(2, 0, {2});
    REQUIRE_FALSE(loader.finish().has_value());  // no key given twice
  }
  const auto [base, base_image] = completed_checkpoint(m);
  m.get_mutable(1, 0)->push_back(10);
  m.remove(2, 0);
  auto s = m.snapshot();
  CHECK(s.change_base() == base);
  CHECK(changed_keys(s) == std::set<Key>{{1, 0}});
  CHECK(tombstones(s) == std::set<Key>{{2, 0}});
  CHECK(applied(base_image, s) == image(s));
}

TEST_CASE("a map that does not track changes records nothing", "[map][changes]") {
  VecMap m(kFour);
  m.put(1, 0, {1});
  m.remove(1, 0);
  auto s = m.snapshot();
  CHECK_FALSE(m.tracks_changes());
  CHECK_FALSE(s.has_change_base());
  CHECK(m.change_log_bytes() == 0);
  s.release();
}

}  // namespace
