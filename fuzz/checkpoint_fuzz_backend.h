// The backend the checkpoint fuzz target restores into, and the seeds it is started from:
// one state of each kind, over 8 key groups (few maps, so an input is cheap to try).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
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

// Everything `b` holds, state by state, by (key, namespace).
template <class Handle>
auto image_of(Handle& h) {
  auto& table = h.table();
  std::map<std::pair<typename std::remove_reference_t<decltype(table)>::K,
                     typename std::remove_reference_t<decltype(table)>::N>,
           typename std::remove_reference_t<decltype(table)>::S>
      out;
  for (std::int32_t g = table.range().start(); g <= table.range().end(); ++g) {
    table.map(g).for_each([&](const auto& k, const auto& ns, const auto& s) {
      out.emplace(std::make_pair(k, ns), s);
    });
  }
  return out;
}
inline auto image(FuzzBackend& b) {
  return std::make_tuple(image_of(b.value), image_of(b.list), image_of(b.map), image_of(b.sum),
                         image_of(b.counts));
}

// What a seed was made from, carried in its checkpoint id so that the fuzz target knows what
// an input that passes every check must restore to: the backend of key groups first..last
// after populate(n, seed). Ids with bit 62 clear carry nothing.
struct Provenance {
  std::uint16_t n = 0;
  std::uint16_t seed = 0;
  std::uint8_t first = 0;
  std::uint8_t last = kMaxParallelism - 1;
};
inline constexpr std::uint64_t kProvenanceTag = std::uint64_t{1} << 62;
inline std::uint64_t provenance_id(Provenance p) {
  return kProvenanceTag | p.n | (std::uint64_t{p.seed} << 16) | (std::uint64_t{p.first} << 32) |
         (std::uint64_t{p.last} << 40);
}
inline std::optional<Provenance> provenance_of(std::uint64_t id) {
  if ((id >> 48) != (kProvenanceTag >> 48)) return std::nullopt;
  Provenance p{static_cast<std::uint16_t>(id), static_cast<std::uint16_t>(id >> 16),
               static_cast<std::uint8_t>(id >> 32), static_cast<std::uint8_t>(id >> 40)};
  if (p.first > p.last || p.last >= kMaxParallelism) return std::nullopt;
  return p;
}
// The backend a provenance names.
inline std::unique_ptr<FuzzBackend> known_backend(Provenance p) {
  auto b = std::make_unique<FuzzBackend>(cowstate::KeyGroupRange(p.first, p.last));
  b->populate(p.n, p.seed);
  return b;
}

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
