// Checkpoints: round trips, the async phase's steps and releases, restore with rescaling and
// state-id mapping, and refusal of corrupt, truncated and foreign files
// (cowstate/checkpoint.h).
#include "cowstate/checkpoint.h"

#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backend_fixture.h"
#include "cowstate/snapshot_io.h"

using namespace backend_test;
using cowstate::CheckpointInput;
using cowstate::Compression;

namespace {

constexpr std::int32_t kMaxPar = 128;

KeyGroupRange range_of(std::int32_t parallelism, std::int32_t index) {
  return cowstate::key_group_range_for_operator(kMaxPar, parallelism, index);
}

// A sink that fails once it has taken `limit` bytes.
class FailingSink final : public cowstate::CheckpointSink {
 public:
  explicit FailingSink(std::size_t limit) : limit_(limit) {}
  cowstate::Status append(std::span<const std::byte> bytes) override {
    if (taken_ + bytes.size() > limit_) return cowstate::Status::error("disk full");
    taken_ += bytes.size();
    return cowstate::Status();
  }

 private:
  std::size_t limit_;
  std::size_t taken_ = 0;
};

cowstate::Status restore_into(Backend& b, const std::vector<std::pair<std::string, Bytes>>& files) {
  std::vector<CheckpointInput> inputs;
  for (const auto& [name, bytes] : files) inputs.push_back({name, bytes});
  return b.restore(inputs);
}

}  // namespace

TEST_CASE("a checkpoint round trip restores every state exactly, with and without compression",
          "[checkpoint]") {
  const Compression c = GENERATE(Compression::none, Compression::lz4, Compression::zstd);
  Backend b(KeyGroupRange::all(kMaxPar));
  States s(b);
  populate(b, s, 2000, 3);
  const Image before = image(s);
  REQUIRE(before.entries() > 3000);
  const Bytes file = write_checkpoint(b, 7, 100, c);

  cowstate::Result<cowstate::CheckpointLayout> layout =
      cowstate::read_checkpoint_layout({"f", file});
  REQUIRE(layout.ok());
  CHECK(layout->header.checkpoint_id == 7);
  CHECK(layout->header.states.size() == 5);
  CHECK(layout->blocks.size() == 128);
  if (c != Compression::none) {
    std::size_t compressed = 0;
    for (const auto& blk : layout->blocks) compressed += blk.compression == c ? 1 : 0;
    CHECK(compressed > 100);
  }

  Backend r(KeyGroupRange::all(kMaxPar));
  States rs(r);
  const CheckpointInput in{"round-trip.cscp", file};
  REQUIRE(r.restore({&in, 1}).ok());
  CHECK(image(rs) == before);
  CHECK(r.check_invariants());
  // Restoring again replaces the contents rather than adding to them.
  REQUIRE(r.restore({&in, 1}).ok());
  CHECK(image(rs) == before);
}

TEST_CASE("an empty backend and a backend without states write checkpoints that restore",
          "[checkpoint]") {
  Backend b(KeyGroupRange::all(kMaxPar));
  const Bytes no_states = write_checkpoint(b, 1);
  States s(b);
  const Bytes no_entries = write_checkpoint(b, 2);
  Backend r(KeyGroupRange::all(kMaxPar));
  States rs(r);
  for (const Bytes* f : {&no_states, &no_entries}) {
    const CheckpointInput in{"empty", *f};
    REQUIRE(r.restore({&in, 1}).ok());
    CHECK(image(rs).entries() == 0);
  }
}

TEST_CASE(
    "the async phase writes key group by key group in bounded steps and releases each "
    "key group's map snapshots once its block is written",
    "[checkpoint][async]") {
  Backend b(KeyGroupRange::all(kMaxPar));
  States s(b);
  populate(b, s, 500, 1);
  auto snap = b.snapshot(1);
  const std::size_t live = snap->live_key_groups();
  REQUIRE(live > 100);
  cowstate::MemoryCheckpointSink sink;
  cowstate::CheckpointWriter w(std::move(snap), &sink);
  std::size_t steps = 0;
  std::size_t previous_live = live;
  std::size_t previous_bytes = 0;
  while (!w.step(3)) {
    ++steps;
    const std::size_t now = w.snapshot()->live_key_groups();
    CHECK(now <= previous_live);  // only ever released, one block at a time
    CHECK(previous_live - now <= 3);
    previous_live = now;
    CHECK(sink.bytes().size() >= previous_bytes);
    previous_bytes = sink.bytes().size();
  }
  REQUIRE(w.done());
  CHECK(steps > image(s).entries() / 3);
  CHECK(w.snapshot()->live_key_groups() == 0);
  CHECK(w.bytes_written() == sink.bytes().size());
  for (std::int32_t g = 0; g < kMaxPar; ++g) {
    CHECK(s.list->table().map(g).highest_required_version() == 0);
  }
}

