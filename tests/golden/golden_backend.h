// The backends whose checkpoints are the golden files of tests/golden/ (see its README.md):
// what each file must restore to, made by the same code that wrote it. Changing what this
// header puts into a backend changes what the golden files must hold: never do it for a
// format version whose files are already committed; add a new backend instead.
#pragma once

#include <cstdint>
#include <memory>

#include "backend_fixture.h"
#include "cowstate/keyed_state_backend.h"
#include "cowstate/ttl.h"

namespace golden {

using namespace backend_test;

// One state of each kind, filled by backend_test::populate(400 keys, seed 3) over all 128 key
// groups of max parallelism 128: the five plain states every format version stores.
struct Plain {
  Plain() { populate(b, s, 400, 3); }
  Backend b{KeyGroupRange::all(128)};
  States s{b};
};

// Plain's states with incremental checkpoints (format 3): populated as Plain, then
// changed round by round (change(1), change(2)): updates, list appends, map puts and
// removals of every state of some keys.
struct PlainIncremental {
  static std::unique_ptr<Backend> make() {
    auto b = std::make_unique<Backend>(KeyGroupRange::all(128));
    b->enable_incremental_checkpoints();
    return b;
  }
  PlainIncremental() { populate(b, s, 400, 3); }
  void change(int round) {
    const std::uint64_t every = round == 1 ? 7 : 11;
    for (auto k = static_cast<std::uint64_t>(round); k < 400; k += every) {
      REQUIRE(b.set_current_key(k).ok());
      const auto x = static_cast<std::int64_t>(k * 1000 + static_cast<std::uint64_t>(round));
      if (k % 3 == 0) {
        s.value->clear();
        s.map->clear();
        continue;
      }
      s.value->update(x);
      s.list->set_current_namespace(round);
      s.list->add(x);
      s.map->put("r" + std::to_string(round), x);
    }
  }
  std::unique_ptr<Backend> owner = make();
  Backend& b = *owner;
  States s{b};
};

// One TTL state of each kind on a manual clock, written at distinct instants, so that a file
// holds last-access times a reader must keep exactly (format 2 and later). The config sets
// every field the header records: OnReadAndWrite, ReturnExpiredIfNotCleanedUp, incremental
// cleanup of 5 entries on key switch, full-snapshot cleanup; the TTL is long enough that
// nothing expires while the file is written.
struct WithTtl {
  static constexpr std::int64_t kStart = 1'700'000'000'000;
  static cowstate::StateOptions options() {
    cowstate::StateTtlConfig c;
    c.ttl_ms = 86'400'000;
    c.update_type = cowstate::StateTtlConfig::UpdateType::on_read_and_write;
    c.visibility = cowstate::StateTtlConfig::Visibility::return_expired_if_not_cleaned_up;
    c.incremental_cleanup = cowstate::StateTtlConfig::IncrementalCleanup{5, true};
    c.full_snapshot_cleanup = true;
    return cowstate::StateOptions{c};
  }
  WithTtl() {
    for (std::uint64_t k = 0; k < 200; ++k) {
      clock.set(kStart + static_cast<std::int64_t>(k) * 37);
      REQUIRE(b.set_current_key(k).ok());
      const auto x = static_cast<std::int64_t>(k * 13 + 1);
      value.update(x);
      list.set_current_namespace(static_cast<std::int32_t>(k % 4));
      list.add(x);
      list.add(-x);
      if (k % 3 == 0) map.put("m" + std::to_string(k % 11), x);
      sum.set_current_namespace(static_cast<std::int32_t>(k % 2));
      sum.add(x);
      if (k % 5 == 0) {
        average.set_current_namespace(1);
        average.add(x);
      }
    }
  }
  cowstate::ManualTtlClock clock{kStart};
  Backend b{KeyGroupRange::all(128), 128, {}, &clock};
  Value& value = b.value_state<VoidNamespaceSerializer, Int64Serializer>("value", -1, options());
  List& list = b.list_state<Int32Serializer, Int64Serializer>("list", options());
  Map& map =
      b.map_state<VoidNamespaceSerializer, StringSerializer, Int64Serializer>("map", options());
  Reducing& sum = b.reducing_state<Int32Serializer, Int64Serializer>(
      "sum", [](const std::int64_t& x, const std::int64_t& y) { return x + y; }, options());
  Average& average =
      b.aggregating_state<Int32Serializer, VectorInt64Serializer, std::int64_t, std::int64_t>(
          "average", average_function(), options());

  // Everything the five states store, last-access times included.
  auto stored() {
    return std::make_tuple(table_image(value.ttl_table()), table_image(list.ttl_table()),
                           table_image(map.ttl_table()), table_image(sum.ttl_table()),
                           table_image(average.ttl_table()));
  }
};

}  // namespace golden
