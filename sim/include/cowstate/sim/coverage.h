// The copy-on-write coverage of a campaign, after FoundationDB's code probes: for every
// reason the map copies, retires or reclaims memory, every fault the testbed injects and
// every yield point, how often a campaign hit it, in how many runs, and the first run that
// did. A reason no run hit is listed as never hit, so a campaign shows what it did not test.
//
// Where the counts come from: production code names each event with COWSTATE_PROBE("name")
// (cowstate/hooks.h; nothing in a build without simulator hooks), a workload names its own
// (faults, cancels) with SimCore::probe, and every yield point taken counts under its name.
// SimCore adds them to RunStats::coverage, which campaigns, explorations and `cowstate
// merge` add up like every other count. Counting never writes a trace line and never asks
// the choice source for anything, so traces and their hashes do not depend on it.
//
// Adding a reason (spill and load, for instance): one X line below, and COWSTATE_PROBE or
// SimCore::probe with that name where it happens. A probe whose name is not here is a
// programmer error (assertion T5), so the catalog cannot fall behind the code.
//
// Invariants:
//   1. The catalog's order is the report's order and the index of every count; names are
//      unique.
//   2. A report's first run of a reason is the lowest run index (subtree, for explore) whose
//      counts include it, whatever order the runs were added in, so shards merge to the
//      unsharded campaign's report.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace cowstate::sim {

struct ScenarioLanguage;

// What a workload needs to reach a reason (its ScenarioLanguage says what it has).
enum class CoverageNeeds : std::uint8_t {
  any,             // every workload with a map
  map_serializer,  // snapshots serialized by the map's SnapshotWriter (no checkpoints)
  checkpoints,     // snapshots are checkpoints on storage
  storage_faults,  // the simulated disk and its faults
};
enum class CoverageKind : std::uint8_t { copy, fault, yield };

// X(name, kind, needs, what it means)
#define COWSTATE_COVERAGE_CATALOG(X)                                                               \
  X("cow.entry_copy", copy, any, "a chain head a snapshot sees, copied before a write")            \
  X("cow.chain_prefix_copy", copy, any,                                                            \
    "a chain prefix copied up to an entry a snapshot sees, before a write")                        \
  X("cow.state_copy", copy, any, "a state a snapshot sees, copied before a mutable hand-out")      \
  X("cow.rehash_copy", copy, any, "an entry a snapshot sees, copied as a rehash moves it")         \
  X("cow.retire", copy, any, "an entry or state a snapshot sees, retired instead of freed")        \
  X("cow.reclaim", copy, any, "retired memory freed after the snapshots that saw it went")         \
  X("cow.snapshot_during_rehash", copy, any, "a snapshot started while a rehash is in flight")     \
  X("cow.cancel_mid_step", copy, any, "a snapshot cancelled inside a serializer step")             \
  X("cow.segment_copy", copy, any, "a bucket-head or live-slot segment a snapshot shares, copied") \
  X("tier.spill", copy, checkpoints, "a (state, key group) map moved to the cold tier")            \
  X("tier.spill_under_snapshot", copy, checkpoints,                                                \
    "a spilled map retired, not freed, because a live snapshot reads it")                          \
  X("tier.load", copy, checkpoints, "a cold (state, key group) loaded back into a heap map")       \
  X("fault.io_error", fault, storage_faults, "an injected I/O error failed a checkpoint")          \
  X("fault.read_flip", fault, storage_faults, "a read returned a flipped bit")                     \
  X("fault.read_zero", fault, storage_faults, "a read returned a zeroed sector")                   \
  X("fault.read_misdirect", fault, storage_faults, "a read returned another place's bytes")        \
  X("fault.read_short", fault, storage_faults, "a read returned fewer bytes")                      \
  X("fault.read_manifest", fault, storage_faults, "a read of a manifest returned a flipped bit")   \
  X("fault.lost_write", fault, storage_faults, "an acknowledged write never reached the disk")     \
  X("fault.misdirected_write", fault, storage_faults, "a write landed at another offset")          \
  X("fault.power_loss", fault, storage_faults, "a power loss and a restart from storage")          \
  X("fault.crash_state", fault, storage_faults,                                                    \
    "a restart from a disk where not-yet-durable operations were lost, kept or torn")              \
  X("map.copy_chain_prefix", yield, any, "yield point: between two copies of a chain prefix")      \
  X("map.insert_new", yield, any, "yield point: before a new entry is linked")                     \
  X("map.rehash_move", yield, any, "yield point: before a rehash moves an entry")                  \
  X("map.copy_segment", yield, any, "yield point: after a segment copy, before the write into it") \
  X("spill.entry", yield, checkpoints, "yield point: between two entries a spill copies")          \
  X("spill.swap", yield, checkpoints, "yield point: before a spilled map is swapped out")          \
  X("load.entry", yield, checkpoints, "yield point: between two entries a load copies")            \
  X("load.swap", yield, checkpoints, "yield point: before a loaded map is swapped in")             \
  X("map.delta_entry", yield, any,                                                                 \
    "yield point: between two changed entries a snapshot's delta read hands out")                  \
  X("snapshot_writer.entry", yield, map_serializer,                                                \
    "yield point: between two entries a snapshot writer emits")                                    \
  X("checkpoint_writer.entry", yield, checkpoints,                                                 \
    "yield point: between two entries a checkpoint writer emits")                                  \
  X("checkpoint.commit", yield, checkpoints, "yield point: between the last write and the commit")