TEST_CASE("cancel and a sink error release every map snapshot at once", "[checkpoint][async]") {
  Backend b(KeyGroupRange::all(kMaxPar));
  States s(b);
  populate(b, s, 500, 1);
  SECTION("cancel") {
    cowstate::MemoryCheckpointSink sink;
    cowstate::CheckpointWriter w(b.snapshot(1), &sink);
    w.step(50);
    REQUIRE(w.snapshot()->live_key_groups() > 0);
    w.cancel();
    CHECK(w.failed());
    CHECK(w.status().message() ==
          "checkpoint 1 cancelled after " + std::to_string(w.bytes_written()) + " bytes");
    CHECK(w.snapshot()->live_key_groups() == 0);
    CHECK(w.step(10));  // finished stays finished
  }
  SECTION("sink error") {
    FailingSink sink(2000);
    cowstate::CheckpointWriter w(b.snapshot(1), &sink);
    while (!w.step(10)) {
    }
    REQUIRE(w.failed());
    CHECK(w.status().message().find("writing checkpoint 1 at byte ") == 0);
    CHECK(w.status().message().find("disk full") != std::string::npos);
    CHECK(w.snapshot()->live_key_groups() == 0);
  }
  SECTION("destruction mid-way") {
    {
      cowstate::MemoryCheckpointSink sink;
      cowstate::CheckpointWriter w(b.snapshot(1), &sink);
      w.step(50);
    }
    CHECK_FALSE(b.table_at(0).has_live_snapshot());
  }
  for (std::size_t i = 0; i < b.state_count(); ++i) {
    CHECK_FALSE(b.table_at(i).has_live_snapshot());
  }
  CHECK(b.check_invariants());
}

TEST_CASE(
    "the async phase on another thread sees the sync-phase image while the writer "
    "keeps writing",
    "[checkpoint][async][threads]") {
  Backend b(KeyGroupRange::all(kMaxPar));
  States s(b);
  populate(b, s, 3000, 5);
  const Image before = image(s);
  cowstate::MemoryCheckpointSink sink;
  cowstate::CheckpointWriter w(b.snapshot(9), &sink);
  std::thread async([&w] {
    while (!w.step(16)) {
    }
  });
  for (std::uint64_t round = 0; round < 3; ++round) populate(b, s, 3000, 100 + round);
  async.join();
  REQUIRE(w.done());
  CHECK(restore_image(sink.bytes()) == before);
  CHECK(b.check_invariants());
}

TEST_CASE(
    "rescaling: one checkpoint splits two ways, two merge back, and three instances "
    "restore from two",
    "[checkpoint][rescale]") {
  Backend whole(KeyGroupRange::all(kMaxPar));
  States ws(whole);
  populate(whole, ws, 3000, 11);
  const Image full = image(ws);
  const Bytes original = write_checkpoint(whole, 1, 500, Compression::lz4);

  // Scale out: each half restores its own key groups from the one file.
  std::vector<Bytes> halves;
  for (std::int32_t i = 0; i < 2; ++i) {
    Backend half(range_of(2, i));
    States hs(half);
    REQUIRE(restore_into(half, {{"original", original}}).ok());
    CHECK(image(hs) == filter(full, range_of(2, i)));
    CHECK(image(hs).entries() > 0);
    halves.push_back(write_checkpoint(half, 2, 500));
  }
  // Scale in: one instance merges both halves.
  Backend merged(KeyGroupRange::all(kMaxPar));
  States ms(merged);
  REQUIRE(restore_into(merged, {{"half-0", halves[0]}, {"half-1", halves[1]}}).ok());
  CHECK(image(ms) == full);
  // 2 -> 3: every new instance takes what it owns from both files.
  for (std::int32_t i = 0; i < 3; ++i) {
    Backend third(range_of(3, i));
    States ts(third);
    REQUIRE(restore_into(third, {{"half-0", halves[0]}, {"half-1", halves[1]}}).ok());
    CHECK(image(ts) == filter(full, range_of(3, i)));
  }
}

