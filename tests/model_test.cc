// Sanity tests of the reference model (model/include/cowstate/model/versioned_map.h). The
// behaviour suite shared with CowStateMap runs on the model too; these tests pin the model's
// own version bookkeeping, images, garbage collection and failure-message helpers.

#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cowstate/model/versioned_map.h"

namespace {

using cowstate::model::describe;
using cowstate::model::diff;
using cowstate::model::filter;
using Model = cowstate::model::VersionedMap<int, int, int>;
using Image = Model::Image;

// Deterministic test-local generator (64-bit LCG, high bits); no std:: distributions.
class Lcg {
 public:
  explicit Lcg(std::uint64_t seed) : state_(seed) {}
  std::uint32_t below(std::uint32_t bound) {
    state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<std::uint32_t>((state_ >> 33) % bound);
  }

 private:
  std::uint64_t state_;
};

}  // namespace

TEST_CASE("an image at version v shows the last write before snapshot v started", "[model]") {
  Model model;
  model.put(1, 0, 10);
  model.put(2, 0, 20);
  model.put(1, 0, 11);  // same version: overwrites
  const std::uint32_t v1 = model.start_snapshot();
  model.put(1, 0, 12);
  model.put(3, 0, 30);
  const std::uint32_t v2 = model.start_snapshot();
  const std::uint32_t v3 = model.start_snapshot();  // no write between v2 and v3
  model.put(2, 0, 21);
  model.put(1, 1, 100);

  CHECK(v1 == 1);
  CHECK(v2 == 2);
  CHECK(v3 == 3);
  CHECK(model.map_version() == 3);
  CHECK(model.image(v1) == Image{{{1, 0}, 11}, {{2, 0}, 20}});
  CHECK(model.image(v2) == Image{{{1, 0}, 12}, {{2, 0}, 20}, {{3, 0}, 30}});
  CHECK(model.image(v3) == model.image(v2));
  CHECK(model.live() == Image{{{1, 0}, 12}, {{1, 1}, 100}, {{2, 0}, 21}, {{3, 0}, 30}});
  CHECK(model.size() == 4);
  CHECK(*model.get(2, 0) == 21);
  CHECK(model.get(4, 0) == nullptr);
  CHECK(model.check_invariants());
}

TEST_CASE("get_mutable after a snapshot does not change that snapshot's image", "[model]") {
  Model model;
  model.put(1, 0, 10);

  SECTION("before any snapshot it mutates the live state in place") {
    int* state = model.get_mutable(1, 0);
    REQUIRE(state != nullptr);
    CHECK(state == model.get(1, 0));
    *state = 11;
    CHECK(*model.get(1, 0) == 11);
  }

  SECTION("after a snapshot it mutates a copy, and keeps mutating that copy") {
    Model::Snapshot snapshot = model.snapshot();
    const int* frozen = model.get(1, 0);
    int* state = model.get_mutable(1, 0);
    REQUIRE(state != nullptr);
    CHECK(state != frozen);
    *state = 11;
    CHECK(model.get_mutable(1, 0) == state);  // no snapshot since: same copy
    *model.get_mutable(1, 0) += 1;
    CHECK(*model.get(1, 0) == 12);
    CHECK(model.image(snapshot.version()) == Image{{{1, 0}, 10}});
    CHECK(model.check_invariants());
  }

  SECTION("an absent state yields nullptr and no record") {
    CHECK(model.get_mutable(2, 0) == nullptr);
    CHECK_FALSE(model.contains(2, 0));
    CHECK(model.size() == 1);
  }
}

TEST_CASE("release is idempotent and the highest required version is the largest live one",
          "[model]") {
  Model model;
  CHECK(model.highest_required_version() == 0);
  const std::uint32_t v1 = model.start_snapshot();
  const std::uint32_t v2 = model.start_snapshot();
  const std::uint32_t v3 = model.start_snapshot();
  CHECK(model.highest_required_version() == v3);

  model.release_snapshot(v2);
  CHECK(model.highest_required_version() == v3);
  CHECK(model.live_versions() == std::vector<std::uint32_t>{v1, v3});

  model.release_snapshot(v3);
  CHECK(model.highest_required_version() == v1);
  model.release_snapshot(v3);
  model.release_snapshot(v2);
  CHECK(model.highest_required_version() == v1);
  CHECK(model.live_versions() == std::vector<std::uint32_t>{v1});

  model.release_snapshot(v1);
  CHECK(model.highest_required_version() == 0);
  CHECK(model.live_versions().empty());
  CHECK(model.map_version() == 3);  // releases never lower the map version
  CHECK(model.check_invariants());
}

