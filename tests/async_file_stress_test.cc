// Real-thread stress test of make_async_writable_file (cowstate/checkpoint_storage.h): the
// test's thread appends, syncs and closes while the file's I/O thread writes, with small
// buffers so that the caller waits for spare buffers all the time, a wrapped file that is
// sometimes slow, an error injected at a random append or sync of a third of the files, and
// half the files taking their buffers from a shared pool.
// Every file must hold exactly the bytes appended, in order, up to the first error; the
// first error must be reported (at the latest by close) and by every call after it.
//
// Bounded by time (COWSTATE_STRESS_SECONDS, default 2); seed from COWSTATE_STRESS_SEED
// (default: time). Thread timing is not reproducible; the seed fixes the sizes and faults.
// Clean under the tsan preset.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cowstate/checkpoint_storage.h"
#include "cowstate/sim/random.h"
#include "memory_file.h"
#include "stress_env.h"

using Clock = std::chrono::steady_clock;

TEST_CASE(
    "an async file written, synced and closed on one thread while its I/O thread writes "
    "keeps every byte in order and reports the first error",
    "[stress][threads][async]") {
  const std::uint64_t seed = stress_env::seed();
  INFO("COWSTATE_STRESS_SEED=" << seed);
  cowstate::sim::Prng rng(seed);
  const auto deadline = stress_env::deadline();
  cowstate::AsyncBufferPool pool(3);  // half the files share it
  std::uint64_t files = 0;
  std::uint64_t failed = 0;
  std::uint64_t bytes = 0;
  while (Clock::now() < deadline) {
    memory_file::Record rec;
    rec.slow = rng.chance(1, 2);
    const bool inject = rng.chance(1, 3);
    if (inject && rng.chance(1, 2)) {
      rec.fail_sync = 1 + rng.below(3);
    } else if (inject) {
      rec.fail_append = 1 + rng.below(40);
    }
    const cowstate::AsyncFileOptions options{.buffer_bytes = 4096 + rng.below(3) * 4096,
                                             .buffers = 2 + rng.below(3),
                                             .pool = rng.chance(1, 2) ? &pool : nullptr};
    auto file = cowstate::make_async_writable_file(std::make_unique<memory_file::MemoryFile>(&rec),
                                                   options);
    std::vector<std::byte> written;
    cowstate::Status first;
    const std::uint64_t calls = 1 + rng.below(200);
    for (std::uint64_t i = 0; i < calls && first.ok(); ++i) {
      if (rng.chance(1, 16)) {
        first = file->sync();
        continue;
      }
      std::vector<std::byte> chunk(rng.below(rng.chance(1, 8) ? 20000 : 3000));
      for (std::byte& b : chunk) b = static_cast<std::byte>(rng.below(256));
      first = file->append(chunk);
      written.insert(written.end(), chunk.begin(), chunk.end());
    }
    bool closed = false;
    if (first.ok()) {
      first = file->close();
      closed = true;
    }
    if (first.ok()) {
      // No fault reached: everything arrived.
      CHECK(rec.bytes() == written);
      CHECK_FALSE(rec.failed());
    } else {
      ++failed;
      CHECK(rec.failed());
      if (!closed) {
        const std::byte one[1] = {std::byte{7}};
        CHECK(file->append(one).message() == first.message());
        CHECK(file->close().message() == first.message());
      }
      // What arrived is a prefix of what was appended.
      const std::vector<std::byte> kept = rec.bytes();
      REQUIRE(kept.size() <= written.size());
      CHECK(std::equal(kept.begin(), kept.end(), written.begin()));
    }
    CHECK(rec.closed);
    bytes += written.size();
    ++files;
  }
  std::printf("async file stress: seed %llu, %llu files, %llu with an error, %llu bytes\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(files),
              static_cast<unsigned long long>(failed), static_cast<unsigned long long>(bytes));
  CHECK(files > 0);
}
