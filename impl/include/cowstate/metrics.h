// Metrics of a keyed backend's memory and spill tier: a snapshot of plain values, taken on the
// writer thread (KeyedStateBackend::metrics()), and its rendering in Prometheus' text
// exposition format (version 0.0.4) for a scrape endpoint or a log line.
//
// Per (state, key group): entries, bytes held in memory (the map's exact accounting, including
// retired memory; for a spilled key group, the heap map a live snapshot still reads),
// retired bytes (held only for live snapshots), the tier it lives in, and its request rate
// (decayed accesses, request_rate.h). Per backend: the same totals, the budget, the spilled
// key groups, and how many spills and loads happened.
//
// Thread safety: a snapshot is a value; render it on any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cowstate {

// Where a (state, key group) lives: in a heap map, or in the cold tier (spill_tier.h).
enum class Tier : std::uint8_t { heap = 0, cold = 1 };
const char* tier_name(Tier t) noexcept;

struct KeyGroupMetrics {
  std::string state;
  std::int32_t key_group = 0;
  std::uint64_t entries = 0;
  std::uint64_t bytes = 0;
  std::uint64_t retired_bytes = 0;
  Tier tier = Tier::heap;
  double request_rate = 0;  // decayed accesses per half-life
};

struct BackendMetrics {
  std::uint64_t entries = 0;
  std::uint64_t bytes = 0;  // sum over key groups: what the budget is compared with
  std::uint64_t retired_bytes = 0;
  std::uint64_t budget_bytes = 0;  // 0: no budget
  std::uint64_t spilled_key_groups = 0;
  std::uint64_t spills = 0;  // since the backend was created
  std::uint64_t loads = 0;
  std::uint64_t cold_entries = 0;
  std::uint64_t cold_cache_bytes = 0;  // hot entries of spilled key groups (part of bytes)
  std::uint64_t cold_cache_hits = 0;
  std::uint64_t cold_cache_misses = 0;
  std::vector<KeyGroupMetrics> key_groups;  // by state (registration order), then key group
};

// The metrics in Prometheus' text format: one HELP and TYPE line per family, then its
// samples; label values escaped (backslash, double quote, newline).
std::string render_prometheus(const BackendMetrics& m);

}  // namespace cowstate
