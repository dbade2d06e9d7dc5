// Random strategy: every step picks a runnable task with probability proportional to its
// workload weight.
#include <vector>

#include "cowstate/sim/strategy.h"

namespace cowstate::sim {
namespace {

class RandomStrategy final : public Strategy {
 public:
  std::string name() const override { return "random"; }
  void begin_run(std::uint64_t seed) override { rng_ = Prng(derive_seed(seed, kStream)); }
  std::uint32_t pick(const std::vector<TaskView>& runnable, std::uint32_t /*last*/,
                     std::uint64_t /*step*/) override {
    weights_.clear();
    for (const TaskView& t : runnable) weights_.push_back(t.weight == 0 ? 1 : t.weight);
    return runnable[pick_weighted(rng_, weights_)].id;
  }

 private:
  static constexpr std::uint64_t kStream = 0x5c4ed;
  Prng rng_{0};
  std::vector<std::uint32_t> weights_;
};

}  // namespace

std::unique_ptr<Strategy> make_random_strategy() { return std::make_unique<RandomStrategy>(); }

}  // namespace cowstate::sim