TEST_CASE("a snapshot handle releases once, on release or destruction, and moves its version",
          "[model]") {
  Model model;
  model.put(1, 0, 10);
  {
    Model::Snapshot first = model.snapshot();
    model.put(2, 0, 20);
    Model::Snapshot second = model.snapshot();
    CHECK(first.size() == 1);
    CHECK(second.size() == 2);
    std::vector<std::pair<int, int>> seen;
    second.for_each([&seen](int key, int, int state) { seen.emplace_back(key, state); });
    CHECK(seen == std::vector<std::pair<int, int>>{{1, 10}, {2, 20}});

    first.release();
    CHECK(first.released());
    first.release();
    CHECK(model.live_versions() == std::vector<std::uint32_t>{second.version()});

    Model::Snapshot moved = std::move(second);
    CHECK(second.released());  // NOLINT(bugprone-use-after-move): moved-from reads released
    CHECK_FALSE(moved.released());
    CHECK(model.highest_required_version() == 2);

    model.release_snapshot(moved.version());  // released behind the handle's back
    CHECK(moved.released());
    moved.release();  // still idempotent
  }
  CHECK(model.live_versions().empty());

  {
    Model::Snapshot kept = model.snapshot();
    CHECK(model.highest_required_version() == kept.version());
  }
  CHECK(model.highest_required_version() == 0);

  Model::Snapshot empty;
  CHECK(empty.released());
  CHECK_FALSE(empty.valid());
  empty = model.snapshot();
  CHECK(empty.valid());
  CHECK(model.live_versions() == std::vector<std::uint32_t>{empty.version()});
}

TEST_CASE("a removed key is absent from later images and stays in earlier ones", "[model]") {
  Model model;
  model.put(1, 0, 10);
  model.put(2, 0, 20);
  const std::uint32_t before = model.start_snapshot();
  CHECK(model.remove_and_get_old(1, 0) == std::optional<int>(10));
  CHECK_FALSE(model.remove(1, 0));
  CHECK_FALSE(model.remove(7, 0));
  CHECK(model.remove_and_get_old(7, 0) == std::nullopt);
  const std::uint32_t after = model.start_snapshot();

  CHECK(model.image(before) == Image{{{1, 0}, 10}, {{2, 0}, 20}});
  CHECK(model.image(after) == Image{{{2, 0}, 20}});
  CHECK_FALSE(model.contains(1, 0));

  model.put(1, 0, 11);  // re-added after the snapshot `after`
  CHECK(model.image(after) == Image{{{2, 0}, 20}});
  CHECK(model.put_and_get_old(1, 0, 12) == std::optional<int>(11));
  CHECK(model.live() == Image{{{1, 0}, 12}, {{2, 0}, 20}});
  CHECK(model.check_invariants());

  model.release_snapshot(before);
  model.release_snapshot(after);
  CHECK(model.remove(1, 0));
  CHECK(model.remove(2, 0));
  CHECK(model.empty());
  CHECK(model.check_invariants());
}

TEST_CASE("transform puts fn(old, value) and passes nullptr for an absent key", "[model]") {
  Model model;
  const auto add = [](const int* old, const int& value) {
    return old == nullptr ? value * 100 : *old + value;
  };
  model.transform(1, 0, 5, add);
  CHECK(*model.get(1, 0) == 500);
  const std::uint32_t v = model.start_snapshot();
  model.transform(1, 0, 5, add);
  CHECK(*model.get(1, 0) == 505);
  CHECK(model.image(v) == Image{{{1, 0}, 500}});

  cowstate::model::VersionedMap<int, int, std::vector<std::int64_t>> lists;
  const auto append = [](const std::vector<std::int64_t>* old, const std::int64_t& value) {
    std::vector<std::int64_t> out = old == nullptr ? std::vector<std::int64_t>{} : *old;
    out.push_back(value);
    return out;
  };
  lists.transform(1, 0, std::int64_t{7}, append);
  const std::uint32_t w = lists.start_snapshot();
  lists.transform(1, 0, std::int64_t{8}, append);
  CHECK(*lists.get(1, 0) == std::vector<std::int64_t>{7, 8});
  CHECK(describe(lists.image(w)) == "{(1,0):[7]}");
}

