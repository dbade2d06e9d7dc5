// The map workload's options; see cowstate/sim/map_options.h.
#include <string>

#include "core/option_items.h"
#include "cowstate/sim/map_options.h"
#include "cowstate/sim/random.h"

namespace cowstate::sim {

using detail::parse_items;
using detail::parse_u32;

namespace {
// The scalar fields, in print order, for to_string() and parse().
template <class F>
void for_each_field(MapWorkloadOptions& o, F&& f) {
  f("ops_max", o.ops_max);
  f("keys", o.keys);
  f("namespaces", o.namespaces);
  f("hot_keys", o.hot_keys);
  f("hot_percent", o.hot_percent);
  f("initial_capacity", o.initial_capacity);
  f("min_capacity", o.min_capacity);
  f("max_capacity", o.max_capacity);
  f("value_len_max", o.value_len_max);
  f("live_snapshots_max", o.live_snapshots_max);
  f("step_entries_max", o.step_entries_max);
  f("cancel_percent", o.cancel_percent);
  f("deep_check_every", o.deep_check_every);
}
constexpr auto kFields = [](auto& o, auto&& f) { for_each_field(o, f); };
}  // namespace

MapWorkloadOptions MapWorkloadOptions::swarm(std::uint64_t seed, std::uint32_t ops_max,
                                             std::uint32_t deep_check_every) {
  Prng rng(derive_seed(seed, 0x5aa));
  MapWorkloadOptions o;
  o.ops_max = ops_max;
  o.deep_check_every = deep_check_every;
  // Each non-essential operation is switched off with probability 1/4; the rest get a
  // weight in [1, 40]. put and snapshot stay on: without them nothing happens.
  for (const OpKind op : kWriterOps) {
    const bool essential = op == OpKind::put || op == OpKind::snapshot_start;
    weight_of(o.weights, op) =
        (!essential && rng.chance(1, 4)) ? 0 : static_cast<std::uint32_t>(rng.between(1, 40));
  }
  o.weights.snapshot_start = static_cast<std::uint32_t>(rng.between(1, 8));
  static constexpr std::uint32_t kKeySpaces[] = {2, 4, 8, 16, 32, 64, 200};
  o.keys = kKeySpaces[rng.below(std::size(kKeySpaces))];
  o.namespaces = static_cast<std::uint32_t>(rng.between(1, 3));
  if (rng.chance(1, 3)) {
    o.hot_keys = static_cast<std::uint32_t>(rng.between(1, 3));
    o.hot_percent = static_cast<std::uint32_t>(rng.between(50, 90));
  }
  static constexpr std::uint32_t kCapacities[] = {1, 2, 4, 8, 64};
  o.min_capacity = kCapacities[rng.below(4)];
  o.initial_capacity = kCapacities[rng.below(std::size(kCapacities))];
  o.max_capacity =
      rng.chance(1, 4) ? static_cast<std::uint32_t>(1u << rng.between(0, 3)) : (1u << 30);
  o.identity_hash = rng.chance(1, 3);
  o.value_len_max = static_cast<std::uint32_t>(rng.between(0, 6));
  o.live_snapshots_max = static_cast<std::uint32_t>(rng.between(1, 4));
  o.step_entries_max = static_cast<std::uint32_t>(rng.between(1, 8));
  o.cancel_percent = static_cast<std::uint32_t>(rng.below(40));
  o.track_changes = rng.chance(1, 2);  // drawn last: the draws above stay as they were
  return o;
}

std::string MapWorkloadOptions::to_string() const {
  std::string out = detail::field_items(*this, kFields);
  out += " identity_hash=";
  out += identity_hash ? "1" : "0";
  if (track_changes) out += " track_changes=1";
  out += " weights=";
  for (const OpKind op : kWriterOps) {
    if (op != kWriterOps.front()) out += ',';
    out += op_word(op);
    out += ':';
    out += std::to_string(weight_of(weights, op));
  }
  return out;
}

std::optional<MapWorkloadOptions> MapWorkloadOptions::parse(std::string_view line,
                                                            std::string* error) {
  MapWorkloadOptions o;
  const bool parsed =
      parse_items(line, error, [&o](std::string_view key, std::string_view value, bool* ok) {
        bool known = detail::assign_field(o, kFields, key, value, ok);
        if (key == "identity_hash") {
          known = true;
          *ok = value == "0" || value == "1";
          o.identity_hash = value == "1";
        } else if (key == "track_changes") {
          known = true;
          *ok = value == "0" || value == "1";
          o.track_changes = value == "1";
        } else if (key == "weights") {
          known = true;
          std::size_t i = 0;
          std::size_t p = 0;
          while (*ok && p <= value.size() && i < kWriterOps.size()) {
            std::size_t comma = value.find(',', p);
            if (comma == std::string_view::npos) comma = value.size();
            const std::string_view w = value.substr(p, comma - p);
            const std::size_t colon = w.find(':');
            *ok = colon != std::string_view::npos && w.substr(0, colon) == op_word(kWriterOps[i]) &&
                  parse_u32(w.substr(colon + 1), &weight_of(o.weights, kWriterOps[i]));
            ++i;
            p = comma + 1;
          }
          *ok = *ok && i == kWriterOps.size() && p == value.size() + 1;
        }
        return known;
      });
  if (!parsed) return std::nullopt;
  if (o.keys == 0 || o.namespaces == 0 || o.ops_max == 0 || o.min_capacity == 0 ||
      o.max_capacity == 0 || o.max_capacity > (1u << 30) || o.step_entries_max == 0 ||
      o.live_snapshots_max == 0 || o.cancel_percent > 100 || o.hot_percent > 100) {
    *error =
        "options out of range (keys, namespaces, ops_max, capacities, step_entries_max and "
        "live_snapshots_max must be >= 1; max_capacity <= 2^30; percentages <= 100)";
    return std::nullopt;
  }
  return o;
}

}  // namespace cowstate::sim
