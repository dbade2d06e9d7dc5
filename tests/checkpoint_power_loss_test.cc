// Checkpoint storage under power loss: on the simulated disk, every crash state of a run of
// commits (every prefix of its file-system operations times every allowed subset of what was
// not yet durable) reopens to a store whose latest checkpoint is at least the newest one
// whose commit had returned, keeps the acknowledged checkpoints its retention keeps, and
// every checkpoint it calls complete reads back exactly the bytes it was given.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cowstate/checkpoint_storage.h"
#include "cowstate/simulated_file_system.h"

using cowstate::CheckpointStorage;
using cowstate::CrashState;
using cowstate::DiskImage;
using cowstate::SimulatedFileSystem;

namespace {

// The bytes of checkpoint `id`: its own length and pattern, so a mix-up shows.
std::vector<std::byte> checkpoint_bytes(std::uint64_t id) {
  std::vector<std::byte> bytes(700 * (id % 7) + 100);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = static_cast<std::byte>((i * 7 + id * 31) % 251);
  }
  return bytes;
}

struct Run {
  SimulatedFileSystem fs;
  // (operations recorded when the commit of `id` returned, id), in commit order.
  std::vector<std::pair<std::size_t, std::uint64_t>> acknowledged;
};

// Opens a store and commits checkpoints 1..count on a fresh simulated disk.
void commit_checkpoints(Run& run, std::uint64_t count, const cowstate::StorageOptions& options) {
  auto opened = CheckpointStorage::open("store", run.fs, options);
  REQUIRE(opened.ok());
  for (std::uint64_t id = 1; id <= count; ++id) {
    auto pending = (*opened)->begin(id);
    REQUIRE(pending.ok());
    REQUIRE((*pending)->append(checkpoint_bytes(id)).ok());
    REQUIRE((*pending)->commit().ok());
    run.acknowledged.emplace_back(run.fs.history().size(), id);
  }
}

// What a crash state must reopen to; empty when it does.
std::string check_crash_state(const Run& run, const CrashState& c,
                              const cowstate::StorageOptions& options) {
  std::uint64_t acked = 0;
  for (const auto& [ops, id] : run.acknowledged) {
    if (ops <= c.prefix_len) acked = id;
  }
  SimulatedFileSystem disk(c.image);
  const std::string where = "after " + std::to_string(c.prefix_len) + " operations: ";
  auto opened = CheckpointStorage::open("store", disk, options);
  if (!opened.ok()) return where + "open failed: " + opened.status().message();
  auto latest = (*opened)->latest();
  if (!latest.ok()) return where + "latest() failed: " + latest.status().message();
  if (acked != 0 && (!latest->has_value() || **latest < acked)) {
    return where + "checkpoint " + std::to_string(acked) + " was acknowledged, latest() is " +
           (latest->has_value() ? std::to_string(**latest) : std::string("none"));
  }
  // Every checkpoint the store calls complete reads back exactly its bytes, the latest first.
  auto complete = (*opened)->complete_checkpoints();
  if (!complete.ok())
    return where + "complete_checkpoints() failed: " + complete.status().message();
  for (const std::uint64_t id : *complete) {
    auto bytes = (*opened)->read(id);
    if (!bytes.ok())
      return where + "read of checkpoint " + std::to_string(id) +
             " failed: " + bytes.status().message();
    if (*bytes != checkpoint_bytes(id)) {
      return where + "checkpoint " + std::to_string(id) + " reads back other bytes";
    }
  }
  if (latest->has_value() && (complete->empty() || complete->back() != **latest)) {
    return where + "latest() is not the newest complete checkpoint";
  }
  // Retention keeps the `retain` newest checkpoints, counted from the latest (a later commit
  // may have pruned an acknowledged one): those of them that were acknowledged were durable.
  const std::uint64_t newest = latest->value_or(0);
  for (std::uint64_t id = acked; id > 0 && id + options.retain > newest; --id) {
    if (std::find(complete->begin(), complete->end(), id) == complete->end()) {
      return where + "retained checkpoint " + std::to_string(id) + " is not complete";
    }
  }
  return "";
}

}  // namespace

TEST_CASE(
    "checkpoint storage reopens at the newest acknowledged checkpoint or later in every crash "
    "state",
    "[simdisk][powerloss]") {
  cowstate::StorageOptions options;
  options.io_thread = false;
  std::uint64_t count = 0;
  std::string first_failure;
  for (const std::size_t retain : {std::size_t{1}, std::size_t{2}, std::size_t{3}}) {
    options.retain = retain;
    Run run;
    commit_checkpoints(run, 110, options);
    count += run.fs.for_each_crash_state(1'000'000, [&](const CrashState& c) {
      const std::string failure = check_crash_state(run, c, options);
      if (!failure.empty() && first_failure.empty()) {
        first_failure = "retain=" + std::to_string(retain) + ", " + failure;
      }
    });
  }
  INFO("crash states: " << count << "; first failure: " << first_failure);
  CHECK(first_failure.empty());
  CHECK(count >= 10'000);
}