TEST_CASE("restore matches states by name, per checkpoint, whatever their numbering",
          "[checkpoint][rescale]") {
  // Two halves registered in opposite orders: each file numbers its states differently.
  std::vector<Bytes> files;
  for (std::int32_t i = 0; i < 2; ++i) {
    Backend half(range_of(2, i));
    States hs(half, /*reversed=*/i == 1);
    populate(half, hs, 1000, 21);
    files.push_back(write_checkpoint(half, 3));
  }
  Backend merged(KeyGroupRange::all(kMaxPar));
  States ms(merged);
  REQUIRE(restore_into(merged, {{"a", files[0]}, {"b", files[1]}}).ok());
  Backend full(KeyGroupRange::all(kMaxPar));
  States fs(full);
  populate(full, fs, 1000, 21);
  CHECK(image(ms) == image(fs));
}

TEST_CASE("incompatible restores are refused with a message and change nothing",
          "[checkpoint][errors]") {
  Backend b(KeyGroupRange::all(kMaxPar));
  States s(b);
  populate(b, s, 200, 1);
  const Bytes file = write_checkpoint(b, 1);
  Backend target(KeyGroupRange::all(kMaxPar));
  States ts(target);
  populate(target, ts, 50, 9);
  const Image kept = image(ts);

  SECTION("overlapping checkpoints") {
    const cowstate::Status st = restore_into(target, {{"x.cscp", file}, {"y.cscp", file}});
    REQUIRE_FALSE(st.ok());
    CHECK(st.message().find("y.cscp: offset ") == 0);
    CHECK(st.message().find("is also in x.cscp: the checkpoints to restore overlap") !=
          std::string::npos);
  }
  SECTION("a state that is not registered") {
    Backend other(KeyGroupRange::all(kMaxPar));
    auto& v = other.value_state<VoidNamespaceSerializer, Int64Serializer>("unknown");
    REQUIRE(other.set_current_key(1).ok());
    v.update(1);
    const Bytes f = write_checkpoint(other, 1);
    const cowstate::Status st = restore_into(target, {{"u.cscp", f}});
    REQUIRE_FALSE(st.ok());
    CHECK(st.message() ==
          "u.cscp: offset 38: state \"unknown\" (value) is in the checkpoint but not registered in "
          "this backend: register it before restoring");
  }
  SECTION("a state of another type") {
    Backend other(KeyGroupRange::all(kMaxPar));
    other.value_state<VoidNamespaceSerializer, StringSerializer>("value");
    const cowstate::Status st = restore_into(target, {{"t.cscp", write_checkpoint(other, 1)}});
    REQUIRE_FALSE(st.ok());
    CHECK(st.message() ==
          "t.cscp: offset 38: state \"value\": expected value state, namespace void, state int64 "
          "(as registered), found value state, namespace void, state string: the checkpoint's "
          "state is incompatible");
  }
  SECTION("another max parallelism") {
    Backend other(KeyGroupRange::all(64), 64);
    States os(other);
    const cowstate::Status st = restore_into(target, {{"m.cscp", write_checkpoint(other, 1)}});
    REQUIRE_FALSE(st.ok());
    CHECK(st.message().find("m.cscp: offset 20: expected max parallelism 128") == 0);
  }
  SECTION("a foreign file") {
    cowstate::CowStateMap<std::uint64_t, std::int32_t, std::int64_t> m;
    m.put(1, 2, 3);
    auto snap = m.snapshot();
    const Bytes csms = cowstate::write_map_snapshot<decltype(m), UInt64Serializer, Int32Serializer,
                                                    Int64Serializer>(snap);
    snap.release();
    const cowstate::Status st = restore_into(target, {{"map.csms", csms}});
    REQUIRE_FALSE(st.ok());
    CHECK(st.message() ==
          "map.csms: offset 0: expected magic \"CSCP\" (a cowstate checkpoint), found \"CSMS\": "
          "not a checkpoint file");
    const Bytes text = {std::byte{'h'}, std::byte{'i'}};
    CHECK(restore_into(target, {{"hi.txt", text}}).message() ==
          "hi.txt: offset 0: expected 4 bytes for magic \"CSCP\", found 2");
  }
  SECTION("another checkpoint than the one asked for") {
    const CheckpointInput in{"chk-3.cscp", file, 3};
    const cowstate::Status st = target.restore({&in, 1});
    REQUIRE_FALSE(st.ok());
    CHECK(st.message() ==
          "chk-3.cscp: offset 12: expected checkpoint id 3, found 1: the file holds another "
          "checkpoint");
    const CheckpointInput right{"chk-1.cscp", file, 1};
    Backend other(KeyGroupRange::all(kMaxPar));
    States os(other);
    REQUIRE(other.restore({&right, 1}).ok());
    CHECK(image(os) == image(s));
  }
  SECTION("files that leave key groups of the target range uncovered") {
    Backend half(range_of(2, 0));
    States hs(half);
    REQUIRE(restore_into(half, {{"original", file}}).ok());
    const Bytes lower = write_checkpoint(half, 2);
    const cowstate::Status st = restore_into(target, {{"lower.cscp", lower}});
    REQUIRE_FALSE(st.ok());
    CHECK(st.message() ==
          "restoring key groups 0-127: 64 key groups are in no checkpoint file (64-127; "
          "lower.cscp holds 0-63): restore from files covering the whole range, or allow "
          "partial coverage");
    CHECK(restore_into(target, {}).message() ==
          "restoring key groups 0-127: 128 key groups are in no checkpoint file (0-127; no "
          "files given): restore from files covering the whole range, or allow partial "
          "coverage");
    // Allowed, the uncovered key groups restore empty.
    cowstate::RestoreOptions partial;
    partial.allow_partial_coverage = true;
    const CheckpointInput in{"lower.cscp", lower};
    Backend other(KeyGroupRange::all(kMaxPar));
    States os(other);
    REQUIRE(other.restore({&in, 1}, partial).ok());
    CHECK(image(os) == filter(image(s), range_of(2, 0)));
  }
  CHECK(image(ts) == kept);
}

