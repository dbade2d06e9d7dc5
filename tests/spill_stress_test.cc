// Real-thread stress test of the spill tier under live checkpoints (spill_tier.h, rules 2-4):
// the test's thread is the writer: it updates a value state, spills and loads key groups at
// random and starts checkpoints; two checkpoint threads write them in small steps (reading
// heap map snapshots, retired spilled maps and LMDB read transactions on their own threads),
// then restore each into a fresh backend and compare it with the image the writer recorded
// at the checkpoint's sync phase. Snapshots are released on those threads as they are
// written.
//
// Bounded by time (COWSTATE_STRESS_SECONDS, default 2); seed from COWSTATE_STRESS_SEED
// (default: time). Thread timing is not reproducible; the seed fixes the operation mix.
// Clean under the tsan preset.
#include <catch2/catch.hpp>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "backend_fixture.h"
#include "cowstate/checkpoint.h"
#include "cowstate/sim/random.h"
#include "stress_env.h"

using namespace backend_test;

namespace {

using Expected = std::map<std::uint64_t, std::int64_t>;

struct Job {
  std::unique_ptr<cowstate::BackendSnapshot> snapshot;
  Expected expected;
};

// A queue of checkpoints to write, closed when the writer is done.
class Jobs {
 public:
  void push(Job j) {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(j));
    cv_.notify_one();
  }
  bool pop(Job& j) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !jobs_.empty() || closed_; });
    if (jobs_.empty()) return false;
    j = std::move(jobs_.front());
    jobs_.pop_front();
    return true;
  }
  void close() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    cv_.notify_all();
  }
  std::size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return jobs_.size();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  bool closed_ = false;
};

}  // namespace

TEST_CASE(
    "checkpoints written on two threads while the writer spills and loads see their sync "
    "phase's state",
    "[stress][threads][spill]") {
  const std::uint64_t seed = stress_env::seed();
  INFO("COWSTATE_STRESS_SEED=" << seed);
  cowstate::sim::Prng rng(seed);
  cowstate::SpillOptions spill;
  spill.memory_budget_bytes = std::size_t{1} << 40;  // moves by hand only
  spill.check_every_key_switches = 0xffffffffu;
  spill.cold_cache_ratio = 0;  // every cold access reaches LMDB
  Backend b(KeyGroupRange::all(128), 128, {}, nullptr, spill);
  auto& value = b.value_state<VoidNamespaceSerializer, Int64Serializer>("value", -1);
  Expected model;

  Jobs jobs;
  std::atomic<std::uint64_t> checked{0};
  std::atomic<std::uint64_t> mismatches{0};
  auto checkpointer = [&] {
    Job j;
    while (jobs.pop(j)) {
      cowstate::MemoryCheckpointSink sink;
      cowstate::CheckpointWriter w(std::move(j.snapshot), &sink);
      while (!w.step(7)) std::this_thread::yield();
      if (!w.done()) {
        ++mismatches;
        continue;
      }
      Backend r(KeyGroupRange::all(128));
      auto& rv = r.value_state<VoidNamespaceSerializer, Int64Serializer>("value", -1);
      const cowstate::CheckpointInput in{"checkpoint", sink.bytes()};
      if (!r.restore({&in, 1}).ok()) {
        ++mismatches;
        continue;
      }
      Expected got;
      for (std::int32_t g = 0; g < 128; ++g) {
        rv.table().map(g).for_each([&](const auto& k, const auto&, const auto& v) { got[k] = v; });
      }
      if (got != j.expected) ++mismatches;
      ++checked;
    }
  };
  std::thread t1(checkpointer);
  std::thread t2(checkpointer);

  const auto deadline = stress_env::deadline();
  std::uint64_t id = 0;
  std::uint64_t moves = 0;
  while (std::chrono::steady_clock::now() < deadline || id < 10) {
    for (int i = 0; i < 200; ++i) {
      const std::uint64_t k = rng.next() % 2000;
      REQUIRE(b.set_current_key(k).ok());
      if (rng.next() % 5 == 0) {
        value.clear();
        model.erase(k);
      } else {
        const std::int64_t v = value.value() + 1;
        value.update(v);
        model[k] = v;
      }
    }
    const auto g = static_cast<std::int32_t>(rng.next() % 128);
    const cowstate::Tier tier = b.table_at(0).memory(g).tier;
    REQUIRE((tier == cowstate::Tier::heap ? b.spill(0, g) : b.load(0, g)).ok());
    ++moves;
    if (rng.next() % 4 == 0 && jobs.size() < 4) jobs.push({b.snapshot(++id), model});
  }
  jobs.close();
  t1.join();
  t2.join();
  CHECK(mismatches.load() == 0);
  CHECK(checked.load() == id);
  CHECK(moves > 0);
  REQUIRE(b.check_accounting());
}
