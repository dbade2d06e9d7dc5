// The keyed state backend beyond what each operation returns (that is the keyed state
// behaviour suite's, keyed_state_behaviour_test.cc): what a state stores, key groups,
// registration, and copy-on-write protection of states under a live backend snapshot
// (cowstate/keyed_state_backend.h).
#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "backend_fixture.h"
#include "cowstate/keyed_state_backend.h"

using namespace backend_test;

namespace {
// A key owned by `b` (the first of 0, 1, 2, ...).
std::uint64_t some_key(Backend& b, std::uint64_t from = 0) {
  for (std::uint64_t k = from;; ++k) {
    if (b.range().contains(b.key_group_of(k))) return k;
  }
}
}  // namespace

TEST_CASE("an empty list update removes the entry, and add_all of nothing adds none",
          "[backend][list]") {
  Backend b(KeyGroupRange::all(128));
  States s(b);
  REQUIRE(b.set_current_key(5).ok());
  s.list->add_all({});
  CHECK(s.list->table().size() == 0);
  s.list->update({7, 8});
  s.list->set_current_namespace(9);
  s.list->update({7});
  CHECK(s.list->table().size() == 2);
  s.list->update({});
  CHECK(s.list->table().size() == 1);
}

TEST_CASE("a map state puts all, iterates in key order, and removing the last key clears it",
          "[backend][map]") {
  Backend b(KeyGroupRange::all(128));
  States s(b);
  REQUIRE(b.set_current_key(3).ok());
  CHECK(s.map->is_empty());
  CHECK_FALSE(s.map->get("x").has_value());
  s.map->put("x", 1);
  s.map->put_all({{"y", 2}, {"z", 3}});
  s.map->put("x", 10);
  CHECK(s.map->get("x") == 10);
  CHECK(s.map->contains("y"));
  CHECK_FALSE(s.map->contains("w"));
  std::vector<std::string> keys;
  for (const auto& [k, v] : s.map->entries()) keys.push_back(k + "=" + std::to_string(v));
  CHECK(keys == std::vector<std::string>{"x=10", "y=2", "z=3"});
  s.map->remove("w");  // absent: nothing happens
  s.map->remove("x");
  s.map->remove("y");
  CHECK_FALSE(s.map->is_empty());
  s.map->remove("z");
  CHECK(s.map->is_empty());
  CHECK(s.map->table().size() == 0);
}

TEST_CASE("a current key outside the backend's key-group range is an error naming both",
          "[backend][keygroups]") {
  const KeyGroupRange half = cowstate::key_group_range_for_operator(128, 2, 0);
  Backend b(half);
  States s(b);
  const std::uint64_t inside = some_key(b);
  std::uint64_t outside = 0;
  while (half.contains(b.key_group_of(outside))) ++outside;
  REQUIRE(b.set_current_key(inside).ok());
  const cowstate::Status st = b.set_current_key(outside);
  REQUIRE_FALSE(st.ok());
  CHECK(st.message() == "key group " + std::to_string(b.key_group_of(outside)) +
                            " of the key is outside this backend's key-group range [0, 63] "
                            "(max parallelism 128): the record was routed to the wrong instance");
  CHECK(b.current_key() == inside);  // unchanged
}

TEST_CASE("registering a state name again returns the same state", "[backend]") {
  Backend b(KeyGroupRange::all(128));
  auto& v1 = b.value_state<VoidNamespaceSerializer, Int64Serializer>("v");
  auto& v2 = b.value_state<VoidNamespaceSerializer, Int64Serializer>("v");
  CHECK(&v1 == &v2);
  CHECK(b.state_count() == 1);
  CHECK(b.find_table("v") == &v1.table());
  CHECK(b.find_table("w") == nullptr);
}

TEST_CASE("states mutated while a backend snapshot is live are copied, never changed in place",
          "[backend][cow]") {
  Backend b(KeyGroupRange::all(128));
  States s(b);
  populate(b, s, 300, 1);
  const Image before = image(s);
  auto snap = b.snapshot(1);
  CHECK(snap->live_key_groups() > 0);
  CHECK(snap->entries() == before.entries());

  // Every kind of in-place change: list append, map put and remove, reduce, aggregate,
  // value update, clear.
  for (std::uint64_t k = 0; k < 300; ++k) {
    REQUIRE(b.set_current_key(k).ok());
    s.value->update(-7);
    s.list->set_current_namespace(0);
    s.list->add(99);
    s.list->add_all({1, 2});
    s.map->put("a0", 5);
    s.map->remove("b");
    s.sum->set_current_namespace(0);
    s.sum->add(1000);
    s.average->set_current_namespace(7);
    s.average->add(1);
    if (k % 4 == 0) s.value->clear();
  }
  REQUIRE(image(s) != before);
  CHECK(b.check_invariants());

  // The checkpoint written from the snapshot is the image at the sync phase.
  cowstate::MemoryCheckpointSink sink;
  cowstate::CheckpointWriter w(std::move(snap), &sink);
  while (!w.step(64)) {
  }
  REQUIRE(w.done());
  CHECK(restore_image(sink.bytes()) == before);
}
