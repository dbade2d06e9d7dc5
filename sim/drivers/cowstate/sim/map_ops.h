// The operations on one CowStateMap, listed once for every driver that draws them: the
// isolation run and the real-thread stress test (isolation.h), the RapidCheck property
// (tests/map_property_test.cc) and the map simulator's writer (sim/src/map/), whose
// scenario actions are these kinds by name. A driver draws a kind with kind_at() from its
// OpWeights and applies a keyed kind with the step functions of map_steps.h; what data goes
// with it (keys, states, budgets) is the driver's own.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "cowstate/sim/random.h"

namespace cowstate::sim {

enum class OpKind : std::uint8_t {
  put,
  put_and_get_old,
  remove,
  remove_and_get_old,
  get,
  contains,
  get_mutable,
  transform,
  snapshot_start,
  snapshot_release,
  visit,
};

inline constexpr std::size_t kOpKindCount = 11;

inline constexpr std::array<OpKind, kOpKindCount> kOpKinds = {OpKind::put,
                                                              OpKind::put_and_get_old,
                                                              OpKind::remove,
                                                              OpKind::remove_and_get_old,
                                                              OpKind::get,
                                                              OpKind::contains,
                                                              OpKind::get_mutable,
                                                              OpKind::transform,
                                                              OpKind::snapshot_start,
                                                              OpKind::snapshot_release,
                                                              OpKind::visit};

inline const char* to_text(OpKind kind) noexcept {
  switch (kind) {
    case OpKind::put:
      return "put";
    case OpKind::put_and_get_old:
      return "put_and_get_old";
    case OpKind::remove:
      return "remove";
    case OpKind::remove_and_get_old:
      return "remove_and_get_old";
    case OpKind::get:
      return "get";
    case OpKind::contains:
      return "contains";
    case OpKind::get_mutable:
      return "get_mutable";
    case OpKind::transform:
      return "transform";
    case OpKind::snapshot_start:
      return "snapshot_start";
    case OpKind::snapshot_release:
      return "snapshot_release";
    case OpKind::visit:
      return "visit";
  }
  return "?";
}

// Whether a kind acts on one (key, namespace): all but the snapshot kinds and visit.
constexpr bool names_key(OpKind kind) noexcept {
  return kind != OpKind::snapshot_start && kind != OpKind::snapshot_release &&
         kind != OpKind::visit;
}

// Relative weights of the operations a step draws; 0 switches one off (swarm testing).
struct OpWeights {
  std::uint32_t put = 10;
  std::uint32_t put_and_get_old = 6;
  std::uint32_t remove = 5;
  std::uint32_t remove_and_get_old = 4;
  std::uint32_t get = 6;
  std::uint32_t contains = 3;
  std::uint32_t get_mutable = 8;
  std::uint32_t transform = 6;
  std::uint32_t snapshot_start = 3;
  std::uint32_t snapshot_release = 3;
  std::uint32_t visit = 2;

  bool operator==(const OpWeights&) const = default;
};

// The field of each kind's weight, in OpKind order.
inline constexpr std::array<std::uint32_t OpWeights::*, kOpKindCount> kWeightFields = {
    &OpWeights::put,
    &OpWeights::put_and_get_old,
    &OpWeights::remove,
    &OpWeights::remove_and_get_old,
    &OpWeights::get,
    &OpWeights::contains,
    &OpWeights::get_mutable,
    &OpWeights::transform,
    &OpWeights::snapshot_start,
    &OpWeights::snapshot_release,
    &OpWeights::visit};

// The weight of one kind, to read or set.
inline std::uint32_t& weight_of(OpWeights& w, OpKind kind) noexcept {
  return w.*kWeightFields[static_cast<std::size_t>(kind)];
}
inline std::uint32_t weight_of(const OpWeights& w, OpKind kind) noexcept {
  return w.*kWeightFields[static_cast<std::size_t>(kind)];
}

// The weights in OpKind order.
inline std::array<std::uint32_t, kOpKindCount> weight_table(const OpWeights& w) noexcept {
  std::array<std::uint32_t, kOpKindCount> table{};
  for (std::size_t i = 0; i < kOpKindCount; ++i) table[i] = weight_of(w, kOpKinds[i]);
  return table;
}

// The sum of the weights: 0 means no operation can be drawn.
inline std::uint32_t total_weight(const OpWeights& w) noexcept {
  std::uint32_t total = 0;
  for (const std::uint32_t x : weight_table(w)) total += x;
  return total;
}

// The kind a draw of `pick` in [0, total_weight(w)) selects: the kinds in OpKind order, each
// over as many values as its weight. REQUIRES: pick < total_weight(w).
inline OpKind kind_at(const OpWeights& w, std::uint64_t pick) noexcept {
  return static_cast<OpKind>(weighted_index(weight_table(w), pick));
}

}  // namespace cowstate::sim