TEST_CASE("a coverage error names every gap between the files", "[checkpoint][errors]") {
  std::vector<std::pair<std::string, Bytes>> files;
  for (std::int32_t i : {0, 2}) {
    Backend quarter(range_of(4, i));
    States qs(quarter);
    populate(quarter, qs, 100, 1);
    files.emplace_back("q" + std::to_string(i), write_checkpoint(quarter, 1));
  }
  Backend target(KeyGroupRange::all(kMaxPar));
  States ts(target);
  CHECK(restore_into(target, files).message() ==
        "restoring key groups 0-127: 64 key groups are in no checkpoint file (32-63, 96-127; q0 "
        "holds 0-31, q2 holds 64-95): restore from files covering the whole range, or allow "
        "partial coverage");
  Backend one(KeyGroupRange(63, 64));
  States os(one);
  CHECK(restore_into(one, files).message() ==
        "restoring key groups 63-64: 1 key group is in no checkpoint file (63; q0 holds 0-31, q2 "
        "holds 64-95): restore from files covering the whole range, or allow partial coverage");
}

TEST_CASE("every single-byte corruption of a small checkpoint is refused and changes nothing",
          "[checkpoint][errors][corrupt]") {
  const Compression c = GENERATE(Compression::none, Compression::lz4, Compression::zstd);
  Backend b(KeyGroupRange(0, 7), 8);
  States s(b);
  populate(b, s, 40, 2);
  const Bytes file = write_checkpoint(b, 4, 10, c);
  INFO("checkpoint of " << file.size() << " bytes, compression " << cowstate::compression_name(c));

  Backend target(KeyGroupRange(0, 7), 8);
  States ts(target);
  populate(target, ts, 10, 77);
  const Image kept = image(ts);
  for (std::size_t i = 0; i < file.size(); ++i) {
    for (std::byte flip : {std::byte{0x01}, std::byte{0xff}}) {
      Bytes bad = file;
      bad[i] ^= flip;
      const CheckpointInput in{"bad.cscp", bad};
      const cowstate::Status st = target.restore({&in, 1});
      INFO("byte " << i << " xor " << static_cast<int>(flip));
      REQUIRE_FALSE(st.ok());
      REQUIRE(st.message().find("bad.cscp: ") == 0);
    }
  }
  CHECK(image(ts) == kept);
  // Without checksums, corruption is still never a crash (what restores is unspecified).
  cowstate::RestoreOptions unchecked;
  unchecked.verify_checksums = false;
  for (std::size_t i = 0; i < file.size(); ++i) {
    Bytes bad = file;
    bad[i] ^= std::byte{0x5a};
    const CheckpointInput in{"bad.cscp", bad};
    (void)target.restore({&in, 1}, unchecked);
  }
  CHECK(target.check_invariants());
}

