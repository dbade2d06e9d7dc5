// RapidCheck property: random operations on a value state and a list state with a TTL, on
// a manual clock that often lands exactly on expiry boundaries, against a tiny reference
// model of Flink's TTL semantics. Every read, every checkpoint + restore and every full
// cleanup is compared.
//
// The model is deterministic because the property keeps what it cannot predict
// unobservable: incremental cleanup on access (which entries it visits depends on hashing)
// is configured only with NeverReturnExpired, where removing an expired value early
// changes no read. An explicit cleanup op drives cleanup over every entry (few keys, few
// key groups), so the model drops everything expired. A checkpoint is written at one
// instant, so full-snapshot cleanup drops exactly what is expired then.
#include <rapidcheck/catch.h>

#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <utility>
#include <vector>

#include "cowstate/checkpoint.h"
#include "cowstate/keyed_state_backend.h"
#include "cowstate/serializers.h"
#include "cowstate/ttl.h"

namespace {

using Backend = cowstate::KeyedStateBackend<cowstate::UInt64Serializer>;
using cowstate::StateTtlConfig;

enum class OpKind : std::uint8_t { put, get, add, get_list, clear, advance, checkpoint, cleanup };

struct Op {
  OpKind kind;
  std::uint64_t key;
  std::int64_t value;  // put, add: the value; advance: the amount
};

std::ostream& operator<<(std::ostream& os, const Op& op) {
  static constexpr const char* kNames[] = {"put",   "get",     "add",        "get_list",
                                           "clear", "advance", "checkpoint", "cleanup"};
  return os << kNames[static_cast<int>(op.kind)] << "(" << op.key << ", " << op.value << ")";
}

// Flink's TTL semantics for one value state and one list state, by key.
struct Reference {
  StateTtlConfig config;
  std::int64_t now;
  std::map<std::uint64_t, std::pair<std::int64_t, std::int64_t>> values;  // value, last access
  std::map<std::uint64_t, std::vector<std::pair<std::int64_t, std::int64_t>>> lists;

  bool expired(std::int64_t last_access) const {
    return last_access + config.ttl() <= now;  // small times: no overflow
  }
  std::int64_t get(std::uint64_t k) {
    auto it = values.find(k);
    if (it == values.end()) return -1;
    if (expired(it->second.second)) {
      const std::int64_t v = it->second.first;
      values.erase(it);
      return config.return_expired() ? v : -1;
    }
    if (config.refresh_on_read()) it->second.second = now;
    return it->second.first;
  }
  std::vector<std::int64_t> get_list(std::uint64_t k) {
    auto it = lists.find(k);
    std::vector<std::int64_t> out;
    if (it == lists.end()) return out;
    std::vector<std::pair<std::int64_t, std::int64_t>> live;
    for (const auto& [e, t] : it->second) {
      if (!expired(t) || config.return_expired()) out.push_back(e);
      if (!expired(t)) live.emplace_back(e, config.refresh_on_read() ? now : t);
    }
    if (live.empty()) {
      lists.erase(it);
    } else {
      it->second = std::move(live);
    }
    return out;
  }
  void drop_expired() {
    std::erase_if(values, [&](const auto& kv) { return expired(kv.second.second); });
    for (auto& [k, l] : lists) std::erase_if(l, [&](const auto& e) { return expired(e.second); });
    std::erase_if(lists, [](const auto& kv) { return kv.second.empty(); });
  }
};

rc::Gen<Op> gen_op(std::int64_t ttl) {
  return rc::gen::apply(
      [ttl](int kind, std::uint64_t key, std::int64_t value, int step) {
        const std::int64_t steps[] = {0, 1, ttl - 1, ttl, ttl + 1, value % (3 * ttl + 1)};
        const auto k = static_cast<OpKind>(kind);
        return Op{k, key, k == OpKind::advance ? steps[step] : value};
      },
      rc::gen::inRange(0, 8), rc::gen::inRange<std::uint64_t>(0, 3),
      rc::gen::inRange<std::int64_t>(0, 1000), rc::gen::inRange(0, 6));
}

}  // namespace

TEST_CASE("TTL reads, cleanup and checkpoints agree with a reference model at every instant",
          "[ttl][property]") {
  rc::prop("random operations on a manual clock", [] {
    StateTtlConfig config;
    config.ttl_ms = *rc::gen::element<std::uint64_t>(1, 3, 10);
    config.update_type = static_cast<StateTtlConfig::UpdateType>(*rc::gen::inRange(0, 2));
    config.visibility = static_cast<StateTtlConfig::Visibility>(*rc::gen::inRange(0, 2));
    config.full_snapshot_cleanup = *rc::gen::arbitrary<bool>();
    config.incremental_cleanup = std::nullopt;
    if (!config.return_expired() && *rc::gen::arbitrary<bool>()) {
      config.incremental_cleanup = StateTtlConfig::IncrementalCleanup{
          *rc::gen::inRange<std::uint32_t>(1, 4), *rc::gen::arbitrary<bool>()};
    }
    const auto ops = *rc::gen::container<std::vector<Op>>(gen_op(config.ttl()));

    cowstate::ManualTtlClock clock(1000);
    Backend b(cowstate::KeyGroupRange::all(8), 8, {}, &clock);
    const cowstate::StateOptions options{config};
    auto& value = b.value_state<cowstate::VoidNamespaceSerializer, cowstate::Int64Serializer>(
        "v", -1, options);
    auto& list =
        b.list_state<cowstate::VoidNamespaceSerializer, cowstate::Int64Serializer>("l", options);
    Reference ref{config, 1000, {}, {}};

    for (const Op& op : ops) {
      if (op.kind != OpKind::advance && op.kind != OpKind::checkpoint &&
          op.kind != OpKind::cleanup) {
        RC_ASSERT(b.set_current_key(op.key).ok());
      }
      switch (op.kind) {
        case OpKind::put:
          value.update(op.value);
          ref.values[op.key] = {op.value, ref.now};
          break;
        case OpKind::get:
          RC_ASSERT(value.value() == ref.get(op.key));
          break;
        case OpKind::add:
          list.add(op.value);
          ref.lists[op.key].emplace_back(op.value, ref.now);
          break;
        case OpKind::get_list:
          RC_ASSERT(list.get() == ref.get_list(op.key));
          break;
        case OpKind::clear:
          value.clear();
          list.clear();
          ref.values.erase(op.key);
          ref.lists.erase(op.key);
          break;
        case OpKind::advance:
          clock.advance(op.value);
          ref.now += op.value;
          break;
        case OpKind::checkpoint: {
          cowstate::MemoryCheckpointSink sink;
          cowstate::CheckpointWriter w(b.snapshot(1), &sink);
          while (!w.step(3)) {
          }
          RC_ASSERT(w.done());
          const cowstate::CheckpointInput in{"checkpoint", sink.bytes()};
          RC_ASSERT(b.restore({&in, 1}).ok());
          if (config.full_snapshot_cleanup) ref.drop_expired();
          break;
        }
        case OpKind::cleanup:
          value.run_ttl_cleanup(1000);
          list.run_ttl_cleanup(1000);
          ref.drop_expired();
          break;
      }
      if (!config.incremental_cleanup || op.kind == OpKind::cleanup) {
        // Nothing cleans behind the model's back: the stored entries are the model's.
        RC_ASSERT(value.ttl_table().size() == ref.values.size());
        RC_ASSERT(list.ttl_table().size() == ref.lists.size());
      }
    }
    RC_ASSERT(b.check_invariants());
  });
}
