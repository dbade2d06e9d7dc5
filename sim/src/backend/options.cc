// The backend workload's options; see cowstate/sim/backend_options.h.
#include <iterator>
#include <string>
#include <tuple>

#include "core/option_items.h"
#include "cowstate/cow_state_map.h"
#include "cowstate/sim/backend_options.h"
#include "cowstate/sim/random.h"

namespace cowstate::sim {

using detail::parse_items;
using detail::parse_u32;

namespace {
// The bytes the maps of an empty backend of `groups` key groups account for (five states,
// one map each per key group), measured on a map of the same capacities.
std::uint64_t empty_backend_bytes(std::uint32_t groups, std::uint32_t initial, std::uint32_t min,
                                  std::uint32_t max) {
  const CowStateMap<std::uint64_t, std::int32_t, std::int64_t> m(
      MapOptions{.initial_capacity = initial, .min_capacity = min, .max_capacity = max});
  return std::uint64_t{5} * groups * m.memory_bytes();
}
// The options as `key=value` words: the weights first, then the scalars.
constexpr const char* kWeightNames[] = {"w_value",    "w_list",        "w_map",
                                        "w_reducing", "w_aggregating", "w_checkpoint"};
static_assert(std::size(kWeightNames) ==
              std::tuple_size_v<decltype(BackendWorkloadOptions::weights)>);
struct BackendField {
  const char* name;
  std::uint32_t BackendWorkloadOptions::*member;
};
constexpr BackendField kBackendFields[] = {
    {"keys", &BackendWorkloadOptions::keys},
    {"namespaces", &BackendWorkloadOptions::namespaces},
    {"max_parallelism", &BackendWorkloadOptions::max_parallelism},
    {"key_group_first", &BackendWorkloadOptions::key_group_first},
    {"key_group_last", &BackendWorkloadOptions::key_group_last},
    {"initial_capacity", &BackendWorkloadOptions::initial_capacity},
    {"min_capacity", &BackendWorkloadOptions::min_capacity},
    {"max_capacity", &BackendWorkloadOptions::max_capacity},
    {"live_checkpoints_max", &BackendWorkloadOptions::live_checkpoints_max},
    {"step_entries_max", &BackendWorkloadOptions::step_entries_max},
    {"cancel_percent", &BackendWorkloadOptions::cancel_percent},
    {"fault_percent", &BackendWorkloadOptions::fault_percent},
    {"fault_within", &BackendWorkloadOptions::fault_within},
    {"power_loss_percent", &BackendWorkloadOptions::power_loss_percent},
    {"read_fault_percent", &BackendWorkloadOptions::read_fault_percent},
    {"write_fault_percent", &BackendWorkloadOptions::write_fault_percent},
    {"async_io", &BackendWorkloadOptions::async_io},
    {"io_buffer_bytes", &BackendWorkloadOptions::io_buffer_bytes},
    {"deep_check_every", &BackendWorkloadOptions::deep_check_every}};
// Written only when ttl_ms != 0, so runs without TTL print as they always did.
constexpr BackendField kTtlFields[] = {
    {"ttl_ms", &BackendWorkloadOptions::ttl_ms},
    {"ttl_update", &BackendWorkloadOptions::ttl_update},
    {"ttl_visibility", &BackendWorkloadOptions::ttl_visibility},
    {"ttl_cleanup", &BackendWorkloadOptions::ttl_cleanup},
    {"ttl_key_switch", &BackendWorkloadOptions::ttl_key_switch},
    {"ttl_full_snapshot", &BackendWorkloadOptions::ttl_full_snapshot}};
// Written only when budget_bytes != 0, so runs without a budget print as they always did.
constexpr BackendField kSpillFields[] = {
    {"budget_bytes", &BackendWorkloadOptions::budget_bytes},
    {"spill_check", &BackendWorkloadOptions::spill_check},
    {"cold_cache_percent", &BackendWorkloadOptions::cold_cache_percent},
    {"spill_percent", &BackendWorkloadOptions::spill_percent}};

// The field named `key`, or nullptr.
std::uint32_t* backend_field(BackendWorkloadOptions& o, std::string_view key) {
  if (key == "ops_max") return &o.ops_max;
  for (std::size_t i = 0; i < std::size(kWeightNames); ++i) {
    if (key == kWeightNames[i]) return &o.weights[i];
  }
  for (const BackendField& f : kBackendFields) {
    if (key == f.name) return &(o.*f.member);
  }
  for (const BackendField& f : kTtlFields) {
    if (key == f.name) return &(o.*f.member);
  }
  for (const BackendField& f : kSpillFields) {
    if (key == f.name) return &(o.*f.member);
  }
  if (key == "incremental") return &o.incremental;
  return nullptr;
}
}  // namespace

BackendWorkloadOptions BackendWorkloadOptions::swarm(std::uint64_t seed, std::uint32_t ops_max,
                                                     std::uint32_t deep_check_every) {
  BackendWorkloadOptions o{.ops_max = ops_max, .deep_check_every = deep_check_every};
  Prng rng(derive_seed(seed, 0xbac));
  // Each state kind is switched off with probability 1/5 (one stays on); checkpoints stay on.
  for (std::size_t i = 0; i < 5; ++i) {
    o.weights[i] = rng.chance(1, 5) ? 0 : static_cast<std::uint32_t>(rng.between(1, 30));
  }
  if (o.weights[0] + o.weights[1] + o.weights[2] + o.weights[3] + o.weights[4] == 0) {
    o.weights[rng.below(5)] = 10;
  }
  o.weights[5] = static_cast<std::uint32_t>(rng.between(1, 6));
  static constexpr std::uint32_t kKeySpaces[] = {4, 8, 16, 32, 64, 200};
  o.keys = kKeySpaces[rng.below(std::size(kKeySpaces))];
  o.namespaces = static_cast<std::uint32_t>(rng.between(1, 3));
  static constexpr std::uint32_t kParallelism[] = {2, 4, 8, 16, 128};
  o.max_parallelism = kParallelism[rng.below(std::size(kParallelism))];
  // The backend's range: everything, or a sub-range of at least two key groups.
  o.key_group_first = 0;
  o.key_group_last = o.max_parallelism - 1;
  if (rng.chance(1, 3)) {
    o.key_group_first = static_cast<std::uint32_t>(rng.below(o.max_parallelism / 2));
    o.key_group_last =
        static_cast<std::uint32_t>(rng.between(o.key_group_first + 1, o.max_parallelism - 1));
  }
  static constexpr std::uint32_t kCapacities[] = {1, 2, 4, 8, 64};
  o.min_capacity = kCapacities[rng.below(4)];
  o.initial_capacity = kCapacities[rng.below(std::size(kCapacities))];
  o.max_capacity =
      rng.chance(1, 4) ? static_cast<std::uint32_t>(1u << rng.between(0, 3)) : (1u << 30);
  o.live_checkpoints_max = static_cast<std::uint32_t>(rng.between(1, 3));
  o.step_entries_max = static_cast<std::uint32_t>(rng.between(1, 8));
  o.cancel_percent = static_cast<std::uint32_t>(rng.below(30));
  o.fault_percent = static_cast<std::uint32_t>(rng.below(30));
  o.fault_within = static_cast<std::uint32_t>(rng.between(1, 16));
  // Power losses and read faults, from their own stream.
  Prng disk(derive_seed(seed, 0xd15c));
  o.power_loss_percent = static_cast<std::uint32_t>(disk.below(11));
  o.read_fault_percent = static_cast<std::uint32_t>(disk.below(101));
  o.write_fault_percent = static_cast<std::uint32_t>(disk.below(31));
  o.async_io = disk.chance(1, 2) ? 1 : 0;
  static constexpr std::uint32_t kIoBuffers[] = {16, 64, 512, 4096};
  o.io_buffer_bytes = kIoBuffers[disk.below(std::size(kIoBuffers))];
  // TTL on half of the seeds, from its own stream (the draws above stay as they were).
  Prng ttl(derive_seed(seed, 0x771));
  if (ttl.chance(1, 2)) {
    static constexpr std::uint32_t kTtls[] = {1, 3, 5, 10, 40, 100};
    o.ttl_ms = kTtls[ttl.below(std::size(kTtls))];
    o.ttl_update = ttl.chance(1, 2) ? 1 : 0;
    o.ttl_visibility = ttl.chance(1, 2) ? 1 : 0;
    static constexpr std::uint32_t kCleanups[] = {0, 1, 2, 5, 16};
    o.ttl_cleanup = kCleanups[ttl.below(std::size(kCleanups))];
    o.ttl_key_switch = o.ttl_cleanup != 0 && ttl.chance(1, 3) ? 1 : 0;
    o.ttl_full_snapshot = ttl.chance(1, 2) ? 1 : 0;
  }
  // A memory budget on half of the seeds, from its own stream: the footprint of the empty
  // backend's maps plus a little room per map, so that spills and loads come every few
  // dozen operations; the manager checks at every key switch or every few.
  Prng spill(derive_seed(seed, 0x5b111));
  if (spill.chance(1, 2)) {
    static constexpr std::uint32_t kRoomPerMap[] = {64, 256, 1024, 4096};
    const std::uint32_t groups = o.key_group_last - o.key_group_first + 1;
    o.budget_bytes = static_cast<std::uint32_t>(
        empty_backend_bytes(groups, o.initial_capacity, o.min_capacity, o.max_capacity) * 2 +
        std::uint64_t{5} * groups * kRoomPerMap[spill.below(std::size(kRoomPerMap))]);
    static constexpr std::uint32_t kChecks[] = {1, 1, 4, 16};
    o.spill_check = kChecks[spill.below(std::size(kChecks))];
    static constexpr std::uint32_t kCaches[] = {0, 5, 25};
    o.cold_cache_percent = kCaches[spill.below(std::size(kCaches))];
    o.spill_percent = static_cast<std::uint32_t>(spill.below(11));
  }
  // Incremental checkpoints on half of the seeds, from their own stream, chains of 2 to 5.
  // Half of those keep their write faults; the other half draw none, so that every
  // checkpoint of their chains stays intact and each restore path of a chain comes often.
  Prng inc(derive_seed(seed, 0x1c4e));
  if (inc.chance(1, 2)) {
    o.incremental = static_cast<std::uint32_t>(inc.between(2, 5));
    Prng chain_faults(derive_seed(seed, 0x1c4f));
    if (chain_faults.chance(1, 2)) o.write_fault_percent = 0;
  }
  return o;
}

std::string BackendWorkloadOptions::to_string() const {
  std::string out = "ops_max=" + std::to_string(ops_max);
  for (std::size_t i = 0; i < std::size(kWeightNames); ++i) {
    out += " " + std::string(kWeightNames[i]) + "=" + std::to_string(weights[i]);
  }
  for (const BackendField& f : kBackendFields) {
    out += " " + std::string(f.name) + "=" + std::to_string(this->*f.member);
  }
  if (ttl_ms != 0) {
    for (const BackendField& f : kTtlFields) {
      out += " " + std::string(f.name) + "=" + std::to_string(this->*f.member);
    }
  }
  if (budget_bytes != 0) {
    for (const BackendField& f : kSpillFields) {
      out += " " + std::string(f.name) + "=" + std::to_string(this->*f.member);
    }
  }
  if (incremental != 0) out += " incremental=" + std::to_string(incremental);
  return out;
}

std::optional<BackendWorkloadOptions> BackendWorkloadOptions::parse(std::string_view line,
                                                                    std::string* error) {
  BackendWorkloadOptions o;
  const bool parsed =
      parse_items(line, error, [&o](std::string_view key, std::string_view value, bool* ok) {
        std::uint32_t* field = backend_field(o, key);
        if (field != nullptr) *ok = parse_u32(value, field);
        return field != nullptr;
      });
  if (!parsed) return std::nullopt;
  std::uint32_t state_weights = 0;
  for (std::size_t i = 0; i < 5; ++i) state_weights += o.weights[i];
  if (o.keys == 0 || o.namespaces == 0 || o.ops_max == 0 || o.min_capacity == 0 ||
      o.max_capacity == 0 || o.max_capacity > (1u << 30) || o.step_entries_max == 0 ||
      o.live_checkpoints_max == 0 || o.cancel_percent > 100 || o.fault_percent > 100 ||
      o.power_loss_percent > 100 || o.read_fault_percent > 100 || o.write_fault_percent > 100 ||
      o.async_io > 1 || o.io_buffer_bytes == 0 || o.fault_within == 0 || state_weights == 0 ||
      o.max_parallelism == 0 || o.max_parallelism > 32768 || o.key_group_first > o.key_group_last ||
      o.key_group_last >= o.max_parallelism || o.ttl_update > 1 || o.ttl_visibility > 1 ||
      o.ttl_key_switch > 1 || o.ttl_full_snapshot > 1 ||
      (o.ttl_key_switch == 1 && o.ttl_cleanup == 0) || o.cold_cache_percent > 80 ||
      o.spill_percent > 100 || o.spill_check > (1u << 30) || o.incremental > 1000) {
    *error =
        "options out of range (keys, namespaces, ops_max, capacities, step_entries_max, "
        "live_checkpoints_max, fault_within, io_buffer_bytes, max_parallelism and a state "
        "weight must be >= 1; async_io 0 or 1; "
        "max_capacity <= 2^30; percentages <= 100; key_group_first <= key_group_last < "
        "max_parallelism <= 32768; TTL flags 0 or 1; ttl_key_switch=1 needs ttl_cleanup >= 1; "
        "cold_cache_percent <= 80; spill_check <= 2^30; incremental <= 1000)";
    return std::nullopt;
  }
  return o;
}

}  // namespace cowstate::sim
