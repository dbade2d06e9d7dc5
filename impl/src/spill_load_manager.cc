// FLIP-50's spill/load policy. See cowstate/spill_load_manager.h.
#include "cowstate/spill_load_manager.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "cowstate/assert.h"
#include "cowstate/hooks.h"

namespace cowstate {

namespace {

bool ratio_ok(double r) { return std::isfinite(r) && r > 0 && r <= 1; }

// The candidates' sizes and rates mapped to [0, 1] by (x - min) / (max - min), then scored
// and sorted by descending score, ties by (state, key group).
template <class Score>
void sort_by_score(std::vector<SpillCandidate>& c, Score&& score) {
  if (c.empty()) return;
  auto [bmin, bmax] = std::minmax_element(
      c.begin(), c.end(), [](const auto& a, const auto& b) { return a.bytes < b.bytes; });
  auto [rmin, rmax] = std::minmax_element(
      c.begin(), c.end(), [](const auto& a, const auto& b) { return a.rate < b.rate; });
  const double b0 = static_cast<double>(bmin->bytes);
  const double bspan = static_cast<double>(bmax->bytes) - b0;
  const double r0 = rmin->rate;
  const double rspan = rmax->rate - r0;
  std::vector<std::pair<double, std::size_t>> keyed;
  keyed.reserve(c.size());
  for (std::size_t i = 0; i < c.size(); ++i) {
    const double s = bspan > 0 ? (static_cast<double>(c[i].bytes) - b0) / bspan : 0.0;
    const double r = rspan > 0 ? (c[i].rate - r0) / rspan : 0.0;
    keyed.emplace_back(score(s, r), i);
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&c](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first > b.first;
    const SpillCandidate& x = c[a.second];
    const SpillCandidate& y = c[b.second];
    return x.state != y.state ? x.state < y.state : x.key_group < y.key_group;
  });
  std::vector<SpillCandidate> sorted;
  sorted.reserve(c.size());
  for (const auto& [score_value, i] : keyed) sorted.push_back(c[i]);
  c = std::move(sorted);
}

}  // namespace

Status SpillLoadManager::validate(const SpillOptions& o) {
  auto bad = [](const std::string& what) { return Status::error("spill options: " + what); };
  if (!ratio_ok(o.high_watermark_ratio)) {
    return bad(
        "high_watermark_ratio (state.backend.spillable.high-watermark.ratio) must be in "
        "(0, 1], found " +
        std::to_string(o.high_watermark_ratio));
  }
  if (!ratio_ok(o.spill_size_ratio)) {
    return bad(
        "spill_size_ratio (state.backend.spillable.spill-size.ratio) must be in (0, 1], "
        "found " +
        std::to_string(o.spill_size_ratio));
  }
  if (!ratio_ok(o.load_start_ratio) || !ratio_ok(o.load_end_ratio) ||
      !(o.load_start_ratio < o.load_end_ratio) || !(o.load_end_ratio < o.high_watermark_ratio)) {
    return bad(
        "expected 0 < load_start_ratio < load_end_ratio < high_watermark_ratio <= 1 "
        "(state.backend.spillable.load-start.ratio, load-end.ratio, high-watermark.ratio), "
        "found " +
        std::to_string(o.load_start_ratio) + ", " + std::to_string(o.load_end_ratio) + ", " +
        std::to_string(o.high_watermark_ratio));
  }
  if (!(o.cold_cache_ratio >= 0 && o.cold_cache_ratio < o.high_watermark_ratio)) {
    return bad("cold_cache_ratio must be in [0, high_watermark_ratio), found " +
               std::to_string(o.cold_cache_ratio));
  }
  if (o.resource_check_interval_ms < 0 || o.trigger_interval_ms < 0) {
    return bad("resource_check_interval_ms and trigger_interval_ms must not be negative");
  }
  if (!(o.swap_rate_ratio >= 0) || !std::isfinite(o.swap_rate_ratio)) {
    return bad("swap_rate_ratio must be 0 (no swaps) or positive");
  }
  if (o.request_rate_half_life_ms <= 0 || o.request_rate_half_life_ms >= (std::int64_t{1} << 31)) {
    return bad("request_rate_half_life_ms must be in (0, 2^31)");
  }
  if (o.check_every_key_switches == 0) return bad("check_every_key_switches must be positive");
  return Status();
}

SpillLoadManager::SpillLoadManager(const SpillOptions& options)
    : options_(options),
      high_(static_cast<std::uint64_t>(options.high_watermark_ratio *
                                       static_cast<double>(options.memory_budget_bytes))),
      load_start_(static_cast<std::uint64_t>(options.load_start_ratio *
                                             static_cast<double>(options.memory_budget_bytes))),
      load_end_(static_cast<std::uint64_t>(options.load_end_ratio *
                                           static_cast<double>(options.memory_budget_bytes))) {
  COWSTATE_ASSERT(validate(options).ok(), "REQUIRES", "invalid spill options");
  COWSTATE_ASSERT(load_start_ <= load_end_ && load_end_ <= high_, "M3", "watermarks out of order");
}

