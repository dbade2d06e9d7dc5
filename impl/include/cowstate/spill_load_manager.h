// SpillLoadManager: FLIP-50's policy for moving (state, key group) maps between the heap and
// the cold tier under a memory budget (spill_tier.h has the mechanism and its rules).
//
// Policy (FLIP-50's SpillAndLoadManager, with exact accounting instead of GC statistics)
// ------
// A check runs at most every resource_check_interval_ms (on the backend's clock, driven by
// its key switches), and acts at most once per trigger_interval_ms:
//   spill  when accounted memory exceeds high_watermark_ratio x budget: heap key groups in
//          descending order of 0.7 x size - 0.3 x rate (each normalised to [0, 1] over the
//          candidates: (x - min) / (max - min), 0 when all are equal), large and cold first,
//          until the bytes chosen reach max(memory - watermark, spill_size_ratio x memory);
//   load   when it is below load_start_ratio x budget: cold key groups in descending order of
//          0.7 x rate - 0.3 x size, hot and small first, while the estimate of memory after
//          loading stays within load_end_ratio x budget.
// Beyond FLIP-50 (which loads only when memory runs low, so a key group spilled while it was
// cold stays spilled when it turns hot): when neither applies, a swap brings in the hottest
// cold key group if it is requested at least swap_rate_ratio times as often as each of the
// coldest heap key groups that make room for it, and spills those.
// Ties go to the lower (state, key group). A cold key group's size is an estimate: its
// entries times the bytes per entry of its state's heap key groups (or of all of them).
// When a spill round cannot get memory under the watermark (nothing left in the heap tier,
// or what remains is retired memory held for live snapshots) the decision says why.
//
// The knobs keep FLIP-50's configuration names (state.backend.spillable.*): high-watermark
// .ratio, spill-size.ratio, load-start.ratio, load-end.ratio, trigger-interval,
// resource-check.interval, cancel.checkpoint. FLIP-50's ratios are of the JVM heap, most of
// which is not state; ours are of a budget that is exactly state, hence higher defaults.
//
// Thread safety: the writer thread only. decide() is a pure function of its arguments and
// the time of the last action.
//
// Invariants (docs/invariants.md)
//  M3  A spill round chooses only heap key groups, in descending spill score; a load round
//      only cold ones, in descending load score; at most one round per trigger interval.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cowstate/cold_store.h"
#include "cowstate/metrics.h"
#include "cowstate/status.h"