struct CoverageProbe {
  const char* name;
  CoverageKind kind;
  CoverageNeeds needs;
  const char* meaning;
};

inline constexpr CoverageProbe kCoverageProbes[] = {
#define COWSTATE_COVERAGE_ENTRY(name, kind, needs, meaning) \
  {name, CoverageKind::kind, CoverageNeeds::needs, meaning},
    COWSTATE_COVERAGE_CATALOG(COWSTATE_COVERAGE_ENTRY)
#undef COWSTATE_COVERAGE_ENTRY
};
inline constexpr std::size_t kCoverageProbeCount = std::size(kCoverageProbes);

// The catalog index of `name`; nullopt for a name it does not have.
std::optional<std::size_t> coverage_index(std::string_view name) noexcept;
const char* coverage_kind_name(CoverageKind kind) noexcept;
// Which catalog entries a campaign's workload can hit at all, by catalog index.
using CoverageReach = std::array<bool, kCoverageProbeCount>;
// What a workload whose scenarios speak `language` can reach.
CoverageReach coverage_reach(const ScenarioLanguage& language) noexcept;

// Hits per catalog entry: one run's, or the sum of many.
struct CoverageCounts {
  std::array<std::uint64_t, kCoverageProbeCount> hits{};

  CoverageCounts& operator+=(const CoverageCounts& o) {
    for (std::size_t i = 0; i < kCoverageProbeCount; ++i) hits[i] += o.hits[i];
    return *this;
  }
  bool operator==(const CoverageCounts&) const = default;
  // {"cow.entry_copy": 3, ...}: the entries hit, by name (JSON run and summary records).
  nlohmann::json to_json() const;
  // What to_json wrote; nullopt with *error naming an unknown name or a bad count.
  static std::optional<CoverageCounts> from_json(const nlohmann::json& j, std::string* error);
};

// A campaign's report: per entry, its hits, the runs that hit it and the first of them.
class CoverageReport {
 public:
  // The counts of run (or subtree) `index`, whose seed is `seed`. Any order (Invariant 2).
  void add(std::uint64_t index, std::uint64_t seed, const CoverageCounts& counts);
  const CoverageCounts& totals() const noexcept { return totals_; }
  std::uint64_t runs_hitting(std::size_t probe) const noexcept { return runs_[probe]; }
  // The reachable entries that no run hit.
  std::size_t never_hit(const CoverageReach& reach) const noexcept;
  // One object per catalog entry, in catalog order: probe, kind, meaning, reachable, hits,
  // and the `unit`s (run or subtree) that hit it, with, when one did, the first of them
  // (first_run or first_subtree; a run's also first_seed).
  nlohmann::json to_json(const CoverageReach& reach, const char* unit) const;
  // The report for a person: one line per entry, never-hit ones marked.
  std::string to_text(const CoverageReach& reach, const char* unit) const;
  // The `reachable` fields of a to_json array (a shard summary's); nullopt with *error when
  // it is not one of this catalog.
  static std::optional<CoverageReach> reach_from_json(const nlohmann::json& report,
                                                      std::string* error);

 private:
  struct First {
    std::uint64_t index = 0, seed = 0;
  };
  CoverageCounts totals_;
  std::array<std::uint64_t, kCoverageProbeCount> runs_{};
  std::array<std::optional<First>, kCoverageProbeCount> first_{};
};

// The text of a report as CoverageReport::to_json wrote it (also a merged one).
std::string coverage_text(const nlohmann::json& report, const char* unit);

}  // namespace cowstate::sim