TEST_CASE("restore makes a fresh model whose live map is the image, and filter keeps matches",
          "[model]") {
  const Image image{{{1, 0}, 10}, {{2, 0}, 20}, {{3, 1}, 31}, {{4, 0}, 40}};
  const Image even = filter(image, [](int key, int, int) { return key % 2 == 0; });
  CHECK(even == Image{{{2, 0}, 20}, {{4, 0}, 40}});
  CHECK(filter(image, [](int, int ns, int) { return ns == 1; }) == Image{{{3, 1}, 31}});
  CHECK(filter(image, [](int, int, int) { return false; }).empty());

  Model restored = Model::restore(even);
  CHECK(restored.map_version() == 0);
  CHECK(restored.live_versions().empty());
  CHECK(restored.live() == even);
  CHECK(restored.size() == 2);
  CHECK_FALSE(restored.contains(1, 0));
  const std::uint32_t v = restored.start_snapshot();
  restored.put(2, 0, 21);
  CHECK(restored.image(v) == even);
  CHECK(restored.check_invariants());
}

TEST_CASE("diff names the missing, extra and different entries and stays short", "[model]") {
  const Image expected{{{1, 0}, 10}, {{2, 0}, 20}, {{3, 0}, 30}};
  CHECK(diff(expected, expected) == std::nullopt);
  CHECK(diff(Image{}, Image{}) == std::nullopt);

  const Image actual{{{1, 0}, 10}, {{2, 0}, 21}, {{4, 0}, 40}};
  CHECK(diff(expected, actual) ==
        "3 differences (expected 3 entries, actual 3 entries):\n"
        "  different (2,0): expected 20, actual 21\n"
        "  missing (3,0): expected 30\n"
        "  extra (4,0): actual 40");

  Image many;
  for (int key = 0; key < 8; ++key) many[{key, 0}] = key;
  CHECK(diff(Image{}, many) ==
        "8 differences (expected 0 entries, actual 8 entries):\n"
        "  extra (0,0): actual 0\n"
        "  extra (1,0): actual 1\n"
        "  extra (2,0): actual 2\n"
        "  extra (3,0): actual 3\n"
        "  extra (4,0): actual 4\n"
        "  ... 3 more");
}

TEST_CASE("describe prints integral, string and list images in key order", "[model]") {
  CHECK(describe(Image{{{5, 0}, 50}, {{1, 0}, 10}}) == "{(1,0):10, (5,0):50}");
  CHECK(describe(Image{}) == "{}");
  CHECK(describe(Image{{{1, 0}, 1}, {{2, 0}, 2}, {{3, 0}, 3}}, 2) ==
        "{(1,0):1, (2,0):2, ... 1 more}");

  using StringImage = cowstate::model::ImageOf<std::string, std::int64_t, std::string>;
  CHECK(describe(StringImage{{{"b", -1}, "x\"y"}, {{"a", 2}, std::string("\n\x01", 2)}}) ==
        R"({("a",2):"\x0a\x01", ("b",-1):"x\"y"})");

  using ListImage = cowstate::model::ImageOf<std::uint64_t, bool, std::vector<std::int64_t>>;
  CHECK(describe(ListImage{{{7, true}, {1, -2}}, {{7, false}, {}}}) ==
        "{(7,false):[], (7,true):[1,-2]}");
}

TEST_CASE("every live snapshot's image stays what the live map was when it started", "[model]") {
  // Random interleavings of writes, mutations, snapshots and releases in any order; the image
  // of every live version is compared, after every step, with the live map captured when that
  // snapshot started. This also checks that garbage collection never drops a seen record.
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    Lcg rng(seed);
    Model model;
    std::map<std::uint32_t, Image> expected;  // live version -> live map at its start
    for (int step = 0; step < 400; ++step) {
      const int key = static_cast<int>(rng.below(6));
      const int ns = static_cast<int>(rng.below(2));
      const int value = static_cast<int>(rng.below(1000));
      switch (rng.below(8)) {
        case 0:
        case 1:
          model.put(key, ns, value);
          break;
        case 2:
          model.remove(key, ns);
          break;
        case 3:
          if (int* state = model.get_mutable(key, ns)) *state += value;
          break;
        case 4:
          model.transform(key, ns, value,
                          [](const int* old, const int& add) { return (old ? *old : 0) + add; });
          break;
        case 5:
          if (expected.size() < 4) {
            const Image now = model.live();
            expected.emplace(model.start_snapshot(), now);
          }
          break;
        default:
          if (!expected.empty()) {
            auto victim = expected.begin();
            std::advance(victim, rng.below(static_cast<std::uint32_t>(expected.size())));
            model.release_snapshot(victim->first);
            expected.erase(victim);
          }
          break;
      }
      INFO("seed " << seed << " step " << step);
      REQUIRE(model.check_invariants());
      REQUIRE(model.highest_required_version() ==
              (expected.empty() ? 0 : expected.rbegin()->first));
      for (const auto& [version, image] : expected) {
        const std::optional<std::string> difference = diff(image, model.image(version));
        INFO("version " << version << ": " << difference.value_or("equal"));
        REQUIRE_FALSE(difference.has_value());
      }
    }
  }
}
