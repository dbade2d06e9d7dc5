// The keyed state backend: each state kind, namespaces and merging, key groups, and
// copy-on-write protection of states under a live backend snapshot
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

TEST_CASE("a value state returns its default until updated, and again after clear",
          "[backend][value]") {
  Backend b(KeyGroupRange::all(128));
  States s(b);
  REQUIRE(b.set_current_key(1).ok());
  CHECK(s.value->value() == -1);
  s.value->update(42);
  CHECK(s.value->value() == 42);
  REQUIRE(b.set_current_key(2).ok());
  CHECK(s.value->value() == -1);  // scoped by key
  REQUIRE(b.set_current_key(1).ok());
  s.value->clear();
  CHECK(s.value->value() == -1);
  CHECK(b.check_invariants());
}

TEST_CASE("a list state adds, adds all, updates and reads, an empty update clears it",
          "[backend][list]") {
  Backend b(KeyGroupRange::all(128));
  States s(b);
  REQUIRE(b.set_current_key(5).ok());
  CHECK(s.list->get().empty());
  s.list->add(1);
  s.list->add(2);
  s.list->add_all({3, 4});
  s.list->add_all({});
  CHECK(s.list->get() == std::vector<std::int64_t>{1, 2, 3, 4});
  s.list->set_current_namespace(9);  // scoped by namespace
  CHECK(s.list->get().empty());
  s.list->update({7, 8});
  CHECK(s.list->get() == std::vector<std::int64_t>{7, 8});
  s.list->update({});
  CHECK(s.list->get().empty());
  CHECK(s.list->table().size() == 1);  // the empty update removed the entry
  s.list->set_current_namespace(0);
  CHECK(s.list->get().size() == 4);
}

TEST_CASE("a map state puts, gets, removes and iterates, removing the last key clears it",
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

TEST_CASE("a reducing state folds added values with its reduce function", "[backend][reducing]") {
  Backend b(KeyGroupRange::all(128));
  States s(b);
  REQUIRE(b.set_current_key(3).ok());
  CHECK_FALSE(s.sum->get().has_value());
  s.sum->add(5);
  s.sum->add(6);
  CHECK(s.sum->get() == 11);
  s.sum->clear();
  CHECK_FALSE(s.sum->get().has_value());
}

TEST_CASE("an aggregating state accumulates inputs and returns the function's result",
          "[backend][aggregating]") {
  Backend b(KeyGroupRange::all(128));
  States s(b);
  REQUIRE(b.set_current_key(3).ok());
  CHECK_FALSE(s.average->get().has_value());
  s.average->add(10);
  s.average->add(20);
  s.average->add(60);
  CHECK(s.average->get() == 30);
}

TEST_CASE("merging namespaces combines the sources into the target and removes the sources",
          "[backend][merge]") {
  Backend b(KeyGroupRange::all(128));
  States s(b);
  REQUIRE(b.set_current_key(11).ok());
  const std::vector<std::int32_t> sources = {1, 2, 3};

  for (std::int32_t ns : {0, 1, 3}) {
    s.list->set_current_namespace(ns);
    s.list->add(ns * 10);
    s.sum->set_current_namespace(ns);
    s.sum->add(ns * 10);
    s.average->set_current_namespace(ns);
    s.average->add(ns * 10 + 4);
  }
  s.list->merge_namespaces(0, sources);
  s.sum->merge_namespaces(0, sources);
  s.average->merge_namespaces(0, sources);
  s.list->set_current_namespace(0);
  CHECK(s.list->get() == std::vector<std::int64_t>{0, 10, 30});  // target first
  s.sum->set_current_namespace(0);
  CHECK(s.sum->get() == 40);
  s.average->set_current_namespace(0);
  CHECK(s.average->get() == (4 + 14 + 34) / 3);
  for (std::int32_t ns : sources) {
    s.list->set_current_namespace(ns);
    CHECK(s.list->get().empty());
    s.sum->set_current_namespace(ns);
    CHECK_FALSE(s.sum->get().has_value());
  }
  // Into an absent target, and from absent sources only.
  s.sum->merge_namespaces(5, std::vector<std::int32_t>{0});
  s.sum->set_current_namespace(5);
  CHECK(s.sum->get() == 40);
  s.sum->merge_namespaces(6, std::vector<std::int32_t>{8, 9});
  s.sum->set_current_namespace(6);
  CHECK_FALSE(s.sum->get().has_value());
  CHECK(b.check_invariants());
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