bool SpillLoadManager::check_due(std::int64_t now_ms) const noexcept {
  return !has_checked_ || now_ms - last_check_ms_ >= options_.resource_check_interval_ms;
}

SpillDecision SpillLoadManager::decide(std::int64_t now_ms, std::uint64_t bytes,
                                       std::vector<SpillCandidate> candidates) const {
  if (has_acted_ && now_ms - last_action_ms_ < options_.trigger_interval_ms) return {};
  std::vector<SpillCandidate> heap;
  std::vector<SpillCandidate> cold;
  for (const SpillCandidate& c : candidates) (c.tier == Tier::heap ? heap : cold).push_back(c);
  if (bytes > high_) return decide_spill(bytes, std::move(heap));
  if (bytes < load_start_) return decide_load(bytes, std::move(cold));
  return decide_swap(bytes, std::move(heap), cold);
}

SpillDecision SpillLoadManager::decide_swap(std::uint64_t bytes, std::vector<SpillCandidate> heap,
                                            const std::vector<SpillCandidate>& cold) const {
  if (options_.swap_rate_ratio <= 0 || cold.empty()) return {};
  const SpillCandidate* hot = &cold.front();
  for (const SpillCandidate& c : cold) {
    if (c.rate > hot->rate) hot = &c;  // the first of equals: the lowest (state, key group)
  }
  std::stable_sort(heap.begin(), heap.end(), [](const SpillCandidate& a, const SpillCandidate& b) {
    return a.rate < b.rate;
  });
  const std::uint64_t room = high_ > bytes ? high_ - bytes : 0;
  SpillDecision d;
  std::uint64_t freed = 0;
  for (const SpillCandidate& h : heap) {
    if (freed + room >= hot->bytes) break;
    if (h.bytes == 0) continue;
    if (hot->rate < options_.swap_rate_ratio * h.rate) return {};  // not worth the move
    d.chosen.push_back(h);
    freed += h.bytes;
  }
  if (freed + room < hot->bytes) return {};
  d.action = SpillAction::swap;
  d.chosen.push_back(*hot);
  COWSTATE_ASSERT(d.chosen.back().tier == Tier::cold, "M3", "a swap that loads a heap key group");
  return d;
}

SpillDecision SpillLoadManager::decide_spill(std::uint64_t bytes,
                                             std::vector<SpillCandidate> heap) const {
  SpillDecision d;
  d.action = SpillAction::spill;
  std::erase_if(heap, [](const SpillCandidate& c) { return c.bytes == 0; });
  sort_by_score(heap, spill_score);
  if (COWSTATE_MUTANT(spill_hottest_first)) {
    std::stable_sort(
        heap.begin(), heap.end(),
        [](const SpillCandidate& a, const SpillCandidate& b) { return a.rate > b.rate; });
  }
  const auto ratio_bytes =
      static_cast<std::uint64_t>(options_.spill_size_ratio * static_cast<double>(bytes));
  const std::uint64_t target = std::max(bytes - high_, ratio_bytes);
  std::uint64_t chosen = 0;
  for (const SpillCandidate& c : heap) {
    if (chosen >= target) break;
    d.chosen.push_back(c);
    chosen += c.bytes;
  }
  if (chosen < bytes - high_) {
    d.why = std::to_string(bytes) + " bytes accounted, watermark " + std::to_string(high_) +
            ": the heap tier holds only " + std::to_string(chosen) +
            " bytes that can be spilled; the rest is bookkeeping or retired memory held for "
            "live snapshots";
  }
  if (d.chosen.empty()) d.action = SpillAction::none;
  COWSTATE_ASSERT(std::all_of(d.chosen.begin(), d.chosen.end(),
                              [](const SpillCandidate& c) { return c.tier == Tier::heap; }),
                  "M3", "a spill round chose a cold key group");
  return d;
}

SpillDecision SpillLoadManager::decide_load(std::uint64_t bytes,
                                            std::vector<SpillCandidate> cold) const {
  SpillDecision d;
  d.action = SpillAction::load;
  sort_by_score(cold, load_score);
  std::uint64_t after = bytes;
  for (const SpillCandidate& c : cold) {
    if (after + c.bytes > load_end_) break;
    d.chosen.push_back(c);
    after += c.bytes;
  }
  if (d.chosen.empty()) d.action = SpillAction::none;
  COWSTATE_ASSERT(after <= load_end_ || d.chosen.empty(), "M3", "a load round past load_end");
  return d;
}

}  // namespace cowstate
