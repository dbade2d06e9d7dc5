// Replay strategy: runs a recorded schedule (the task id of every step) exactly.
#include <algorithm>
#include <vector>

#include "cowstate/sim/strategy.h"

namespace cowstate::sim {
namespace {

class ReplayStrategy final : public Strategy {
 public:
  explicit ReplayStrategy(std::vector<std::uint32_t> schedule) : schedule_(std::move(schedule)) {}
  std::string name() const override { return "replay"; }
  void begin_run(std::uint64_t /*seed*/) override {}
  std::uint32_t pick(const std::vector<TaskView>& runnable, std::uint32_t last,
                     std::uint64_t step) override {
    auto has = [&runnable](std::uint32_t id) {
      return std::any_of(runnable.begin(), runnable.end(),
                         [id](const TaskView& t) { return t.id == id; });
    };
    if (step < schedule_.size() && has(schedule_[step])) return schedule_[step];
    if (has(last)) return last;
    return runnable.front().id;
  }

 private:
  std::vector<std::uint32_t> schedule_;
};

}  // namespace

std::unique_ptr<Strategy> make_replay_strategy(std::vector<std::uint32_t> schedule) {
  return std::make_unique<ReplayStrategy>(std::move(schedule));
}

}  // namespace cowstate::sim
