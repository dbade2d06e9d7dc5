// The backend model (model/backend_model.h): Flink's key groups computed again from their
// definition, states by name with histories by version, checkpoint images, and restore
// restricted to a key-group span, split and merged; and the TTL rules (model/ttl_model.h).
#include "cowstate/model/backend_model.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "cowstate/key_groups.h"
#include "cowstate/model/ttl_model.h"

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

TEST_CASE("the backend's branch-free murmur_hash is the model's, negative mixes and MIN_VALUE too",
          "[model][backend]") {
  // The backend makes the mixed hash non-negative without a branch; the model does it the
  // way Flink writes it. About half of all inputs mix to a negative value; -2089875627 is the
  // input whose mix is exactly Integer.MIN_VALUE (Flink maps it to 0; found by running the
  // mix backwards from 0x80000000).
  for (std::int64_t i = -50000; i <= 50000; ++i) {
    const auto code = static_cast<std::int32_t>(i * 40503);
    REQUIRE(cowstate::murmur_hash(code) == cowstate::model::flink_murmur_hash(code));
  }
  CHECK(cowstate::model::flink_murmur_hash(-2089875627) == 0);
  CHECK(cowstate::murmur_hash(-2089875627) == 0);
  CHECK(cowstate::murmur_hash(std::numeric_limits<std::int32_t>::min()) ==
        cowstate::model::flink_murmur_hash(std::numeric_limits<std::int32_t>::min()));
  CHECK(cowstate::murmur_hash(std::numeric_limits<std::int32_t>::max()) ==
        cowstate::model::flink_murmur_hash(std::numeric_limits<std::int32_t>::max()));
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

TEST_CASE("restore keeps exactly the keys of its span, a split and its merge give the image back",
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

TEST_CASE("the TTL model: the boundary instant is expired, the sum saturates",
          "[model][ttl]") {
  const cowstate::model::TtlModel rules(5, false, false);
  CHECK_FALSE(rules.expired_at(0, 4));
  CHECK(rules.expired_at(0, 5));  // last access + ttl <= now
  CHECK(rules.expired_at(0, 6));
  const std::int64_t max = std::numeric_limits<std::int64_t>::max();
  CHECK_FALSE(rules.expired_at(max - 2, max - 1));  // saturates at max, no wrap-around
  CHECK(rules.expired_at(max - 2, max));
  const cowstate::model::TtlModel huge(max, false, false);
  CHECK_FALSE(huge.expired_at(1, max - 1));
  CHECK(huge.expired_at(1, max));
}

TEST_CASE("the TTL model: reads keep and refresh what lives, cleanup only drops what expired",
          "[model][ttl]") {
  using V = cowstate::model::TtlModel::Value;
  const cowstate::model::TtlModel rules(10, true, false);
  const V list = {1, 0, 2, 5, 3, 0};  // elements 1@0, 2@5, 3@0
  CHECK(rules.live_part(2, list, 10, false) == V{2, 5});
  CHECK(rules.after_read(2, list, 10) == V{2, 10});  // refreshed on read
  CHECK(rules.after_read(2, list, 20).empty());       // nothing left: the entry goes
  // Cleanup at 10 may drop 1@0 and 3@0, in any subset, but not 2@5, and not reorder.
  CHECK(rules.is_cleanup(2, list, V{2, 5}, 10));
  CHECK(rules.is_cleanup(2, list, V{1, 0, 2, 5}, 10));
  CHECK(rules.is_cleanup(2, list, list, 10));
  CHECK_FALSE(rules.is_cleanup(2, list, V{}, 10));          // 2@5 is live
  CHECK_FALSE(rules.is_cleanup(2, list, V{2, 5}, 9));       // nothing has expired at 9
  CHECK_FALSE(rules.is_cleanup(2, list, V{2, 6}, 10));      // a changed timestamp
  CHECK_FALSE(rules.is_cleanup(2, list, V{3, 0, 2, 5}, 10));  // reordered
  // A map (stride 3): user key 7 -> 70@0, user key 8 -> 80@5.
  const V map = {7, 70, 0, 8, 80, 5};
  CHECK(rules.is_cleanup(3, map, V{8, 80, 5}, 12));
  CHECK_FALSE(rules.is_cleanup(3, map, V{7, 70, 0}, 12));
}

TEST_CASE("the TTL model: a full-snapshot write between lo and hi drops what expired by lo and "
          "keeps what lives at hi",
          "[model][ttl]") {
  using V = cowstate::model::TtlModel::Value;
  const cowstate::model::TtlModel rules(10, false, false);
  const V list = {1, 0, 2, 3, 3, 8};  // expire at 10, 13, 18
  CHECK(rules.is_full_snapshot_write(2, list, V{2, 3, 3, 8}, 10, 10));  // exact at 10
  CHECK_FALSE(rules.is_full_snapshot_write(2, list, list, 10, 10));     // 1@0 expired at 10
  CHECK(rules.is_full_snapshot_write(2, list, V{2, 3, 3, 8}, 10, 14));  // 2@3: either way
  CHECK(rules.is_full_snapshot_write(2, list, V{3, 8}, 10, 14));
  CHECK_FALSE(rules.is_full_snapshot_write(2, list, V{2, 3}, 10, 14));  // 3@8 lives at 14
}
