// Bounded exhaustive strategy and its depth-first driver, split into subtrees for shards;
// see explore.h.
#include <algorithm>
#include <map>
#include <optional>
#include <vector>

#include "cowstate/assert.h"
#include "cowstate/sim/explore.h"
#include "cowstate/sim/strategy.h"

namespace cowstate::sim {
namespace {

struct Decision {
  std::vector<std::uint32_t> order;  // candidates: the last task first, then ascending ids
  std::size_t taken = 0;             // index into order
  bool last_runnable = false;
  std::uint32_t preemptions_before = 0;
};

class ExhaustiveStrategy final : public Strategy {
 public:
  ExhaustiveStrategy(std::vector<std::size_t> prefix, std::map<std::uint64_t, std::uint32_t>* seen,
                     bool dedup)
      : prefix_(std::move(prefix)), seen_(seen), dedup_(dedup) {}

  std::string name() const override { return "exhaustive"; }
  void begin_run(std::uint64_t /*seed*/) override {}
  bool wants_digest() const override { return dedup_; }

  bool on_state(std::uint64_t digest) override {
    // Past the forced prefix only: the prefix itself was reached by an earlier execution.
    if (decisions_.size() < prefix_.size()) return true;
    auto [it, fresh] = seen_->emplace(digest, preemptions_);
    if (fresh) return true;
    if (it->second <= preemptions_) return false;  // explored with at least our budget
    it->second = preemptions_;
    return true;
  }

  std::uint32_t pick(const std::vector<TaskView>& runnable, std::uint32_t last,
                     std::uint64_t /*step*/) override {
    Decision d;
    d.preemptions_before = preemptions_;
    d.last_runnable = std::any_of(runnable.begin(), runnable.end(),
                                  [last](const TaskView& t) { return t.id == last; });
    if (d.last_runnable) d.order.push_back(last);
    for (const TaskView& t : runnable) {
      if (t.id != last) d.order.push_back(t.id);
    }
    const std::size_t i = decisions_.size();
    d.taken = i < prefix_.size() ? prefix_[i] : 0;
    if (d.taken >= d.order.size()) d.taken = 0;  // cannot happen on a faithful re-execution
    if (d.last_runnable && d.taken != 0) ++preemptions_;
    decisions_.push_back(d);
    return d.order[d.taken];
  }

  const std::vector<Decision>& decisions() const { return decisions_; }

 private:
  std::vector<std::size_t> prefix_;
  std::map<std::uint64_t, std::uint32_t>* seen_;
  bool dedup_;
  std::vector<Decision> decisions_;
  std::uint32_t preemptions_ = 0;
};

// A non-first candidate of `d` stays within the preemption bound.
bool within_bound(const Decision& d, std::uint32_t bound) {
  const std::uint32_t cost = d.last_runnable ? 1 : 0;  // every non-first candidate preempts
  return d.preemptions_before + cost <= bound;
}

// How many of a schedule's decisions name its subtree: those up to and including its
// `depth`-th branching one (all when it has fewer), none when depth is 0.
std::size_t subtree_prefix_length(const std::vector<Decision>& ds, std::uint32_t depth,
                                  std::uint32_t bound) {
  if (depth == 0) return 0;
  std::uint32_t branching = 0;
  for (std::size_t i = 0; i < ds.size(); ++i) {
    if (ds[i].order.size() > 1 && within_bound(ds[i], bound) && ++branching == depth) return i + 1;
  }
  return ds.size();
}

// The forced prefix of the next schedule in depth-first order: from the deepest decision
// before `limit` with an untried candidate within the bound (its position in *at); nullopt
// when there is none.
std::optional<std::vector<std::size_t>> next_prefix(const std::vector<Decision>& ds,
                                                    std::size_t limit, std::uint32_t bound,
                                                    std::size_t* at) {
  for (std::size_t i = std::min(limit, ds.size()); i-- > 0;) {
    const Decision& d = ds[i];
    if (d.taken + 1 >= d.order.size() || !within_bound(d, bound)) continue;
    std::vector<std::size_t> prefix;
    for (std::size_t j = 0; j < i; ++j) prefix.push_back(ds[j].taken);
    prefix.push_back(d.taken + 1);
    *at = i;
    return prefix;
  }
  return std::nullopt;
}

// One schedule of this shard counted, in the totals and in its subtree's.
void count_schedule(RunResult r, std::uint64_t subtree, ExploreResult* out) {
  ExploredSubtree& t = out->subtrees.back();
  ++out->schedules;
  ++t.schedules;
  out->steps += r.stats.steps;
  t.steps += r.stats.steps;
  t.coverage += r.stats.coverage;
  if (r.abandoned) {
    ++out->pruned;
    ++t.pruned;
  }
  if (r.outcome != Outcome::pass) {
    ++t.failures;
    out->failures.push_back(ExploredFailure{r.schedule, std::move(r), subtree});
  }
}

}  // namespace

CoverageReport explored_coverage(const ExploreResult& r, std::uint64_t seed) {
  CoverageReport report;
  for (const ExploredSubtree& t : r.subtrees) report.add(t.index, seed, t.coverage);
  return report;
}

ExploreResult explore(const RunConfig& config, const ExploreOptions& options) {
  COWSTATE_ASSERT(options.shard_index < options.shard_count, "REQUIRES", "a shard of the count");
  COWSTATE_ASSERT(options.shard_count == 1 || options.split_depth > 0, "REQUIRES",
                  "shards split the space below some branching decisions");
  ExploreResult out;
  std::map<std::uint64_t, std::uint32_t> seen;  // state digest -> fewest preemptions used
  std::vector<std::size_t> prefix;
  std::uint64_t subtree = 0;
  bool first_of_subtree = true;
  for (;;) {
    const bool mine = subtree % options.shard_count == options.shard_index;
    if (mine && out.schedules >= options.max_schedules) {
      out.subtrees_total = subtree + 1;
      return out;
    }
    ExhaustiveStrategy strategy(prefix, &seen, options.dedup);
    RunResult r = run_once(config, strategy);
    const std::vector<Decision>& ds = strategy.decisions();
    const std::size_t named =
        subtree_prefix_length(ds, options.split_depth, options.preemption_bound);
    if (mine && first_of_subtree) {
      ExploredSubtree& t = out.subtrees.emplace_back();
      t.index = subtree;
      for (std::size_t i = 0; i < named; ++i) t.prefix.push_back(ds[i].taken);
    }
    first_of_subtree = false;
    const bool failed = r.outcome != Outcome::pass;
    if (mine) {
      count_schedule(std::move(r), subtree, &out);
      if (failed && options.stop_at_first_failure) {
        out.subtrees_total = subtree + 1;
        return out;
      }
    } else {
      ++out.discovery_runs;
    }
    // A skipped subtree is left at once: only its naming decisions are backtracked.
    std::size_t at = 0;
    auto next = next_prefix(ds, mine ? ds.size() : named, options.preemption_bound, &at);
    if (!next) {
      out.complete = true;
      out.subtrees_total = subtree + 1;
      return out;
    }
    prefix = std::move(*next);
    if (at < named) {  // the next schedule is the first of the next subtree
      ++subtree;
      seen.clear();
      first_of_subtree = true;
    }
  }
}

}  // namespace cowstate::sim
