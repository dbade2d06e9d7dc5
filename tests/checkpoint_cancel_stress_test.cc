// Real-thread stress test of the race between a cancel and the commit of a checkpoint
// (C7, cowstate/checkpoint_storage.h): the test's thread writes a checkpoint of a backend
// and commits it, as an async checkpoint thread does, while a second thread cancels it
// after a random delay, as the task thread does when a checkpoint is aborted; half the time
// the writing thread stalls between its last block and the commit.
// Every cancel must be answered by where the commit was: `accepted` means the checkpoint is
// never published and its temporary file is gone once the writing thread has finished;
// `too_late` means the commit had begun and publishes it (this test injects no I/O error).
// Both answers must occur, so the race is really run on both sides.
//
// Bounded by time (COWSTATE_STRESS_SECONDS, default 2); seed from COWSTATE_STRESS_SEED
// (default: time). Thread timing is not reproducible; the seed fixes the delays and sizes.
// Clean under the tsan preset.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <thread>

#include "backend_fixture.h"
#include "cowstate/checkpoint_storage.h"
#include "cowstate/sim/random.h"
#include "stress_env.h"

using Clock = std::chrono::steady_clock;
using namespace backend_test;

TEST_CASE(
    "a checkpoint cancelled from another thread while it is written and committed is "
    "published exactly when the cancel came too late",
    "[stress][threads][cancel]") {
  const std::uint64_t seed = stress_env::seed();
  INFO("COWSTATE_STRESS_SEED=" << seed);
  cowstate::sim::Prng rng(seed);
  TempDir dir;
  cowstate::StorageOptions options;
  options.retain = 2;
  auto opened =
      cowstate::CheckpointStorage::open(dir.path(), cowstate::posix_file_system(), options);
  REQUIRE(opened.ok());
  cowstate::CheckpointStorage& storage = **opened;
  Backend b(KeyGroupRange::all(128));
  States s(b);
  populate(b, s, 2000, seed);

  const auto deadline = stress_env::deadline();
  std::uint64_t id = 0, accepted = 0, too_late = 0;
  std::optional<std::uint64_t> newest;
  // How long a checkpoint takes from begin to commit, from the last one: the cancel's delay
  // is drawn against it, so both answers come up in every build, however slow.
  std::int64_t write_us = 3000;
  while (Clock::now() < deadline || accepted == 0 || too_late == 0) {
    REQUIRE(id < 100000);  // both answers must come up long before this
    ++id;
    auto pending = storage.begin(id);
    REQUIRE(pending.ok());
    cowstate::PendingCheckpoint& p = **pending;
    const auto delay = std::chrono::microseconds(
        rng.below(static_cast<std::uint64_t>(std::max<std::int64_t>(2 * write_us, 1))));
    const auto started = Clock::now();
    std::atomic<cowstate::CancelResult> answer{cowstate::CancelResult::finished};
    std::thread canceller([&p, &answer, delay] {
      std::this_thread::sleep_for(delay);
      answer.store(p.cancel());
    });
    cowstate::CheckpointWriter w(b.snapshot(id), &p);
    while (!w.step(1 + rng.below(256))) {
    }
    // A writing thread may stall between its last block and the commit: where a cancel finds
    // the file whole and only the commit can refuse it.
    if (rng.chance(1, 2)) std::this_thread::sleep_for(std::chrono::microseconds(rng.below(800)));
    cowstate::Status committed = w.done() ? p.commit() : cowstate::Status::error("not written");
    if (!w.done()) p.abort();
    write_us =
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started).count();
    canceller.join();
    const cowstate::CancelResult got = answer.load();
    INFO("checkpoint " << id << ": cancel " << cowstate::cancel_result_name(got) << ", commit "
                       << (committed.ok() ? "ok" : committed.message()));
    auto complete = storage.complete_checkpoints();
    REQUIRE(complete.ok());
    const bool published = std::find(complete->begin(), complete->end(), id) != complete->end();
    if (got == cowstate::CancelResult::accepted) {
      ++accepted;
      CHECK_FALSE(committed.ok());
      CHECK_FALSE(published);
      CHECK(w.snapshot()->live_key_groups() == 0);
    } else {
      REQUIRE(got == cowstate::CancelResult::too_late);
      ++too_late;
      CHECK(committed.ok());
      CHECK(published);
      newest = id;
    }
    for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
      CHECK(e.path().extension() != ".tmp");
    }
    CHECK(storage.latest()->value_or(0) == newest.value_or(0));
  }
  INFO(accepted << " accepted, " << too_late << " too late");
  CHECK(accepted > 0);
  CHECK(too_late > 0);
}
