// Compile-time hooks for the simulator and the mutant build. In a normal build every
// hook below expands to nothing (or `false`) and costs nothing on the hot path.
//
//   COWSTATE_YIELD("point")   a named place where the deterministic scheduler may run
//                             another task in the middle of a writer operation
//                             (only with COWSTATE_SIM_HOOKS=1).
//   COWSTATE_PROBE("name")    a named copy-on-write event (a copy, a retirement, a
//                             reclaim) that campaigns count for their coverage report
//                             (only with COWSTATE_SIM_HOOKS=1; the names are the
//                             simulator's catalog, cowstate/sim/coverage.h).
//   COWSTATE_MUTANT(name)     true when the planted bug `name` is chosen at run time, by
//                             the environment variable COWSTATE_MUTANT=name or by the
//                             simulator (only with COWSTATE_MUTANTS=1; see
//                             docs/simulation.md, Mutants).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string_view>

#if defined(COWSTATE_SIM_HOOKS) && COWSTATE_SIM_HOOKS
namespace cowstate::hooks {
// Installed by the simulator; called at every yield point with its name.
using YieldFn = void (*)(const char* point);
inline YieldFn& yield_fn() noexcept {
  static YieldFn fn = nullptr;
  return fn;
}
inline void yield(const char* point) {
  if (YieldFn fn = yield_fn()) fn(point);
}
// Installed by the simulator; called at every probe with its name.
using ProbeFn = void (*)(const char* name);
inline ProbeFn& probe_fn() noexcept {
  static ProbeFn fn = nullptr;
  return fn;
}
inline void probe(const char* name) {
  if (ProbeFn fn = probe_fn()) fn(name);
}
}  // namespace cowstate::hooks
#define COWSTATE_YIELD(point) ::cowstate::hooks::yield(point)
#define COWSTATE_PROBE(name) ::cowstate::hooks::probe(name)
#else
#define COWSTATE_YIELD(point) \
  do {                        \
  } while (0)
#define COWSTATE_PROBE(name) \
  do {                       \
  } while (0)
#endif

namespace cowstate::mutants {
// The planted bugs, by name. Exactly one (or none) is active at a time. What each one does,
// and which workload's campaigns must kill it, is the simulator's catalog
// (sim/drivers/cowstate/sim/mutants.h).
#define COWSTATE_MUTANTS_LIST(X)          \
  X(skip_chain_prefix_copy)               \
  X(entry_version_le)                     \
  X(state_version_le)                     \
  X(no_version_bump_at_snapshot)          \
  X(h_min_on_release)                     \
  X(no_copy_in_rehash)                    \
  X(shared_state_mutable)                 \
  X(free_retired_early)                   \
  X(snapshot_primary_directory_only)      \
  X(writer_drops_chain_tail)              \
  X(reader_drops_last_entry)              \
  X(restore_global_state_ids)             \
  X(snapshot_not_released_on_failure)     \
  X(key_group_wrong_hash)                 \
  X(restore_keeps_out_of_range)           \
  X(commit_ignores_cancel)                \
  X(ttl_boundary_lt)                      \
  X(ttl_cleanup_in_place)                 \
  X(ttl_full_snapshot_at_start)           \
  X(ttl_read_no_refresh)                  \
  X(ttl_empty_list_kept)                  \
  X(transform_in_place_shared)            \
  X(load_drops_chain_tail)                \
  X(rename_before_data_sync)              \
  X(no_dir_sync_after_rename)             \
  X(manifest_before_data_durable)         \
  X(restore_ignores_block_checksum)       \
  X(latest_skips_newer_complete)          \
  X(torn_header_accepted)                 \
  X(prune_removes_needed_file)            \
  X(read_ignores_file_checksum)           \
  X(segment_written_in_place)             \
  X(segment_freed_at_copy)                \
  X(live_slots_written_in_place)          \
  X(load_drops_spilled_writes)            \
  X(spill_frees_snapshot_map)             \
  X(cold_snapshot_reads_live)             \
  X(accounting_forgets_retired)           \
  X(load_loses_ttl_timestamps)            \
  X(spill_hottest_first)                  \
  X(load_skips_distinct_check)            \
  X(handout_not_logged)                   \
  X(tombstone_dropped)                    \
  X(delta_after_snapshot)                 \
  X(chain_applied_out_of_order)           \
  X(cancelled_checkpoint_resets_tracking) \
  X(prune_drops_chain_member)             \
  X(delta_restore_outside_limit)          \
  X(prune_ignores_pending_chain)

enum class Mutant : std::uint8_t {
  none = 0,
#define COWSTATE_MUTANT_ENUM(name) name,
  COWSTATE_MUTANTS_LIST(COWSTATE_MUTANT_ENUM)
#undef COWSTATE_MUTANT_ENUM
};

// Every planted bug's name, in enum order (none excluded).
inline constexpr const char* kMutantNames[] = {
#define COWSTATE_MUTANT_NAME(name) #name,
    COWSTATE_MUTANTS_LIST(COWSTATE_MUTANT_NAME)
#undef COWSTATE_MUTANT_NAME
};
inline constexpr std::size_t kMutantCount = std::size(kMutantNames);

// The name of a planted bug ("none" for none).
constexpr const char* mutant_name(Mutant m) noexcept {
  return m == Mutant::none ? "none" : kMutantNames[static_cast<std::size_t>(m) - 1];
}
// The planted bug with this name; Mutant::none when there is none.
constexpr Mutant mutant_named(std::string_view name) noexcept {
  for (std::size_t i = 0; i < kMutantCount; ++i) {
    if (name == kMutantNames[i]) return static_cast<Mutant>(i + 1);
  }
  return Mutant::none;
}
}  // namespace cowstate::mutants

