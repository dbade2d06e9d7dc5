// The backend model (model/backend_model.h): Flink's key groups computed again from their
// definition, states by name with histories by version, checkpoint images, and restore
// restricted to a key-group span, split and merged.
#include "cowstate/model/backend_model.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cowstate/key_groups.h"

namespace {

using cowstate::model::BackendModel;
using cowstate::model::KeyGroupSpan;
using cowstate::model::StateKind;
using Value = std::vector<std::int64_t>;
using Model = BackendModel<std::uint64_t, std::int32_t, Value>;

std::int32_t group8(const std::uint64_t& k) {
  return cowstate::model::flink_key_group(cowstate::model::java_long_hash(k), 8);
}

Model two_states() {
  Model m;
  m.register_state("count", StateKind::value);
  m.register_state("events", StateKind::list);
  return m;
}

}  // namespace

TEST_CASE("the model's key groups are Flink's and agree with the backend's for every key tried",
          "[model][backend]") {
  // The golden values tests/key_groups_test.cc pins (max parallelism 128, keys 0..9).
  const std::vector<std::int32_t> flink = {94, 86, 127, 113, 7, 126, 18, 113, 15, 51};
  CHECK(cowstate::model::flink_murmur_hash(2) == 1085422463);
  for (std::int32_t k = 0; k < 10; ++k) {
    CHECK(cowstate::model::flink_key_group(k, 128) == flink[static_cast<std::size_t>(k)]);
  }
  for (std::int32_t mp : {1, 2, 7, 8, 128, 32768}) {
    for (std::uint64_t k = 0; k < 2000; k += 7) {
      const std::uint64_t key = k * 0x9e3779b97f4a7c15ULL;  // high bits too
      const std::int32_t want =
          cowstate::key_group_for_hash(cowstate::KeyHash<std::uint64_t>{}(key), mp);
      REQUIRE(cowstate::model::flink_key_group(cowstate::model::java_long_hash(key), mp) == want);
    }
  }
  CHECK(cowstate::model::java_long_hash(0x100000001ULL) == 0);  // (int)(v ^ v >>> 32)
  CHECK(cowstate::model::flink_murmur_hash(0) >= 0);
}

TEST_CASE("a checkpoint image holds every state as of its start, whatever is written after",
          "[model][backend]") {
  Model m = two_states();
  m.state("count").put(1, 0, {10});
  m.state("events").put(3, 0, {7});
  m.start_checkpoint(1);
  m.state("count").put(1, 0, {11});
  m.state("events").remove(3, 0);
  m.state("events").put(4, 2, {8, 9});
  const Model::BackendImage img = m.image(1);
  CHECK(img.at("count") == Model::Image{{{1, 0}, {10}}});
  CHECK(img.at("events") == Model::Image{{{3, 0}, {7}}});
  CHECK(m.live().at("count") == Model::Image{{{1, 0}, {11}}});
  CHECK(m.live().at("events") == Model::Image{{{4, 2}, {8, 9}}});
  CHECK(m.check_invariants());
  m.release_checkpoint(1);
  m.release_checkpoint(1);  // idempotent
  CHECK_FALSE(m.is_live(1));
  CHECK(m.live_checkpoints() == 0);
  CHECK(m.check_invariants());
}

TEST_CASE("overlapping checkpoints see their own versions and release in any order",
          "[model][backend]") {
  Model m = two_states();
  m.state("count").put(1, 0, {1});
  m.start_checkpoint(7);
  m.state("count").put(1, 0, {2});
  m.start_checkpoint(9);
  m.state("count").put(1, 0, {3});
  m.release_checkpoint(7);
  CHECK(m.image(9).at("count") == Model::Image{{{1, 0}, {2}}});
  m.release_checkpoint(9);
  CHECK(m.state("count").highest_required_version() == 0);
}

TEST_CASE("restore keeps exactly the keys of its span; a split and its merge give the image back",
          "[model][backend]") {
  Model m = two_states();
  for (std::uint64_t k = 0; k < 40; ++k) {
    m.state("count").put(k, 0, {static_cast<std::int64_t>(k)});
    if (k % 3 == 0) m.state("events").put(k, 1, {1, static_cast<std::int64_t>(k)});
  }
  m.start_checkpoint(1);
  const Model::BackendImage full = m.image(1);
  const Model::BackendImage low = Model::restrict(full, KeyGroupSpan{0, 3}, group8);
  const Model::BackendImage high = Model::restrict(full, KeyGroupSpan{4, 7}, group8);
  for (const auto& [name, image] : low) {
    for (const auto& [key, value] : image) CHECK(group8(key.first) <= 3);
  }
  for (const auto& [name, image] : high) {
    for (const auto& [key, value] : image) CHECK(group8(key.first) >= 4);
  }
  CHECK(low.at("count").size() + high.at("count").size() == 40);
  CHECK(Model::merge(low, high) == full);
  CHECK(Model::restrict(full, KeyGroupSpan{0, 7}, group8) == full);
  CHECK(Model::restrict(full, KeyGroupSpan{}, group8).at("count").empty());  // empty span

  const Model back = Model::restored(m.kinds(), low);
  CHECK(back.live() == Model::with_states(m.kinds(), low));
  CHECK(back.live_checkpoints() == 0);
  CHECK(back.state("count").map_version() == 0);
  CHECK(back.kind("events") == StateKind::list);
}
