// Checkpoint storage on the real file system: publishing, keep-last-N, cleanup of what a
// crash leaves, and an injected I/O error at every mutating operation of a checkpoint
// (cowstate/checkpoint_storage.h).
#include "cowstate/checkpoint_storage.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "backend_fixture.h"

using namespace backend_test;
using cowstate::CheckpointStorage;
using cowstate::FaultInjectionFileSystem;

namespace {

std::unique_ptr<CheckpointStorage> open_storage(
    const std::string& dir, cowstate::FileSystem& fs = cowstate::posix_file_system(),
    std::size_t retain = 3) {
  auto s = CheckpointStorage::open(dir, fs, {retain});
  REQUIRE(s.ok());
  return std::move(*s);
}

// Writes checkpoint `id` of `b` through `storage`: the async phase, then commit.
cowstate::Status write_to(CheckpointStorage& storage, Backend& b, std::uint64_t id) {
  auto pending = storage.begin(id);
  if (!pending.ok()) return pending.status();
  cowstate::CheckpointWriter w(b.snapshot(id), pending->get(), {cowstate::Compression::lz4, 1});
  while (!w.step(64)) {
  }
  if (w.failed()) return w.status();
  return (*pending)->commit();
}

Image restored_image(CheckpointStorage& storage, std::uint64_t id) {
  auto bytes = storage.read(id);
  REQUIRE(bytes.ok());
  return restore_image(*bytes);
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

TEST_CASE("a committed checkpoint is complete, the latest, and reads back exactly", "[storage]") {
  TempDir dir;
  auto storage = open_storage(dir.path());
  CHECK(storage->latest()->has_value() == false);
  Backend b(KeyGroupRange::all(128));
  States s(b);
  populate(b, s, 500, 1);
  REQUIRE(write_to(*storage, b, 1).ok());
  CHECK(storage->latest()->value() == 1);
  CHECK(restored_image(*storage, 1) == image(s));
  CHECK(files_in(dir.path()) == std::vector<std::string>{"chk-00000000000000000001.cscp",
                                                         "chk-00000000000000000001.manifest"});
  // Ids only grow.
  auto again = storage->begin(1);
  REQUIRE_FALSE(again.ok());
  CHECK(again.status().message().find("checkpoint 1 is not above the latest complete "
                                      "checkpoint 1") != std::string::npos);
}

TEST_CASE("storage keeps the last N complete checkpoints", "[storage]") {
  TempDir dir;
  auto storage = open_storage(dir.path(), cowstate::posix_file_system(), 2);
  Backend b(KeyGroupRange::all(128));
  States s(b);
  std::vector<Image> images;
  for (std::uint64_t id = 1; id <= 5; ++id) {
    populate(b, s, 100, id);
    images.push_back(image(s));
    REQUIRE(write_to(*storage, b, id).ok());
  }
  CHECK(*storage->complete_checkpoints() == std::vector<std::uint64_t>{4, 5});
  CHECK(files_in(dir.path()).size() == 4);
  CHECK(restored_image(*storage, 4) == images[3]);
  CHECK(restored_image(*storage, 5) == images[4]);
  CHECK_FALSE(storage->read(3).ok());
}

TEST_CASE(
    "open removes temporaries and data files without a manifest, neither is taken for "
    "complete",
    "[storage]") {
  TempDir dir;
  Backend b(KeyGroupRange::all(128));
  States s(b);
  populate(b, s, 100, 1);
  {
    auto storage = open_storage(dir.path());
    REQUIRE(write_to(*storage, b, 1).ok());
  }
  // What crashes leave: a half-written temporary, a data file whose manifest never came.
  std::ofstream(dir.path() + "/chk-00000000000000000002.cscp.tmp") << "partial";
  std::filesystem::copy_file(dir.path() + "/chk-00000000000000000001.cscp",
                             dir.path() + "/chk-00000000000000000003.cscp");
  std::ofstream(dir.path() + "/chk-00000000000000000004.manifest.tmp") << "x";
  std::ofstream(dir.path() + "/unrelated.txt") << "kept";
  {
    // Before cleanup, the orphans are already not complete.
    auto fs_listing = files_in(dir.path());
    CHECK(fs_listing.size() == 6);
  }
  auto storage = open_storage(dir.path());
  CHECK(*storage->complete_checkpoints() == std::vector<std::uint64_t>{1});
  CHECK(files_in(dir.path()) == std::vector<std::string>{"chk-00000000000000000001.cscp",
                                                         "chk-00000000000000000001.manifest",
                                                         "unrelated.txt"});
}

TEST_CASE("a corrupt data file or manifest is refused with the file's name", "[storage]") {
  TempDir dir;
  auto storage = open_storage(dir.path());
  Backend b(KeyGroupRange::all(128));
  States s(b);
  populate(b, s, 100, 1);
  REQUIRE(write_to(*storage, b, 1).ok());
  const std::string data = storage->data_path(1);
  {
    std::fstream f(data, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x7f');
  }
  auto bytes = storage->read(1);
  REQUIRE_FALSE(bytes.ok());
  CHECK(bytes.status().message() == data +
                                        ": expected the XXH3-64 recorded in the manifest, found "
                                        "another: the file is corrupt");
  std::filesystem::resize_file(storage->manifest_path(1), 10);
  CHECK(storage->complete_checkpoints()->empty());
  CHECK_FALSE(storage->read(1).ok());
}

TEST_CASE(
    "an I/O error at any write of a checkpoint leaves the previous one the latest and "
    "restorable, and no file of the failed one",
    "[storage][faults]") {
  Backend b(KeyGroupRange::all(128));
  States s(b);
  populate(b, s, 300, 1);
  const Image first = image(s);

  // Count the mutating operations of one checkpoint after the first.
  std::uint64_t ops_of_second = 0;
  {
    TempDir dir;
    FaultInjectionFileSystem fs(cowstate::posix_file_system());
    auto storage = open_storage(dir.path(), fs);
    REQUIRE(write_to(*storage, b, 1).ok());
    const std::uint64_t before = fs.operations();
    REQUIRE(write_to(*storage, b, 2).ok());
    ops_of_second = fs.operations() - before;
  }
  REQUIRE(ops_of_second >= 10);

  populate(b, s, 300, 2);  // the second checkpoint differs from the first
  for (std::uint64_t n = 1; n <= ops_of_second; ++n) {
    INFO("failing mutating operation " << n << " of " << ops_of_second);
    TempDir dir;
    FaultInjectionFileSystem fs(cowstate::posix_file_system());
    auto storage = open_storage(dir.path(), fs);
    Backend b1(KeyGroupRange::all(128));
    States s1(b1);
    populate(b1, s1, 300, 1);
    REQUIRE(write_to(*storage, b1, 1).ok());
    fs.fail_at(n);
    const cowstate::Status st = write_to(*storage, b, 2);
    REQUIRE(fs.injected());
    // An error in pruning (after the checkpoint is complete) is not an error of the commit.
    if (st.ok()) {
      CHECK(storage->latest()->value() == 2);
      continue;
    }
    CHECK(st.message().find("injected I/O error") != std::string::npos);
    CHECK(storage->latest()->value() == 1);
    CHECK(restored_image(*storage, 1) == first);
    // Nothing of checkpoint 2 under a final name; a reopen cleans any temporary.
    auto reopened = open_storage(dir.path());
    CHECK(files_in(dir.path()) == std::vector<std::string>{"chk-00000000000000000001.cscp",
                                                           "chk-00000000000000000001.manifest"});
    // And the next checkpoint works.
    REQUIRE(write_to(*reopened, b, 2).ok());
    CHECK(restored_image(*reopened, 2) == image(s));
  }
}
