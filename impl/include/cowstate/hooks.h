// Compile-time hooks for the simulator and the mutant build. In a normal build every
// hook below expands to nothing (or `false`) and costs nothing on the hot path.
//
//   COWSTATE_YIELD("point")   a named place where the deterministic scheduler may run
//                             another task in the middle of a writer operation
//                             (only with COWSTATE_SIM_HOOKS=1).
//   COWSTATE_MUTANT(name)     true when the planted bug `name` is chosen at run time
//                             (only with COWSTATE_MUTANTS=1; see docs/mutants.md).
#pragma once

#include <cstdint>

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
}  // namespace cowstate::hooks
#define COWSTATE_YIELD(point) ::cowstate::hooks::yield(point)
#else
#define COWSTATE_YIELD(point) \
  do {                        \
  } while (0)
#endif

namespace cowstate::mutants {
// The catalog of planted bugs. Exactly one (or none) is active at a time.
enum class Mutant : std::uint8_t {
  none = 0,
  skip_chain_prefix_copy,        // a write into a shared chain mutates it in place
  entry_version_le,              // `<=` for `<` in the entry-version check
  state_version_le,              // `<=` for `<` in the state-version check
  no_version_bump_at_snapshot,   // snapshot start does not advance the map version
  h_min_on_release,              // highest required version recomputed as the minimum
  no_copy_in_rehash,             // rehash migration relinks shared entries in place
  shared_state_mutable,          // get_mutable hands out a shared state without a copy
  free_retired_early,            // retired memory freed while an older snapshot is live
  snapshot_array_capacity_only,  // snapshot array sized by capacity, not max(span, size)
  writer_drops_chain_tail,       // the snapshot writer drops the last entry of a chain
  reader_drops_last_entry,       // the reader drops the last entry of a map
  // The keyed backend (fuzzed with the backend workload).
  restore_global_state_ids,          // restore maps state ids once, for all checkpoints
  snapshot_not_released_on_failure,  // a failed or cancelled checkpoint keeps its map snapshots
  key_group_wrong_hash,              // key group from the raw key hash, not Flink's murmur mix
  restore_keeps_out_of_range,        // restore keeps the key groups outside its range
  commit_ignores_cancel,             // a checkpoint whose cancel was accepted still commits
  // State TTL (fuzzed with the backend workload with a TTL; also killed by the [ttl] tests).
  ttl_boundary_lt,             // TTL expiry `<` instead of `<=`: the boundary instant lives
  ttl_cleanup_in_place,        // TTL cleanup filters a (shared) stored list in place
  ttl_full_snapshot_at_start,  // full-snapshot cleanup judged at the sync phase
  ttl_read_no_refresh,         // OnReadAndWrite reads do not refresh last access
  ttl_empty_list_kept,         // TTL cleanup keeps an entry whose list/map became empty
};
struct MutantInfo {
  Mutant mutant;
  const char* name;
  const char* description;
};
inline constexpr MutantInfo kCatalog[] = {
    {Mutant::skip_chain_prefix_copy, "skip_chain_prefix_copy",
     "a write into a shared chain mutates it in place"},
    {Mutant::entry_version_le, "entry_version_le", "<= for < in the entry-version check"},
    {Mutant::state_version_le, "state_version_le", "<= for < in the state-version check"},
    {Mutant::no_version_bump_at_snapshot, "no_version_bump_at_snapshot",
     "snapshot start does not advance the map version"},
    {Mutant::h_min_on_release, "h_min_on_release",
     "highest required version recomputed as the minimum on release"},
    {Mutant::no_copy_in_rehash, "no_copy_in_rehash",
     "rehash migration relinks shared entries in place"},
    {Mutant::shared_state_mutable, "shared_state_mutable",
     "get_mutable hands out a shared state without a copy"},
    {Mutant::free_retired_early, "free_retired_early",
     "retired memory freed while an older snapshot is live"},
    {Mutant::snapshot_array_capacity_only, "snapshot_array_capacity_only",
     "snapshot array sized by capacity only"},
    {Mutant::writer_drops_chain_tail, "writer_drops_chain_tail",
     "the snapshot writer drops the last entry of a chain"},
    {Mutant::reader_drops_last_entry, "reader_drops_last_entry",
     "the reader drops the last entry of a map"},
    {Mutant::restore_global_state_ids, "restore_global_state_ids",
     "restore maps state ids globally instead of per checkpoint"},
    {Mutant::snapshot_not_released_on_failure, "snapshot_not_released_on_failure",
     "a key group's map snapshot is not released when the async phase fails or is cancelled"},
    {Mutant::key_group_wrong_hash, "key_group_wrong_hash",
     "key group computed from the raw key hash instead of the murmur-mixed one"},
    {Mutant::restore_keeps_out_of_range, "restore_keeps_out_of_range",
     "restore keeps key groups outside its range"},
    {Mutant::commit_ignores_cancel, "commit_ignores_cancel",
     "a checkpoint whose cancel was accepted before its commit is published all the same"},
    {Mutant::ttl_boundary_lt, "ttl_boundary_lt",
     "< for <= in the TTL expiry check: the boundary instant is still live"},
    {Mutant::ttl_cleanup_in_place, "ttl_cleanup_in_place",
     "TTL cleanup filters a stored list in place, which a snapshot may share"},
    {Mutant::ttl_full_snapshot_at_start, "ttl_full_snapshot_at_start",
     "full-snapshot TTL cleanup judged at snapshot start instead of write time"},
    {Mutant::ttl_read_no_refresh, "ttl_read_no_refresh",
     "OnReadAndWrite reads do not refresh the last-access time"},
    {Mutant::ttl_empty_list_kept, "ttl_empty_list_kept",
     "TTL cleanup keeps an entry whose list or map has no live element left"},
};
// Planted TTL bugs (backend mutants too: fuzzed with the backend workload, whose clock task
// and TTL model kill them; the [ttl] unit tests kill them as well, scripts/ttl-mutants).
constexpr bool is_ttl_mutant(Mutant m) noexcept {
  return m == Mutant::ttl_boundary_lt || m == Mutant::ttl_cleanup_in_place ||
         m == Mutant::ttl_full_snapshot_at_start || m == Mutant::ttl_read_no_refresh ||
         m == Mutant::ttl_empty_list_kept;
}
// Whether a planted bug lives in the keyed backend (fuzzed with the backend workload) rather
// than in the map.
constexpr bool is_backend_mutant(Mutant m) noexcept {
  return m == Mutant::restore_global_state_ids || m == Mutant::snapshot_not_released_on_failure ||
         m == Mutant::key_group_wrong_hash || m == Mutant::restore_keeps_out_of_range ||
         m == Mutant::commit_ignores_cancel || is_ttl_mutant(m);
}
}  // namespace cowstate::mutants

// Only the mutants build can switch a planted bug on; elsewhere the catalog is just names
// (so scenario files can be checked for the mutant they name).
#if defined(COWSTATE_MUTANTS) && COWSTATE_MUTANTS
namespace cowstate::mutants {
inline Mutant& active() noexcept {
  static Mutant m = Mutant::none;
  return m;
}
}  // namespace cowstate::mutants
#define COWSTATE_MUTANT(name) (::cowstate::mutants::active() == ::cowstate::mutants::Mutant::name)
#else
#define COWSTATE_MUTANT(name) false
#endif