// Only the mutants build can switch a planted bug on; elsewhere the catalog is just names
// (so scenario files can be checked for the mutant they name).
#if defined(COWSTATE_MUTANTS) && COWSTATE_MUTANTS
namespace cowstate::mutants {
// The planted bug the environment variable COWSTATE_MUTANT names, so that any binary of the
// mutants build (the unit suites under ctest included) runs under it; unset or empty: none.
// An unknown name ends the process with exit status 2 and the catalog's names, as any other
// bad input would: a test run under a misspelt mutant must not pass as if it had killed it.
inline Mutant mutant_from_environment() noexcept {
  const char* name = std::getenv("COWSTATE_MUTANT");
  if (name == nullptr || *name == '\0' || std::string_view(name) == "none") return Mutant::none;
  const Mutant m = mutant_named(name);
  if (m == Mutant::none) {
    std::fprintf(stderr, "COWSTATE_MUTANT=%s: no planted bug has that name; the catalog:", name);
    for (const char* known : kMutantNames) std::fprintf(stderr, " %s", known);
    std::fprintf(stderr, "\n");
    std::exit(2);
  }
  return m;
}
inline Mutant& active() noexcept {
  static Mutant m = mutant_from_environment();
  return m;
}
// Whether the active planted bug leaves the map's memory rules alone (checkpoint files,
// storage, restore, TTL decisions): then freed states go back to their pool as in a normal
// build. Under any other, a map quarantines freed states so that a snapshot reading one reads
// an empty state instead of freed memory; a planted bug added later is quarantined too.
inline bool keeps_map_memory_rules() noexcept {
  switch (active()) {
    case Mutant::none:
    case Mutant::reader_drops_last_entry:
    case Mutant::restore_global_state_ids:
    case Mutant::snapshot_not_released_on_failure:
    case Mutant::key_group_wrong_hash:
    case Mutant::restore_keeps_out_of_range:
    case Mutant::commit_ignores_cancel:
    case Mutant::ttl_boundary_lt:
    case Mutant::ttl_full_snapshot_at_start:
    case Mutant::ttl_read_no_refresh:
    case Mutant::ttl_empty_list_kept:
    case Mutant::load_drops_chain_tail:
    case Mutant::rename_before_data_sync:
    case Mutant::no_dir_sync_after_rename:
    case Mutant::manifest_before_data_durable:
    case Mutant::restore_ignores_block_checksum:
    case Mutant::latest_skips_newer_complete:
    case Mutant::torn_header_accepted:
    case Mutant::prune_removes_needed_file:
    case Mutant::read_ignores_file_checksum:
    case Mutant::load_drops_spilled_writes:
    case Mutant::cold_snapshot_reads_live:
    case Mutant::accounting_forgets_retired:
    case Mutant::load_loses_ttl_timestamps:
    case Mutant::spill_hottest_first:
    case Mutant::load_skips_distinct_check:
    case Mutant::handout_not_logged:
    case Mutant::tombstone_dropped:
    case Mutant::chain_applied_out_of_order:
    case Mutant::cancelled_checkpoint_resets_tracking:
    case Mutant::prune_drops_chain_member:
    case Mutant::delta_restore_outside_limit:
    case Mutant::prune_ignores_pending_chain:
      return true;
    default:
      return false;
  }
}
}  // namespace cowstate::mutants
#define COWSTATE_MUTANT(name) (::cowstate::mutants::active() == ::cowstate::mutants::Mutant::name)
#else
#define COWSTATE_MUTANT(name) false
#endif
