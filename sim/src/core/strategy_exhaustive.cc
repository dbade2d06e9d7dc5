// Bounded exhaustive strategy and its depth-first driver; see explore.h.
#include <algorithm>
#include <map>
#include <vector>

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

  std::vector<Decision>& decisions() { return decisions_; }

 private:
  std::vector<std::size_t> prefix_;
  std::map<std::uint64_t, std::uint32_t>* seen_;
  bool dedup_;
  std::vector<Decision> decisions_;
  std::uint32_t preemptions_ = 0;
};

}  // namespace

ExploreResult explore(const RunConfig& config, const ExploreOptions& options) {
  ExploreResult out;
  std::map<std::uint64_t, std::uint32_t> seen;  // state digest -> fewest preemptions used
  std::vector<std::size_t> prefix;
  for (;;) {
    if (out.schedules >= options.max_schedules) return out;
    ExhaustiveStrategy strategy(prefix, &seen, options.dedup);
    RunResult r = run_once(config, strategy);
    ++out.schedules;
    out.steps += r.stats.steps;
    if (r.abandoned) ++out.pruned;
    if (r.outcome != Outcome::pass) {
      out.failures.push_back(ExploredFailure{r.schedule, r});
      if (options.stop_at_first_failure) return out;
    }
    // Backtrack: the deepest decision with an untried candidate within the bound.
    std::vector<Decision>& ds = strategy.decisions();
    bool advanced = false;
    for (std::size_t i = ds.size(); i-- > 0;) {
      const Decision& d = ds[i];
      std::size_t next = d.taken + 1;
      if (next >= d.order.size()) continue;
      const std::uint32_t cost = d.last_runnable ? 1 : 0;  // every non-first candidate preempts
      if (d.preemptions_before + cost > options.preemption_bound) continue;
      prefix.clear();
      for (std::size_t j = 0; j < i; ++j) prefix.push_back(ds[j].taken);
      prefix.push_back(next);
      advanced = true;
      break;
    }
    if (!advanced) {
      out.complete = true;
      return out;
    }
  }
}

}  // namespace cowstate::sim
