// SpillContext: what the state tables of one backend share about the spill tier: the cold
// store, the read transaction of the sync phase in progress, the memory limit of a restore,
// and the counts of spills and loads. The backend owns it; every table it makes (and every
// fresh table a restore makes from them) points at it.
//
// Thread safety: the writer thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>

#include "cowstate/assert.h"
#include "cowstate/cold_store.h"

namespace cowstate {

struct SpillContext {
  // The cold tier; nullptr when the backend has no spill tier (no budget).
  ColdStore* store = nullptr;

  // Restore (KeyedStateBackend::restore): key groups are decoded into heap maps while the
  // restored heap bytes stay within `restore_heap_limit`; the key group that crosses it is
  // spilled at once, and every later one is written straight to the cold tier.
  std::size_t restore_heap_limit = std::numeric_limits<std::size_t>::max();
  std::size_t restore_heap_bytes = 0;
  bool restore_to_cold() const noexcept {
    return store != nullptr && restore_heap_bytes >= restore_heap_limit;
  }

  // The sync phase of a checkpoint: every spilled key group's snapshot of one checkpoint
  // reads the same read transaction (one LMDB reader slot per checkpoint), begun at the
  // first spilled key group met and dropped by the backend once the sync phase is over.
  std::shared_ptr<ColdReadTxn> sync_txn;
  const std::shared_ptr<ColdReadTxn>& sync_read_txn() {
    COWSTATE_ASSERT(store != nullptr, "P1", "a read transaction without a cold tier");
    if (sync_txn == nullptr) sync_txn = store->read_txn();
    return sync_txn;
  }

  // The cache of hot entries of spilled key groups (cold_cache.h): its share of the budget,
  // split evenly between the tables (counted here as they are made and destroyed).
  std::size_t cold_cache_bytes = 0;
  std::size_t tables = 0;
  std::size_t cache_limit_per_table() const noexcept {
    return tables == 0 ? cold_cache_bytes : cold_cache_bytes / tables;
  }

  std::uint64_t spills = 0;
  std::uint64_t loads = 0;
  // Set while the backend is destroyed: tables then leave their cold ranges to the store,
  // which is removed whole.
  bool closing = false;
};

}  // namespace cowstate
