// The backend the checkpoint fuzz target restores into, and the seeds it is started from:
// one state of each kind, over 8 key groups (few maps, so an input is cheap to try).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cowstate/checkpoint.h"
#include "cowstate/keyed_state_backend.h"

namespace cowstate_fuzz {

using Backend = cowstate::KeyedStateBackend<cowstate::UInt64Serializer>;
inline constexpr std::int32_t kMaxParallelism = 8;

struct FuzzBackend {
  explicit FuzzBackend(cowstate::KeyGroupRange range = cowstate::KeyGroupRange(0, 7))
      : backend(range, kMaxParallelism,
                cowstate::MapOptions{4, 4, 1u << 30}),  // small maps: cheap inputs
        value(backend.value_state<cowstate::VoidNamespaceSerializer, cowstate::Int64Serializer>(
            "value")),
        list(backend.list_state<cowstate::Int32Serializer, cowstate::StringSerializer>("list")),
        map(backend.map_state<cowstate::VoidNamespaceSerializer, cowstate::StringSerializer,
                              cowstate::Int64Serializer>("map")),
        sum(backend.reducing_state<cowstate::Int32Serializer, cowstate::Int64Serializer>(
            "sum", [](const std::int64_t& a, const std::int64_t& b) { return a + b; })),
        counts(
            backend.aggregating_state<cowstate::VoidNamespaceSerializer,
                                      cowstate::VectorInt64Serializer, std::int64_t, std::int64_t>(
                "counts", {[] { return std::vector<std::int64_t>{}; },
                           [](const std::int64_t& in, std::vector<std::int64_t> acc) {
                             acc.push_back(in);
                             return acc;
                           },
                           [](const std::vector<std::int64_t>& acc) {
                             return static_cast<std::int64_t>(acc.size());
                           },
                           [](std::vector<std::int64_t> a, const std::vector<std::int64_t>& b) {
                             a.insert(a.end(), b.begin(), b.end());
                             return a;
                           }})) {}

  // Deterministic contents for keys 0..n-1 that the range owns.
  void populate(std::uint64_t n, std::uint64_t seed) {
    for (std::uint64_t k = 0; k < n; ++k) {
      if (!backend.set_current_key(k * 7 + seed).ok()) continue;
      const auto x = static_cast<std::int64_t>(k ^ seed);
      value.update(x);
      list.set_current_namespace(static_cast<std::int32_t>(k % 3));
      list.add("e" + std::to_string(k));
      if (k % 2 == 0) map.put("m" + std::to_string(k % 5), x);
      sum.add(x);
      if (k % 3 == 0) counts.add(x);
    }
  }

  Backend backend;
  cowstate::ValueState<Backend, cowstate::VoidNamespaceSerializer, cowstate::Int64Serializer>&
      value;
  cowstate::ListState<Backend, cowstate::Int32Serializer, cowstate::StringSerializer>& list;
  cowstate::MapState<Backend, cowstate::VoidNamespaceSerializer, cowstate::StringSerializer,
                     cowstate::Int64Serializer>& map;
  cowstate::ReducingState<Backend, cowstate::Int32Serializer, cowstate::Int64Serializer>& sum;
  cowstate::AggregatingState<Backend, cowstate::VoidNamespaceSerializer,
                             cowstate::VectorInt64Serializer, std::int64_t, std::int64_t>& counts;
};

// A checkpoint of `b`.
inline std::vector<std::byte> checkpoint_of(FuzzBackend& b, std::uint64_t id,
                                            cowstate::Compression compression) {
  cowstate::MemoryCheckpointSink sink;
  cowstate::CheckpointWriter w(b.backend.snapshot(id), &sink, {compression, 1});
  while (!w.step(32)) {
  }
  return sink.take();
}

}  // namespace cowstate_fuzz
