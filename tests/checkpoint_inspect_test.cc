// Looking inside checkpoints without a backend (cowstate/checkpoint_inspect.h): what a file
// holds, block by block and state by state, agrees with the backend that wrote it; every
// flipped byte and every truncation is found and named with its file and offset; a storage
// directory is reported checkpoint by checkpoint without being changed.
#include "cowstate/checkpoint_inspect.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "backend_fixture.h"
#include "cowstate/checkpoint_storage.h"

using namespace backend_test;
using cowstate::CheckpointFileReport;
using cowstate::Compression;
using cowstate::inspect_checkpoint;

namespace {

Bytes sample_checkpoint(Compression c, std::uint64_t keys = 200) {
  Backend b(KeyGroupRange(0, 127));
  States s(b);
  populate(b, s, keys, 7);
  return write_checkpoint(b, 9, 50, c);
}

// Entries per state name over every block of a report.
std::map<std::string, std::uint64_t> entries_by_state(const CheckpointFileReport& r) {
  std::map<std::string, std::uint64_t> out;
  for (const auto& b : r.blocks) {
    for (const auto& s : b.sections) out[r.layout->header.states[s.state].name] += s.entries;
  }
  return out;
}

void write_bytes(const std::string& path, const Bytes& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(f.good());
}

Bytes read_bytes(const std::string& path) {
  auto r = cowstate::posix_file_system().read_file(path);
  REQUIRE(r.ok());
  return *r;
}

}  // namespace

TEST_CASE("inspecting a checkpoint reports its header, blocks and entries per state as written",
          "[checkpoint][inspect]") {
  const Compression c = GENERATE(Compression::none, Compression::lz4, Compression::zstd);
  INFO("compression " << cowstate::compression_name(c));
  Backend b(KeyGroupRange(0, 127));
  States s(b);
  populate(b, s, 200, 7);
  const Image img = image(s);
  const Bytes file = write_checkpoint(b, 9, 50, c);
  const CheckpointFileReport r = inspect_checkpoint("f.cscp", file);
  INFO((r.damage ? r.damage->message : std::string("intact")));
  REQUIRE(r.intact());
  REQUIRE(r.layout);
  CHECK(r.size == file.size());
  CHECK(r.layout->header.checkpoint_id == 9);
  CHECK(r.layout->header.range.start() == 0);
  CHECK(r.layout->header.range.end() == 127);
  REQUIRE(r.layout->header.states.size() == 5);
  CHECK(r.layout->header.states[1].name == "list");
  CHECK(r.layout->header.states[1].kind == cowstate::StateKind::list);
  CHECK(r.undecoded.empty());
  REQUIRE(r.blocks.size() == 128);
  const std::map<std::string, std::uint64_t> want{{"value", img.value.size()},
                                                  {"list", img.list.size()},
                                                  {"map", img.map.size()},
                                                  {"sum", img.sum.size()},
                                                  {"average", img.average.size()}};
  CHECK(entries_by_state(r) == want);
  // The blocks tile the file from the header to the index, in key-group order.
  std::uint64_t at = r.layout->header_size;
  for (std::size_t i = 0; i < r.blocks.size(); ++i) {
    CHECK(r.blocks[i].info.key_group == static_cast<std::int32_t>(i));
    CHECK(r.blocks[i].info.offset == at);
    at += r.blocks[i].info.stored;
  }
}

TEST_CASE("every flipped byte of a checkpoint is reported as damage inside the part it hit",
          "[checkpoint][inspect]") {
  const Compression c = GENERATE(Compression::none, Compression::lz4);
  const Bytes good = sample_checkpoint(c, 60);
  const CheckpointFileReport clean = inspect_checkpoint("f.cscp", good);
  REQUIRE(clean.intact());
  const auto& blocks = clean.layout->blocks;
  const std::uint64_t index_at = blocks.back().offset + blocks.back().stored;
  const std::size_t step = good.size() / 997 + 1;
  for (std::size_t at = 0; at < good.size(); at += step) {
    Bytes bad = good;
    bad[at] ^= std::byte{0x10};
    const CheckpointFileReport r = inspect_checkpoint("f.cscp", bad);
    INFO("flipped byte " << at << " of " << good.size() << ": "
                         << (r.damage ? r.damage->message : std::string("intact")));
    REQUIRE_FALSE(r.intact());
    CHECK(r.damage->file == "f.cscp");
    CHECK(r.damage->message.rfind("f.cscp: ", 0) == 0);
    REQUIRE(r.damage->offset);
    // A byte inside a block is named by the offset of its block; a byte of the header by an
    // offset in the header (its checksum's, or the field's when the identity is wrong); a
    // byte of the index or the footer by an offset there (the index checksum is in the
    // footer).
    const auto hit = std::find_if(blocks.begin(), blocks.end(), [&](const auto& b) {
      return at >= b.offset && at < b.offset + b.stored;
    });
    if (hit != blocks.end()) {
      CHECK(*r.damage->offset == hit->offset);
      CHECK(r.blocks.size() == static_cast<std::size_t>(hit - blocks.begin()));
    } else if (at < clean.layout->header_size) {
      CHECK(*r.damage->offset < clean.layout->header_size);
    } else {
      CHECK(*r.damage->offset >= index_at);
      CHECK(*r.damage->offset < good.size());
    }
  }
}

