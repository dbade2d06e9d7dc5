// PCT (Burckhardt, Kothari, Musuvathi, Nagarakatte, ASPLOS 2010): each task gets a random
// priority above `depth`; at depth - 1 change points, chosen uniformly among the first
// `steps_estimate` steps, the running task's priority drops to the change point's index.
// The highest-priority runnable task always runs. A bug of depth d is found with
// probability at least 1 / (n * k^(d-1)) per run.
#include <algorithm>
#include <map>
#include <vector>

#include "cowstate/sim/strategy.h"

namespace cowstate::sim {
namespace {

class PctStrategy final : public Strategy {
 public:
  PctStrategy(std::uint32_t depth, std::uint64_t steps_estimate)
      : depth_(std::max<std::uint32_t>(depth, 1)),
        estimate_(std::max<std::uint64_t>(steps_estimate, 1)) {}

  std::string name() const override { return "pct"; }

  void begin_run(std::uint64_t seed) override {
    rng_ = Prng(derive_seed(seed, kStream));
    priority_.clear();
    change_points_.clear();
    for (std::uint32_t i = 1; i < depth_; ++i) change_points_.push_back(rng_.below(estimate_));
    std::sort(change_points_.begin(), change_points_.end());
  }

  std::uint32_t pick(const std::vector<TaskView>& runnable, std::uint32_t last,
                     std::uint64_t step) override {
    for (const TaskView& t : runnable) {
      // New tasks get a random priority above every change-point priority.
      if (priority_.find(t.id) == priority_.end()) priority_[t.id] = depth_ + rng_.below(1u << 20);
    }
    for (std::size_t i = 0; i < change_points_.size(); ++i) {
      if (change_points_[i] == step && priority_.count(last) != 0) {
        priority_[last] = static_cast<std::uint64_t>(i);  // below every initial priority
      }
    }
    std::uint32_t best = runnable.front().id;
    for (const TaskView& t : runnable) {
      if (priority_[t.id] > priority_[best]) best = t.id;
    }
    return best;
  }

 private:
  static constexpr std::uint64_t kStream = 0x9c7;
  std::uint32_t depth_;
  std::uint64_t estimate_;
  Prng rng_{0};
  std::map<std::uint32_t, std::uint64_t> priority_;
  std::vector<std::uint64_t> change_points_;
};

}  // namespace

std::unique_ptr<Strategy> make_pct_strategy(std::uint32_t depth, std::uint64_t steps_estimate) {
  return std::make_unique<PctStrategy>(depth, steps_estimate);
}

}  // namespace cowstate::sim
