// The spill tier: a keyed backend under a memory budget, after FLIP-50 ("Spill-able Heap
// Keyed State Backend"). This header states the rules; the parts live in
//   state_memory.h        exact heap accounting of states (the state-traits hook)
//   request_rate.h        decayed access counts per (state, key group)
//   cold_store.h          the cold tier: one LMDB environment per backend
//   cold_cache.h          hot entries of spilled key groups, in memory, write-back
//   state_table_cold.h    spill, load, cold reads and writes, cold snapshots of one table
//   spill_load_manager.h  FLIP-50's policy: when to spill or load, and which key groups
//   spill_context.h       what a backend's tables share about the tier
//   metrics.h             the metrics snapshot and its Prometheus rendering
//
// Model
// -----
// Memory is primary (FLIP-50's anti-caching). Every (state, key group) lives in exactly one
// tier: a heap CowStateMap, or a contiguous key range of the cold tier (LMDB). State handles
// reach a key group through StateTable::Access, which calls the heap map when there is one
// (one predictable branch, so the heap path never touches LMDB) and the cold tier otherwise:
// a spilled key group serves reads and writes where it is, without being loaded.
//
// Granularity: a key group is the unit of spill and load, but with keys hashed uniformly
// every key group holds hot and cold keys alike. So a spilled key group's accesses go through
// a per-table cache of its hot entries (cold_cache.h: CLOCK, write-back, cold_cache_ratio of
// the budget): a counter updated on every record reaches LMDB once per eviction. Its default
// share is 0, one entry: under a word count a miss then costs one LMDB read and one write on
// the page the read found, where a larger cache's miss costs a read plus a write-back
// elsewhere and leaves fewer key groups in the heap (bench/README.md). And since
// FLIP-50 loads only when memory runs low, a key group spilled while cold would stay spilled
// once hot; the manager also swaps a much hotter cold key group with the coldest heap ones.
//
// Accounting is exact and incremental: each map counts its pool chunks, bucket tables (the
// rehash table too), retirement logs and the heap its boxed states own (live and retired,
// state_memory.h); a spilled map still read by a snapshot counts as retired memory of its key
// group until it goes. Reading one (state, key group)'s memory is O(1); the backend's total
// (what the budget is compared with) sums them at each check. LMDB's pages are the operating
// system's page cache and are not counted.
//
// Spill encodes a heap map's live entries, stores them into the cold range in key order (a
// page filled after another, not a search of the tree per entry) and commits; load writes back
// the key group's dirty cached entries, drops its cached ones, reads the whole range into a
// fresh map (with the bulk loader) and erases the range. The manager
// (spill_load_manager.h) decides both on the writer thread, on key switches, by FLIP-50's
// watermarks and scores; `KeyedStateBackend::spill/load` do one by hand.
//
// Snapshots across tiers
// ----------------------
// A checkpoint's sync phase takes, per (state, key group), a map snapshot of a heap key
// group or a ColdSnapshot of a spilled one; all ColdSnapshots of one checkpoint share one
// LMDB read transaction, begun after every table wrote back its cache's dirty entries and the
// writer's transaction committed. Both write the same
// records (key, namespace, state in the serializers' layouts) into the same file format, so
// a checkpoint spans both tiers and restore does not know which tier a record came from.
// Restore under a budget decodes key groups into heap maps until the restored bytes reach the
// high watermark and writes every later key group straight into the cold tier, sorted by
// cold key so that LMDB appends each to its last page.
//
// Rules (the numbered invariants below say the same in checkable form)
//  1. Data lives in one tier at a time; a move is a copy then a swap on the writer thread.
//  2. A spilled heap map that a live snapshot still reads is retired, not freed: it stays
//     with its table and in its key group's memory until its highest required version is 0.
//  3. A snapshot of a spilled key group reads its read transaction: writes, spills and loads
//     after its sync phase do not change what it reads.
//  4. A load takes every entry of the range, including those written while spilled, and
//     erases the range only afterwards; a checkpoint reading the range still sees it.
//  5. A cold state handed out mutably lives in the cache and is written back when evicted,
//     before its key group is loaded, and before a checkpoint's read transaction begins.
//  6. A restore's heap maps stay within the high watermark plus one key group's map.
//
// Thread safety
// -------------
// The writer thread does everything except what a checkpoint's async phase does with its
// snapshots (one thread at a time per checkpoint; ColdSnapshot owns an LMDB cursor and a share
// of the read transaction, usable on any one thread thanks to MDB_NOTLS). Releasing a snapshot
// from any thread is idempotent; a retired map is destroyed by the writer only after its
// highest required version reads 0, and its destructor takes the map's lock, which a
// releasing thread holds until it stops touching the map.
//
// Invariants (docs/invariants.md)
//  SP1 A (state, key group) has a heap map or cold entries, never both; its cold entry
//      count equals the records in its range (M2).
//  SP2 A spilled map with a live snapshot is retired until no snapshot of it is live, and
//      counted in its key group's retired bytes meanwhile.
//  SP3 A ColdSnapshot emits exactly the records its range held at its sync phase.
//  SP4 A load leaves the heap map holding exactly the range's records and the range empty.
//  SP5 A checkpoint's read transaction and a load's scan see every write made while the key
//      group was spilled (the cache's dirty entries are written back first).
//  SP7 A key is in the cold cache's index iff a used slot holds it (cold_cache.h).
//  SP6 After a restore under a budget the heap maps hold at most the high watermark plus
//      the last key group decoded into the heap.
#pragma once

#include "cowstate/cold_store.h"          // IWYU pragma: export
#include "cowstate/metrics.h"             // IWYU pragma: export
#include "cowstate/request_rate.h"        // IWYU pragma: export
#include "cowstate/spill_context.h"       // IWYU pragma: export
#include "cowstate/spill_load_manager.h"  // IWYU pragma: export
#include "cowstate/state_memory.h"        // IWYU pragma: export