TEST_CASE("a truncated checkpoint is damaged at its end, whatever length is left",
          "[checkpoint][inspect]") {
  const Bytes good = sample_checkpoint(Compression::none, 60);
  for (std::size_t keep : {std::size_t{0}, std::size_t{3}, std::size_t{40}, good.size() / 2,
                           good.size() - 33, good.size() - 1}) {
    const Bytes cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(keep));
    const CheckpointFileReport r = inspect_checkpoint("cut.cscp", cut);
    INFO("kept " << keep << " of " << good.size() << ": " << (r.damage ? r.damage->message : ""));
    REQUIRE_FALSE(r.intact());
    CHECK(r.damage->message.find("cut.cscp") != std::string::npos);
    CHECK(r.damage->offset.has_value());
  }
}

TEST_CASE("a decoded entry with a key of another key group is damage even with valid checksums",
          "[checkpoint][inspect]") {
  // Two backends of disjoint halves write one key each; swapping their blocks' key group
  // fields is caught by the checksums, so instead a key is rewritten and the block's
  // checksum recomputed, as a buggy writer would produce it.
  Backend b(KeyGroupRange(0, 127));
  States s(b);
  REQUIRE(b.set_current_key(5).ok());
  s.value->update(1);
  Bytes file = write_checkpoint(b, 1);
  const CheckpointFileReport clean = inspect_checkpoint("k.cscp", file);
  REQUIRE(clean.intact());
  const std::int32_t g = cowstate::key_group_for_hash(cowstate::KeyHash<std::uint64_t>{}(5), 128);
  const auto& block = clean.layout->blocks[static_cast<std::size_t>(g)];
  // Block: key group, section count, state, entry count, then the key (u64).
  const std::size_t key_at = static_cast<std::size_t>(block.offset) + 4 + 4 + 4 + 8;
  REQUIRE(cowstate::detail::load_le<std::uint64_t>(file.data() + key_at) == 5);
  cowstate::detail::store_le(file.data() + key_at, std::uint64_t{6});
  const std::uint64_t sum =
      cowstate::checksum64(std::span<const std::byte>(file).subspan(block.offset, block.stored));
  // The index entry's checksum is its last 8 bytes; the index's own checksum is in the footer.
  const std::size_t index_at = static_cast<std::size_t>(clean.layout->blocks.back().offset +
                                                        clean.layout->blocks.back().stored);
  const std::size_t entry_at = index_at + 4 + static_cast<std::size_t>(g) * 37;
  cowstate::detail::store_le(file.data() + entry_at + 29, sum);
  const std::size_t footer = file.size() - 32;
  const std::uint64_t index_sum = cowstate::checksum64(
      std::span<const std::byte>(file).subspan(index_at, footer + 16 - index_at));
  cowstate::detail::store_le(file.data() + footer + 16, index_sum);
  const CheckpointFileReport r = inspect_checkpoint("k.cscp", file);
  REQUIRE_FALSE(r.intact());
  INFO(r.damage->message);
  CHECK(*r.damage->offset == key_at);
  CHECK(r.damage->message.find("key group " + std::to_string(g)) != std::string::npos);
}

TEST_CASE("a storage directory is inspected read-only: complete, damaged and stray files",
          "[checkpoint][inspect][storage]") {
  TempDir dir;
  Backend b(KeyGroupRange(0, 127));
  States s(b);
  {
    cowstate::StorageOptions o;
    o.io_thread = false;
    auto storage = cowstate::CheckpointStorage::open(dir.path(), cowstate::posix_file_system(), o);
    REQUIRE(storage.ok());
    for (std::uint64_t id = 1; id <= 3; ++id) {
      populate(b, s, 30 * id, id);
      auto pending = (*storage)->begin(id);
      REQUIRE(pending.ok());
      cowstate::CheckpointWriter w(b.snapshot(id), pending->get());
      while (!w.step(64)) {
      }
      REQUIRE((*pending)->commit().ok());
    }
  }
  auto& fs = cowstate::posix_file_system();
  const std::string data2 = dir.path() + "/chk-00000000000000000002.cscp";
  const std::string manifest3 = dir.path() + "/chk-00000000000000000003.manifest";
  Bytes d2 = read_bytes(data2);
  d2[d2.size() / 2] ^= std::byte{1};
  write_bytes(data2, d2);
  Bytes m3 = read_bytes(manifest3);
  m3[9] ^= std::byte{1};
  write_bytes(manifest3, m3);
  write_bytes(dir.path() + "/chk-00000000000000000004.cscp.tmp", Bytes(10));
  const std::vector<std::string> before = files_in(dir.path());

  auto report = cowstate::inspect_checkpoint_directory(dir.path(), fs);
  REQUIRE(report.ok());
  CHECK(files_in(dir.path()) == before);  // nothing changed, nothing cleaned
  REQUIRE(report->checkpoints.size() == 3);
  const auto& c1 = report->checkpoints[0];
  const auto& c2 = report->checkpoints[1];
  const auto& c3 = report->checkpoints[2];
  CHECK(c1.intact());
  REQUIRE(c1.file);
  CHECK(c1.file->layout->header.checkpoint_id == 1);
  CHECK(c2.complete);  // the manifest is fine: only reading the data file finds the damage
  REQUIRE_FALSE(c2.intact());
  CHECK(c2.damage->file == data2);
  REQUIRE(c2.damage->offset);
  CHECK(*c2.damage->offset <= d2.size() / 2);
  CHECK_FALSE(c3.complete);
  CHECK(c3.reason.find("manifest") != std::string::npos);
  CHECK(c3.damage->file == manifest3);
  CHECK(report->other_files == std::vector<std::string>{"chk-00000000000000000004.cscp.tmp"});

  auto missing = cowstate::inspect_checkpoint_directory(dir.path() + "/nope", fs);
  CHECK_FALSE(missing.ok());
}