TEST_CASE("every truncation and every appended byte of a checkpoint is refused",
          "[checkpoint][errors][corrupt]") {
  Backend b(KeyGroupRange(0, 7), 8);
  States s(b);
  populate(b, s, 40, 2);
  const Bytes file = write_checkpoint(b, 4, 10, Compression::lz4);
  Backend target(KeyGroupRange(0, 7), 8);
  States ts(target);
  for (std::size_t n = 0; n < file.size(); ++n) {
    const CheckpointInput in{"short.cscp", std::span<const std::byte>(file).first(n)};
    const cowstate::Status st = target.restore({&in, 1});
    INFO("truncated to " << n << " bytes");
    REQUIRE_FALSE(st.ok());
    REQUIRE(st.message().find("short.cscp: offset ") == 0);
  }
  Bytes longer = file;
  longer.push_back(std::byte{0});
  const CheckpointInput in{"long.cscp", longer};
  CHECK_FALSE(target.restore({&in, 1}).ok());
  CHECK(image(ts).entries() == 0);
}

namespace {

std::int32_t group_of_8(std::uint64_t k) {
  return cowstate::key_group_for_hash(cowstate::KeyHash<std::uint64_t>{}(k), 8);
}

// A checkpoint (u64 -> int64, 8 key groups) holding three keys of key group_of_8(0), and the
// offset of that block's records: key (8 bytes) then state (8) each, in the map's slot order.
struct ThreeKeyBlock {
  std::vector<std::uint64_t> keys;
  Bytes file;
  std::size_t records = 0;
};

ThreeKeyBlock three_key_block() {
  ThreeKeyBlock t;
  Backend b(KeyGroupRange(0, 7), 8);
  auto& value = b.value_state<VoidNamespaceSerializer, Int64Serializer>("value", -1);
  for (std::uint64_t k = 0; t.keys.size() < 3; ++k) {
    if (group_of_8(k) == group_of_8(0)) t.keys.push_back(k);
  }
  for (const std::uint64_t k : t.keys) {
    REQUIRE(b.set_current_key(k).ok());
    value.update(static_cast<std::int64_t>(k) * 10);
  }
  t.file = write_checkpoint(b, 1);
  const CheckpointInput in{"three.cscp", t.file};
  const auto layout = cowstate::read_checkpoint_layout(in);
  REQUIRE(layout.ok());
  const cowstate::CheckpointBlockInfo& block =
      layout->blocks[static_cast<std::size_t>(group_of_8(0))];
  // Block: key group, section count, state index (u32 each), entry count (u64); then records.
  t.records = static_cast<std::size_t>(block.offset) + 20;
  REQUIRE(block.raw == 20 + 3 * 16);
  return t;
}

// Restores `file` (checksums off) into a backend whose first key holds -5, checks that the
// restore changed nothing, and returns its error message.
std::string restore_refused(const ThreeKeyBlock& t, const char* name) {
  Backend target(KeyGroupRange(0, 7), 8);
  auto& restored = target.value_state<VoidNamespaceSerializer, Int64Serializer>("value", -1);
  REQUIRE(target.set_current_key(t.keys[0]).ok());
  restored.update(-5);
  cowstate::RestoreOptions unchecked;
  unchecked.verify_checksums = false;
  const CheckpointInput bad{name, t.file};
  const cowstate::Status st = target.restore({&bad, 1}, unchecked);
  REQUIRE(target.set_current_key(t.keys[0]).ok());
  CHECK(restored.value() == -5);
  CHECK(target.check_invariants());
  return st.message();
}

}  // namespace

TEST_CASE("a block with a (key, namespace) twice is refused at the second, and changes nothing",
          "[checkpoint][errors][corrupt]") {
  ThreeKeyBlock t = three_key_block();
  std::memcpy(t.file.data() + t.records + 32, t.file.data() + t.records + 16, 8);  // 3rd = 2nd
  CHECK(restore_refused(t, "dup.cscp") ==
        "dup.cscp: offset " + std::to_string(t.records + 32) +
            ": expected a (key, namespace) not seen before in state \"value\", found a duplicate");
}

TEST_CASE("a block with a key of another key group is refused at that key, and changes nothing",
          "[checkpoint][errors][corrupt]") {
  // Fixed-width records (u64 -> int64) are read after one bounds check for the whole block;
  // the error must still name the record and both key groups.
  ThreeKeyBlock t = three_key_block();
  std::uint64_t stranger = 1;
  while (group_of_8(stranger) == group_of_8(0)) ++stranger;
  std::memcpy(t.file.data() + t.records + 16, &stranger, 8);  // the second record's key
  CHECK(restore_refused(t, "kg.cscp") ==
        "kg.cscp: offset " + std::to_string(t.records + 16) + ": expected a key of key group " +
            std::to_string(group_of_8(0)) + " (state \"value\"), found one of key group " +
            std::to_string(group_of_8(stranger)) +
            ": written with another key hash or max parallelism, or corrupt");
}