namespace cowstate {

struct SpillCandidate;
struct SpillDecision;

struct SpillOptions {
  // Bytes of state the backend may hold in memory (0: no budget and no cold tier).
  std::size_t memory_budget_bytes = 0;
  // state.backend.spillable.high-watermark.ratio: spill above this share of the budget.
  double high_watermark_ratio = 0.9;
  // state.backend.spillable.spill-size.ratio: a spill round moves at least this share of
  // the accounted memory.
  double spill_size_ratio = 0.1;
  // state.backend.spillable.load-start.ratio: load below this share of the budget.
  double load_start_ratio = 0.5;
  // state.backend.spillable.load-end.ratio: loading stops short of this share.
  double load_end_ratio = 0.7;
  // state.backend.spillable.resource-check.interval: time between two checks (0: every
  // `check_every_key_switches` key switches).
  std::int64_t resource_check_interval_ms = 0;
  // state.backend.spillable.trigger-interval: time between two spill or load rounds.
  std::int64_t trigger_interval_ms = 0;
  // state.backend.spillable.cancel.checkpoint: before a spill round, cancel the running
  // checkpoints (through `cancel_checkpoints`, which the checkpoint's owner supplies) so that
  // the memory they hold can go.
  bool cancel_checkpoint = false;
  std::function<void()> cancel_checkpoints;
  // A swap's threshold (see above; 0: no swaps, FLIP-50's policy alone).
  double swap_rate_ratio = 2.0;
  // Share of the budget for the hot entries of spilled key groups (cold_cache.h): a key group
  // is the unit of spill, but with keys hashed uniformly each one holds hot and cold keys.
  // 0 keeps one entry (a read-modify-write reads LMDB once, writes it once): the cache is
  // write-back, so under updates a miss costs a read plus a later write elsewhere in the
  // tree, and its share pushes more key groups out; it pays where hot cold-tier entries
  // are mostly read (bench/README.md, "budget, cache R").
  double cold_cache_ratio = 0;
  // Half-life of the request rates (request_rate.h).
  std::int64_t request_rate_half_life_ms = 10'000;
  // Key switches between two looks at the clock (the cost of a check on the record path).
  std::uint32_t check_every_key_switches = 1024;
  // The LMDB environment of the cold tier.
  ColdStoreOptions cold;
  // Called on the writer thread after every check of the manager, once its moves are done:
  // the decision, the candidates it chose from, and the accounted bytes before and after
  // (the simulator checks M1, M3 and the budget there).
  std::function<void(const SpillDecision&, const std::vector<SpillCandidate>&, std::uint64_t,
                     std::uint64_t)>
      on_decision;
};

// A (state, key group) the manager may move.
struct SpillCandidate {
  std::size_t state = 0;
  std::int32_t key_group = 0;
  std::uint64_t bytes = 0;  // heap bytes, or for a cold one the estimate once loaded
  double rate = 0;
  Tier tier = Tier::heap;
};

enum class SpillAction : std::uint8_t { none, spill, load, swap };

struct SpillDecision {
  SpillAction action = SpillAction::none;
  std::vector<SpillCandidate> chosen;  // in the order to act on (each moves to the other tier)
  std::string why;                     // when over the watermark and not enough to spill
};

class SpillLoadManager {
 public:
  // An error names the option that is out of range.
  static Status validate(const SpillOptions& options);
  // REQUIRES: validate(options) is ok.
  explicit SpillLoadManager(const SpillOptions& options);

  std::uint64_t high_watermark_bytes() const noexcept { return high_; }
  std::uint64_t load_start_bytes() const noexcept { return load_start_; }
  std::uint64_t load_end_bytes() const noexcept { return load_end_; }

  // Whether a check is due at `now_ms` (resource-check interval).
  bool check_due(std::int64_t now_ms) const noexcept;
  void checked(std::int64_t now_ms) noexcept {
    last_check_ms_ = now_ms;
    has_checked_ = true;
  }
  // FLIP-50's decision for accounted memory `bytes` over `candidates` (both tiers).
  SpillDecision decide(std::int64_t now_ms, std::uint64_t bytes,
                       std::vector<SpillCandidate> candidates) const;
  // A round was acted on at `now_ms` (trigger interval).
  void acted(std::int64_t now_ms) noexcept {
    last_action_ms_ = now_ms;
    has_acted_ = true;
  }

  // The scores, for tests: FLIP-50's weights over normalised size and rate.
  static double spill_score(double size01, double rate01) noexcept {
    return 0.7 * size01 - 0.3 * rate01;
  }
  static double load_score(double size01, double rate01) noexcept {
    return 0.7 * rate01 - 0.3 * size01;
  }

 private:
  SpillDecision decide_spill(std::uint64_t bytes, std::vector<SpillCandidate> heap) const;
  SpillDecision decide_load(std::uint64_t bytes, std::vector<SpillCandidate> cold) const;
  SpillDecision decide_swap(std::uint64_t bytes, std::vector<SpillCandidate> heap,
                            const std::vector<SpillCandidate>& cold) const;

  SpillOptions options_;
  std::uint64_t high_;
  std::uint64_t load_start_;
  std::uint64_t load_end_;
  std::int64_t last_check_ms_ = 0;
  std::int64_t last_action_ms_ = 0;
  bool has_checked_ = false;
  bool has_acted_ = false;
};

}  // namespace cowstate
