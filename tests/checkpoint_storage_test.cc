// Checkpoint storage on the real file system: publishing, keep-last-N, cleanup of what a
// crash leaves, and an injected I/O error at every mutating operation of a checkpoint
// (cowstate/checkpoint_storage.h).
#include "cowstate/checkpoint_storage.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "backend_fixture.h"
#include "memory_file.h"

using namespace backend_test;
using cowstate::CheckpointStorage;
using cowstate::FaultInjectionFileSystem;

namespace {

// With io_thread, the data file is written through an async file of small buffers, so a
// checkpoint of a few hundred entries takes several of them.
std::unique_ptr<CheckpointStorage> open_storage(
    const std::string& dir, cowstate::FileSystem& fs = cowstate::posix_file_system(),
    std::size_t retain = 3, bool io_thread = false) {
  cowstate::StorageOptions options;
  options.retain = retain;
  options.io_thread = io_thread;
  options.io_buffers.buffer_bytes = 4096;
  auto s = CheckpointStorage::open(dir, fs, options);
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

}  // namespace

TEST_CASE("a committed checkpoint is complete, the latest, and reads back exactly", "[storage]") {
  const bool io_thread = GENERATE(false, true);
  INFO("io_thread " << io_thread);
  TempDir dir;
  auto storage = open_storage(dir.path(), cowstate::posix_file_system(), 3, io_thread);
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

// C9: a damaged newest checkpoint is never passed over silently.
TEST_CASE("a damaged newest checkpoint makes latest() an error unless falling back is asked for",
          "[storage][damage]") {
  TempDir dir;
  Backend b(KeyGroupRange::all(128));
  States s(b);
  std::vector<Image> images;
  {
    auto storage = open_storage(dir.path());
    for (std::uint64_t id = 1; id <= 3; ++id) {
      populate(b, s, 50, id);
      REQUIRE(write_to(*storage, b, id).ok());
      images.push_back(image(s));
    }
  }
  const std::string manifest3 = dir.path() + "/chk-00000000000000000003.manifest";
  const std::string data3 = dir.path() + "/chk-00000000000000000003.cscp";
  auto damage_is_reported = [&](const std::string& why) {
    auto storage = open_storage(dir.path());
    auto found = storage->scan();
    REQUIRE(found.ok());
    CHECK(found->complete == std::vector<std::uint64_t>{1, 2});
    REQUIRE(found->damaged.size() == 1);
    CHECK(found->damaged[0].id == 3);
    CHECK_THAT(found->damaged[0].reason, Catch::Matchers::Contains(why));
    auto latest = storage->latest();
    REQUIRE_FALSE(latest.ok());
    CHECK_THAT(latest.status().message(),
               Catch::Matchers::StartsWith(dir.path() + ": checkpoint 3 is damaged ("));
    CHECK_THAT(latest.status().message(), Catch::Matchers::Contains(why));
    CHECK_THAT(latest.status().message(),
               Catch::Matchers::Contains("the newest complete checkpoint is 2"));
    // A new checkpoint may not take the damaged one's files.
    auto again = storage->begin(3);
    REQUIRE_FALSE(again.ok());
    CHECK_THAT(again.status().message(), Catch::Matchers::Contains("the damaged checkpoint 3"));
    // Falling back is explicit, and goes to the newest complete one.
    cowstate::StorageOptions fall_back;
    fall_back.io_thread = false;
    fall_back.fall_back_past_damaged = true;
    auto lenient = CheckpointStorage::open(dir.path(), cowstate::posix_file_system(), fall_back);
    REQUIRE(lenient.ok());
    CHECK((*lenient)->latest()->value() == 2);
    CHECK(restored_image(**lenient, 2) == images[1]);
  };
  SECTION("a bit flip in its manifest") {
    {
      std::fstream f(manifest3, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(20);
      f.put('\x01');
    }
    damage_is_reported(manifest3 + ": offset 32: expected manifest checksum");
  }
  SECTION("its data file missing") {
    std::filesystem::remove(data3);
    damage_is_reported(data3 + ": missing, though its manifest " + manifest3 + " is in place");
  }
  SECTION("its manifest swapped with an older one") {
    const std::string manifest2 = dir.path() + "/chk-00000000000000000002.manifest";
    std::filesystem::rename(manifest3, dir.path() + "/swap");
    std::filesystem::rename(manifest2, manifest3);
    std::filesystem::rename(dir.path() + "/swap", manifest2);
    auto storage = open_storage(dir.path());
    auto found = storage->scan();
    REQUIRE(found.ok());
    CHECK(found->complete == std::vector<std::uint64_t>{1});
    REQUIRE(found->damaged.size() == 2);
    CHECK_THAT(
        found->damaged[1].reason,
        Catch::Matchers::Contains(manifest3 + ": offset 8: expected checkpoint id 3, found 2"));
    CHECK_FALSE(storage->latest().ok());
  }
}

// C9: damaged checkpoints age out with the complete ones around them.
TEST_CASE("pruning removes damaged checkpoints older than every retained one",
          "[storage][damage]") {
  TempDir dir;
  Backend b(KeyGroupRange::all(128));
  States s(b);
  populate(b, s, 50, 1);
  auto storage = open_storage(dir.path(), cowstate::posix_file_system(), 3);
  REQUIRE(write_to(*storage, b, 1).ok());
  REQUIRE(write_to(*storage, b, 2).ok());
  std::filesystem::resize_file(storage->manifest_path(2), 39);
  CHECK_FALSE(storage->latest().ok());
  // While a complete checkpoint older than it is retained, the damaged one stays for a look.
  for (std::uint64_t id = 3; id <= 4; ++id) {
    REQUIRE(write_to(*storage, b, id).ok());
    auto found = storage->scan();
    REQUIRE(found.ok());
    CHECK(found->complete.front() == 1);
    REQUIRE(found->damaged.size() == 1);
    CHECK(found->damaged[0].id == 2);
    CHECK(storage->latest()->value() == id);
  }
  // Checkpoint 1 is dropped by retention, and 2, older than every retained one, goes with it.
  REQUIRE(write_to(*storage, b, 5).ok());
  auto found = storage->scan();
  REQUIRE(found.ok());
  CHECK(found->complete == std::vector<std::uint64_t>{3, 4, 5});
  CHECK(found->damaged.empty());
  CHECK(files_in(dir.path()) ==
        std::vector<std::string>{
            "chk-00000000000000000003.cscp", "chk-00000000000000000003.manifest",
            "chk-00000000000000000004.cscp", "chk-00000000000000000004.manifest",
            "chk-00000000000000000005.cscp", "chk-00000000000000000005.manifest"});
  // A damaged manifest whose data file is gone is removed as well.
  std::filesystem::resize_file(storage->manifest_path(4), 0);
  std::filesystem::remove(storage->data_path(4));
  REQUIRE(write_to(*storage, b, 6).ok());
  REQUIRE(write_to(*storage, b, 7).ok());
  REQUIRE(write_to(*storage, b, 8).ok());
  CHECK(storage->scan()->damaged.empty());
  CHECK(*storage->complete_checkpoints() == std::vector<std::uint64_t>{6, 7, 8});
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
  // The message names both checksums, the file's size and where the expected one is from.
  const std::string& message = bytes.status().message();
  CHECK_THAT(message, Catch::Matchers::StartsWith(data + ": expected XXH3-64 0x"));
  CHECK_THAT(message, Catch::Matchers::Contains(" bytes (from the manifest " +
                                                storage->manifest_path(1) + "), found 0x"));
  CHECK_THAT(message, Catch::Matchers::EndsWith(": the file is corrupt"));
  std::smatch sums;
  REQUIRE(std::regex_search(
      message, sums,
      std::regex("XXH3-64 (0x[0-9a-f]{16}) of its ([0-9]+) bytes .* found (0x[0-9a-f]{16})")));
  CHECK(sums[1] != sums[3]);
  CHECK(sums[2] == std::to_string(std::filesystem::file_size(data)));
  {
    std::fstream f(storage->manifest_path(1), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(12);
    f.put('\x7f');
  }
  auto manifest = storage->read(1);
  REQUIRE_FALSE(manifest.ok());
  CHECK_THAT(manifest.status().message(),
             Catch::Matchers::Matches(".*: offset 32: expected manifest checksum 0x[0-9a-f]{16} "
                                      "\\(XXH3-64 of bytes 0-31\\), found 0x[0-9a-f]{16}: the "
                                      "manifest is corrupt"));
  std::filesystem::resize_file(storage->manifest_path(1), 10);
  CHECK(storage->complete_checkpoints()->empty());
  CHECK_FALSE(storage->read(1).ok());
}

TEST_CASE(
    "an I/O error at any write of a checkpoint leaves the previous one the latest and "
    "restorable, and no file of the failed one",
    "[storage][faults]") {
  const bool io_thread = GENERATE(false, true);
  INFO("io_thread " << io_thread);
  Backend b(KeyGroupRange::all(128));
  States s(b);
  populate(b, s, 300, 1);
  const Image first = image(s);

  // Count the mutating operations of one checkpoint after the first.
  std::uint64_t ops_of_second = 0;
  {
    TempDir dir;
    FaultInjectionFileSystem fs(cowstate::posix_file_system());
    auto storage = open_storage(dir.path(), fs, 3, io_thread);
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
    auto storage = open_storage(dir.path(), fs, 3, io_thread);
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

namespace {

// `n` bytes that differ from position to position.
std::vector<std::byte> pattern(std::size_t n, std::uint64_t seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = static_cast<std::byte>((i * 131 + seed * 7 + (i >> 9)) & 0xff);
  }
  return v;
}

}  // namespace

TEST_CASE(
    "an async file writes every byte in order, in appends of whole buffers but the last, "
    "whatever the sizes appended",
    "[storage][async]") {
  const std::size_t buffers = GENERATE(2u, 3u, 5u);
  const bool slow = GENERATE(false, true);
  INFO("buffers " << buffers << ", slow " << slow);
  memory_file::Record rec;
  rec.slow = slow;
  auto file = cowstate::make_async_writable_file(std::make_unique<memory_file::MemoryFile>(&rec),
                                                 {.buffer_bytes = 4096, .buffers = buffers});
  const std::vector<std::byte> data = pattern(300'000, buffers);
  // Sizes from empty to several buffers at once, a sync in the middle.
  const std::size_t sizes[] = {0, 1, 4095, 4096, 4097, 10000, 3, 65536, 77, 12288};
  std::size_t at = 0;
  std::size_t synced = 0;
  for (std::size_t i = 0; at < data.size(); ++i) {
    const std::size_t n = std::min(sizes[i % std::size(sizes)], data.size() - at);
    REQUIRE(file->append(std::span(data).subspan(at, n)).ok());
    at += n;
    if (i == 7) {
      REQUIRE(file->sync().ok());
      synced = at;
    }
  }
  REQUIRE(file->close().ok());
  CHECK(rec.closed);
  CHECK(rec.bytes() == data);
  // A sync sees everything appended before it, drained into the file.
  REQUIRE(rec.synced_at.size() == 1);
  CHECK(rec.synced_at[0] == synced);
  // Buffering: every append the file saw holds a whole buffer, except the one a sync or the
  // close drained, and at most one of those each.
  std::size_t partial = 0;
  for (const auto& a : rec.appends) {
    CHECK(a.size() <= 4096);
    if (a.size() != 4096) ++partial;
  }
  CHECK(partial <= 2);
  CHECK(rec.appends.size() <= data.size() / 4096 + 2);
}

TEST_CASE(
    "an async file reports the wrapped file's first error at a later call at the latest at "
    "close, and at every call after it, and keeps the bytes written before it",
    "[storage][async]") {
  const std::uint64_t failing = GENERATE(1u, 2u, 5u, 9u);
  const bool at_sync = GENERATE(false, true);
  INFO("failing append " << failing << ", check at sync " << at_sync);
  memory_file::Record rec;
  rec.fail_append = failing;
  auto file = cowstate::make_async_writable_file(std::make_unique<memory_file::MemoryFile>(&rec),
                                                 {.buffer_bytes = 4096, .buffers = 2});
  const std::vector<std::byte> data = pattern(4096 * 12 + 100, failing);
  cowstate::Status first;
  for (std::size_t at = 0; at < data.size() && first.ok(); at += 1000) {
    first =
        file->append(std::span(data).subspan(at, std::min<std::size_t>(1000, data.size() - at)));
  }
  if (first.ok()) first = at_sync ? file->sync() : file->close();
  REQUIRE_FALSE(first.ok());
  CHECK(first.message() == "write memory file: failed append " + std::to_string(failing));
  // Sticky: no call after the error claims success (unless it came from close itself).
  const std::byte more[1] = {std::byte{1}};
  if (!rec.closed) {
    CHECK(file->append(more).message() == first.message());
    CHECK(file->sync().message() == first.message());
    CHECK(file->close().message() == first.message());
    CHECK(rec.closed);
  }
  // The appends before the failing one arrived whole and in order; none after it.
  REQUIRE(rec.appends.size() == failing - 1);
  const std::vector<std::byte> kept = rec.bytes();
  CHECK(kept.size() == (failing - 1) * 4096);
  CHECK(std::equal(kept.begin(), kept.end(), data.begin()));
}

TEST_CASE(
    "an async file's sync error is reported after every byte was drained, and close reports "
    "it again and closes the file",
    "[storage][async]") {
  memory_file::Record rec;
  rec.fail_sync = 1;
  auto file = cowstate::make_async_writable_file(std::make_unique<memory_file::MemoryFile>(&rec));
  const std::vector<std::byte> data = pattern(5000, 3);
  REQUIRE(file->append(data).ok());
  const cowstate::Status st = file->sync();
  CHECK(st.message() == "fsync memory file: failed");
  CHECK(file->close().message() == st.message());
  CHECK(rec.closed);
  CHECK(rec.bytes() == data);  // drained before the sync
}

TEST_CASE(
    "an async file destroyed without close stops its thread, leaves whole buffers in order "
    "and never calls close",
    "[storage][async]") {
  memory_file::Record rec;
  rec.slow = true;
  const std::vector<std::byte> data = pattern(4096 * 8 + 100, 4);
  {
    auto file = cowstate::make_async_writable_file(std::make_unique<memory_file::MemoryFile>(&rec),
                                                   {.buffer_bytes = 4096, .buffers = 4});
    REQUIRE(file->append(data).ok());
  }
  // The thread is joined and the wrapped file destroyed; what reached it is a prefix of
  // whole buffers (the last, partial one is never handed over), and no close() came.
  CHECK(rec.destroyed);
  CHECK_FALSE(rec.closed);
  CHECK(rec.appends.size() <= 8);
  for (const auto& a : rec.appends) CHECK(a.size() == 4096);
  const std::vector<std::byte> kept = rec.bytes();
  CHECK(std::equal(kept.begin(), kept.end(), data.begin()));
}

TEST_CASE(
    "with a ManualIo an async file lands nothing until asked, its own buffers in order and "
    "other files' in any order",
    "[storage][async]") {
  cowstate::ManualIo io;
  memory_file::Record a, b;
  auto fa = cowstate::make_async_writable_file(
      std::make_unique<memory_file::MemoryFile>(&a),
      {.buffer_bytes = 8, .buffers = 4, .manual_io = &io, .label = "a"});
  auto fb = cowstate::make_async_writable_file(
      std::make_unique<memory_file::MemoryFile>(&b),
      {.buffer_bytes = 8, .buffers = 4, .manual_io = &io, .label = "b"});
  const std::vector<std::byte> da = pattern(20, 1), db = pattern(9, 2);
  REQUIRE(fa->append(da).ok());  // two buffers queued, four bytes being filled
  REQUIRE(io.waiting() == 1);
  REQUIRE(fb->append(db).ok());  // one queued
  REQUIRE(io.waiting() == 2);
  CHECK(a.appends.empty());
  CHECK(b.appends.empty());
  CHECK(io.label(1) == "b");
  io.land(1);  // b's first, before any of a's
  REQUIRE(b.appends.size() == 1);
  CHECK(b.appends[0] == std::vector<std::byte>(db.begin(), db.begin() + 8));
  CHECK(a.appends.empty());
  REQUIRE(io.waiting() == 1);
  CHECK(io.label(0) == "a");
  io.land(0);
  REQUIRE(a.appends.size() == 1);
  CHECK(a.appends[0] == std::vector<std::byte>(da.begin(), da.begin() + 8));
  REQUIRE(fa->sync().ok());  // drains the rest of a, in order
  CHECK(a.bytes() == da);
  CHECK(a.synced_at == std::vector<std::size_t>{20});
  REQUIRE(fa->close().ok());
  REQUIRE(fb->close().ok());
  CHECK(b.bytes() == db);
  CHECK(io.waiting() == 0);
}

TEST_CASE(
    "with a ManualIo a writer out of buffers lands its own oldest, and an error surfaces at "
    "a later call",
    "[storage][async]") {
  cowstate::ManualIo io;
  memory_file::Record rec;
  rec.fail_append = 2;
  auto f = cowstate::make_async_writable_file(std::make_unique<memory_file::MemoryFile>(&rec),
                                              {.buffer_bytes = 4, .buffers = 2, .manual_io = &io});
  const std::vector<std::byte> data = pattern(8, 3);
  REQUIRE(f->append(std::span(data).first(4)).ok());  // queued; the second buffer is made
  CHECK(rec.append_calls == 0);
  // The second full buffer finds no spare: the writer lands the first itself.
  REQUIRE(f->append(std::span(data).subspan(4, 4)).ok());
  CHECK(rec.append_calls == 1);
  REQUIRE(io.waiting() == 1);
  io.land(0);  // the second append fails, and nobody has been told yet
  CHECK(rec.append_calls == 2);
  const cowstate::Status st = f->append(std::span(data).first(1));
  CHECK_FALSE(st.ok());
  CHECK(st.message().find("failed append 2") != std::string::npos);
  CHECK_FALSE(f->sync().ok());
  CHECK_FALSE(f->close().ok());
  CHECK(rec.bytes() == std::vector<std::byte>(data.begin(), data.begin() + 4));
}

TEST_CASE("a file dropped with buffers queued in a ManualIo leaves it", "[storage][async]") {
  cowstate::ManualIo io;
  memory_file::Record rec;
  {
    auto f =
        cowstate::make_async_writable_file(std::make_unique<memory_file::MemoryFile>(&rec),
                                           {.buffer_bytes = 4, .buffers = 3, .manual_io = &io});
    REQUIRE(f->append(pattern(9, 4)).ok());
    REQUIRE(io.waiting() == 1);
  }
  CHECK(io.waiting() == 0);
  CHECK(rec.appends.empty());
  CHECK(rec.destroyed);
}

TEST_CASE("async files take their buffers from a pool and give them back", "[storage][async]") {
  cowstate::AsyncBufferPool pool(3);
  {
    std::vector<std::vector<std::byte>> three;
    for (int i = 0; i < 3; ++i) three.push_back(pool.take(4096));
    for (auto& b : three) pool.give(std::move(b));
  }
  REQUIRE(pool.kept() == 3);
  memory_file::Record rec;
  // The I/O thread's appends wait until the file holds all three buffers, so the file
  // cannot reuse a written buffer before taking the next one from the pool.
  std::atomic<bool> gate{false};
  rec.gate = &gate;
  const std::vector<std::byte> data = pattern(4096 * 10, 5);
  const cowstate::AsyncFileOptions options{.buffer_bytes = 4096, .buffers = 3, .pool = &pool};
  for (int round = 0; round < 3; ++round) {
    gate.store(false);
    auto file = cowstate::make_async_writable_file(std::make_unique<memory_file::MemoryFile>(&rec),
                                                   options);
    CHECK(pool.kept() == 2);  // the first buffer came from the pool
    std::thread opener([&] {
      while (pool.kept() != 0) std::this_thread::yield();
      gate.store(true, std::memory_order_release);
    });
    REQUIRE(file->append(data).ok());
    opener.join();
    CHECK(pool.kept() == 0);  // all three in use
    REQUIRE(file->close().ok());
    CHECK(pool.kept() == 3);  // given back at close
    file.reset();
    CHECK(pool.kept() == 3);
  }
  CHECK(rec.bytes().size() == 3 * data.size());
  {
    // Destroyed without close: the buffers come back too.
    auto file = cowstate::make_async_writable_file(std::make_unique<memory_file::MemoryFile>(&rec),
                                                   options);
    REQUIRE(file->append(data).ok());
  }
  CHECK(pool.kept() == 3);
  // At most max_kept are kept; a smaller buffer is grown to the size asked for.
  pool.give(std::vector<std::byte>(10));
  CHECK(pool.kept() == 3);
  CHECK(pool.take(1 << 16).capacity() >= std::size_t{1} << 16);
}

TEST_CASE(
    "a checkpoint cancelled before its commit is never published and leaves no temporary file",
    "[storage][cancel]") {
  const bool io_thread = GENERATE(false, true);
  const int cancel_at = GENERATE(0, 1, 2);  // before any step, mid-file, after the last byte
  INFO("io_thread " << io_thread << ", cancel at " << cancel_at);
  TempDir dir;
  auto storage = open_storage(dir.path(), cowstate::posix_file_system(), 3, io_thread);
  Backend b(KeyGroupRange::all(128));
  States s(b);
  populate(b, s, 300, 1);
  REQUIRE(write_to(*storage, b, 1).ok());
  const auto before = files_in(dir.path());

  auto pending = storage->begin(2);
  REQUIRE(pending.ok());
  cowstate::CheckpointWriter w(b.snapshot(2), pending->get());
  if (cancel_at == 0) CHECK((*pending)->cancel() == cowstate::CancelResult::accepted);
  if (cancel_at >= 1) REQUIRE_FALSE(w.step(50));
  if (cancel_at == 1) CHECK((*pending)->cancel() == cowstate::CancelResult::accepted);
  if (cancel_at < 2) {
    // The writer sees the cancel at its next section or block and stops, releasing its map
    // snapshots (C2).
    CHECK(w.step(1u << 20));
    CHECK(w.failed());
    CHECK(w.status().message().find("cancelled") != std::string::npos);
    CHECK(w.snapshot()->live_key_groups() == 0);
  } else {
    while (!w.step(64)) {
    }
    REQUIRE(w.done());
    CHECK((*pending)->cancel() == cowstate::CancelResult::accepted);
  }
  CHECK((*pending)->cancel() == cowstate::CancelResult::repeated);
  const cowstate::Status committed = (*pending)->commit();
  CHECK_FALSE(committed.ok());
  CHECK(committed.message().find("cancelled") != std::string::npos);
  CHECK(storage->latest()->value() == 1);
  CHECK(files_in(dir.path()) == before);  // the temporary file is gone
  CHECK((*pending)->cancel() == cowstate::CancelResult::repeated);
}

TEST_CASE("a cancel after the commit is too late and leaves the checkpoint published",
          "[storage][cancel]") {
  TempDir dir;
  auto storage = open_storage(dir.path());
  Backend b(KeyGroupRange::all(128));
  States s(b);
  populate(b, s, 100, 2);
  auto pending = storage->begin(1);
  REQUIRE(pending.ok());
  cowstate::CheckpointWriter w(b.snapshot(1), pending->get());
  while (!w.step(64)) {
  }
  REQUIRE((*pending)->commit().ok());
  CHECK((*pending)->cancel() == cowstate::CancelResult::too_late);
  CHECK((*pending)->cancel() == cowstate::CancelResult::too_late);
  CHECK_FALSE((*pending)->cancel_requested());
  CHECK(storage->latest()->value() == 1);
  CHECK(restored_image(*storage, 1) == image(s));

  // A checkpoint that failed or was aborted has nothing left to cancel.
  auto aborted = storage->begin(2);
  REQUIRE(aborted.ok());
  (*aborted)->abort();
  CHECK((*aborted)->cancel() == cowstate::CancelResult::finished);
  CHECK_FALSE((*aborted)->cancel_requested());
  CHECK(storage->latest()->value() == 1);
}
