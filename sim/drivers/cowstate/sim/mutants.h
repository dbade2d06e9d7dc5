// The catalog of planted bugs from the simulator's side: what each bug of
// impl/include/cowstate/hooks.h does, which workload's campaigns must kill it (`cowstate
// mutants` fuzzes it with that workload), and whether it is a TTL bug (the [ttl] unit tests
// must kill those too: scripts/ttl-mutants). Header-only, so a test binary that links only
// impl can read it.
#pragma once

#include <cstddef>
#include <iterator>

#include "cowstate/hooks.h"

namespace cowstate::sim {

struct PlantedBug {
  mutants::Mutant mutant;
  const char* workload;  // the workload whose campaigns kill it
  bool ttl;              // a state TTL bug
  const char* description;
  const char* name() const noexcept { return mutants::mutant_name(mutant); }
};

inline constexpr PlantedBug kPlantedBugs[] = {
    {mutants::Mutant::skip_chain_prefix_copy, "map", false,
     "a write into a shared chain mutates it in place"},
    {mutants::Mutant::entry_version_le, "map", false, "<= for < in the entry-version check"},
    {mutants::Mutant::state_version_le, "map", false, "<= for < in the state-version check"},
    {mutants::Mutant::no_version_bump_at_snapshot, "map", false,
     "snapshot start does not advance the map version"},
    {mutants::Mutant::h_min_on_release, "map", false,
     "highest required version recomputed as the minimum on release"},
    {mutants::Mutant::no_copy_in_rehash, "map", false,
     "rehash migration relinks shared entries in place"},
    {mutants::Mutant::shared_state_mutable, "map", false,
     "get_mutable hands out a shared state without a copy"},
    {mutants::Mutant::free_retired_early, "map", false,
     "retired memory freed while an older snapshot is live"},
    {mutants::Mutant::snapshot_primary_directory_only, "map", false,
     "a snapshot started during a rehash copies only the old table's directory"},
    {mutants::Mutant::writer_drops_chain_tail, "map", false,
     "the snapshot writer drops the last entry of a chain"},
    {mutants::Mutant::reader_drops_last_entry, "map", false,
     "the reader drops the last entry of a map"},
    {mutants::Mutant::restore_global_state_ids, "backend", false,
     "restore maps state ids globally instead of per checkpoint"},
    {mutants::Mutant::snapshot_not_released_on_failure, "backend", false,
     "a key group's map snapshot is not released when the async phase fails or is cancelled"},
    {mutants::Mutant::key_group_wrong_hash, "backend", false,
     "key group computed from the raw key hash instead of the murmur-mixed one"},
    {mutants::Mutant::restore_keeps_out_of_range, "backend", false,
     "restore keeps key groups outside its range"},
    {mutants::Mutant::commit_ignores_cancel, "backend", false,
     "a checkpoint whose cancel was accepted before its commit is published all the same"},
    {mutants::Mutant::ttl_boundary_lt, "backend", true,
     "< for <= in the TTL expiry check: the boundary instant is still live"},
    {mutants::Mutant::ttl_cleanup_in_place, "backend", true,
     "TTL cleanup filters a stored list in place, which a snapshot may share"},
    {mutants::Mutant::ttl_full_snapshot_at_start, "backend", true,
     "full-snapshot TTL cleanup judged at snapshot start instead of write time"},
    {mutants::Mutant::ttl_read_no_refresh, "backend", true,
     "OnReadAndWrite reads do not refresh the last-access time"},
    {mutants::Mutant::ttl_empty_list_kept, "backend", true,
     "TTL cleanup keeps an entry whose list or map has no live element left"},
    {mutants::Mutant::transform_in_place_shared, "map", false,
     "an in-place transform changes a state a live snapshot shares"},
    {mutants::Mutant::load_drops_chain_tail, "map", false,
     "a bulk load links each entry as the whole chain of its bucket"},
    {mutants::Mutant::rename_before_data_sync, "backend", false,
     "a checkpoint's data file gets its final name without an fsync first"},
    {mutants::Mutant::no_dir_sync_after_rename, "backend", false,
     "a commit returns before the directory holding the manifest's new name is synced"},
    {mutants::Mutant::manifest_before_data_durable, "backend", false,
     "the manifest is published before the data file's new name is durable"},
    {mutants::Mutant::restore_ignores_block_checksum, "backend", false,
     "restore decodes a block without checking its checksum"},
    {mutants::Mutant::latest_skips_newer_complete, "backend", false,
     "latest() returns the second newest complete checkpoint"},
    {mutants::Mutant::torn_header_accepted, "backend", false,
     "restore reads a header without checking its checksum"},
    {mutants::Mutant::prune_removes_needed_file, "backend", false,
     "pruning also removes the data file of the oldest checkpoint it keeps"},
    {mutants::Mutant::read_ignores_file_checksum, "backend", false,
     "the storage's read checks a data file's size against its manifest, not its checksum"},
    {mutants::Mutant::segment_written_in_place, "map", false,
     "a bucket-head segment a live snapshot shares is written without being copied first"},
    {mutants::Mutant::segment_freed_at_copy, "map", false,
     "a copied bucket-head segment's original is disposed of with the copy's birth, so it is "
     "freed at once under the snapshot that reads it"},
    {mutants::Mutant::live_slots_written_in_place, "map", false,
     "a live-slot bitmap segment a live snapshot shares is written without being copied "
     "first"},
    {mutants::Mutant::load_drops_spilled_writes, "backend", false,
     "a load drops the cached entries written while the key group was spilled"},
    {mutants::Mutant::spill_frees_snapshot_map, "backend", false,
     "a spill frees the heap map a live snapshot still reads instead of retiring it"},
    {mutants::Mutant::cold_snapshot_reads_live, "backend", false,
     "a checkpoint of a spilled key group reads the live cold tier, not its read transaction"},
    {mutants::Mutant::accounting_forgets_retired, "backend", false,
     "a key group's memory leaves out its spilled maps retired for live snapshots"},
    {mutants::Mutant::load_loses_ttl_timestamps, "backend", true,
     "a load decodes TTL states with their last-access times reset to 0"},
    {mutants::Mutant::spill_hottest_first, "backend", false,
     "the manager spills the most requested heap key groups first"},
    {mutants::Mutant::load_skips_distinct_check, "map", false,
     "a bulk load links every entry without checking that its key is new"},
    {mutants::Mutant::handout_not_logged, "map", false,
     "a mutable hand-out (get_mutable, in-place transform) is not recorded as a change"},
    {mutants::Mutant::tombstone_dropped, "map", false,
     "a removal leaves no tombstone in the change log"},
    {mutants::Mutant::delta_after_snapshot, "map", false,
     "a delta reads its captured slots in the live map, not in the snapshot"},
    {mutants::Mutant::chain_applied_out_of_order, "backend", false,
     "a chain's deltas are applied newest first"},
    {mutants::Mutant::cancelled_checkpoint_resets_tracking, "backend", false,
     "a cancelled or failed checkpoint moves its maps' change base as a completed one would"},
    {mutants::Mutant::prune_drops_chain_member, "backend", false,
     "pruning counts no chain: a retained incremental checkpoint loses an ancestor"},
    {mutants::Mutant::delta_restore_outside_limit, "backend", false,
     "a restore under a budget counts none of a delta's records against its memory limit"},
    {mutants::Mutant::prune_ignores_pending_chain, "backend", false,
     "pruning counts the chains of complete checkpoints only, not of one being written"},
};
constexpr bool in_enum_order() noexcept {
  for (std::size_t i = 0; i < std::size(kPlantedBugs); ++i) {
    if (kPlantedBugs[i].mutant != static_cast<mutants::Mutant>(i + 1)) return false;
  }
  return std::size(kPlantedBugs) == mutants::kMutantCount;
}
static_assert(in_enum_order(), "every planted bug of hooks.h has its entry, in enum order");

// The entry of a planted bug. REQUIRES: m != none.
constexpr const PlantedBug& planted_bug(mutants::Mutant m) noexcept {
  return kPlantedBugs[static_cast<std::size_t>(m) - 1];
}

}  // namespace cowstate::sim
