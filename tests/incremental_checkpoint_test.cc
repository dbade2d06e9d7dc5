// Incremental checkpoints (keyed_state_backend.h, "Incremental checkpoints"; checkpoint.h,
// format 3): which key groups are written as deltas, unchanged or full; restore from a
// chain, with rescaling and TTL timestamps; completions and cancellations; chains that are
// incomplete, out of order or damaged.
//
// Every test case is tagged [incremental].
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend_fixture.h"
#include "cowstate/checkpoint.h"
#include "cowstate/checkpoint_inspect.h"
#include "cowstate/checkpoint_storage.h"
#include "cowstate/ttl.h"

using namespace backend_test;
using cowstate::BlockKind;
using cowstate::CheckpointInput;
using cowstate::IncrementalCheckpointOptions;

namespace {

constexpr std::int32_t kMaxPar = 128;

// A backend of `range` writing incremental checkpoints, with one state of each kind.
struct Incremental {
  explicit Incremental(KeyGroupRange range = KeyGroupRange::all(kMaxPar),
                       IncrementalCheckpointOptions options = {})
      : backend(make(range, options)), states(*backend) {}
  static std::unique_ptr<Backend> make(KeyGroupRange range, IncrementalCheckpointOptions options) {
    auto b = std::make_unique<Backend>(range, kMaxPar);
    b->enable_incremental_checkpoints(options);
    return b;
  }
  // Writes checkpoint `id` and reports it complete.
  Bytes checkpoint(std::uint64_t id) {
    Bytes file = write_checkpoint(*backend, id, 97);
    backend->notify_checkpoint_complete(id, file.size());
    return file;
  }
  std::unique_ptr<Backend> backend;
  States states;
};

// Changes about one key in `every` of keys [0, n): values, list appends (a mutable
// hand-out), map puts, sums, and a removal of every state of one key in three.
void touch(Backend& b, States& s, std::uint64_t n, std::uint64_t every, std::int64_t salt) {
  for (std::uint64_t k = 0; k < n; k += every) {
    if (!b.set_current_key(k).ok()) continue;
    if (k % 3 == 0) {
      s.value->clear();
      s.map->clear();
      s.list->set_current_namespace(0);
      s.list->clear();
      continue;
    }
    s.value->update(salt + static_cast<std::int64_t>(k));
    s.list->set_current_namespace(1);
    s.list->add(salt);
    s.map->put("c", salt);
    s.sum->set_current_namespace(0);
    s.sum->add(salt);
  }
}

std::map<BlockKind, std::size_t> kinds_of(const Bytes& file) {
  cowstate::Result<cowstate::CheckpointLayout> layout =
      cowstate::read_checkpoint_layout({"f", file});
  REQUIRE(layout.ok());
  std::map<BlockKind, std::size_t> out;
  for (const auto& b : layout->blocks) ++out[b.kind];
  return out;
}

cowstate::CheckpointLayout layout_of(const Bytes& file) {
  cowstate::Result<cowstate::CheckpointLayout> layout =
      cowstate::read_checkpoint_layout({"f", file});
  REQUIRE(layout.ok());
  return *layout;
}

// Restores `head` with its chain (parent first) into a fresh backend of `range`.
cowstate::Status restore_chain(Backend& into, const Bytes& head, const std::vector<Bytes>& chain) {
  std::vector<CheckpointInput> members;
  for (std::size_t i = 0; i < chain.size(); ++i) {
    members.push_back({"chain-" + std::to_string(i) + ".cscp", chain[i]});
  }
  const CheckpointInput in{"head.cscp", head, 0, members};
  return into.restore({&in, 1});
}

Image restored_image(const Bytes& head, const std::vector<Bytes>& chain,
                     KeyGroupRange range = KeyGroupRange::all(kMaxPar)) {
  Backend r(range, kMaxPar);
  States rs(r);
  const cowstate::Status st = restore_chain(r, head, chain);
  INFO(st.message());
  REQUIRE(st.ok());
  REQUIRE(r.check_invariants());
  return image(rs);
}

}  // namespace

TEST_CASE("an incremental checkpoint writes deltas of what changed and restores from its chain",
          "[incremental]") {
  Incremental f;
  populate(*f.backend, f.states, 4000, 1);
  const Bytes c1 = f.checkpoint(1);
  CHECK(layout_of(c1).version == 2);  // a full checkpoint keeps format 2
  const Image at1 = image(f.states);

  touch(*f.backend, f.states, 4000, 97, 500);  // about 1% of the keys
  const Bytes c2 = f.checkpoint(2);
  const Image at2 = image(f.states);
  REQUIRE(at2 != at1);
  const cowstate::CheckpointLayout l2 = layout_of(c2);
  CHECK(l2.version == 3);
  CHECK(l2.header.parent_checkpoint_id == 1);
  const auto k2 = kinds_of(c2);
  CHECK(k2.count(BlockKind::full) == 0);
  CHECK(k2.at(BlockKind::delta) > 20);
  CHECK(k2.at(BlockKind::unchanged) > 20);
  CHECK(c2.size() * 10 < c1.size());
  CHECK(restored_image(c2, {c1}) == at2);

  touch(*f.backend, f.states, 4000, 89, 900);
  const Bytes c3 = f.checkpoint(3);
  CHECK(layout_of(c3).header.parent_checkpoint_id == 2);
  CHECK(restored_image(c3, {c2, c1}) == image(f.states));
  // Each member still restores its own image.
  CHECK(restored_image(c2, {c1}) == at2);
  CHECK(restored_image(c1, {}) == at1);

  // Nothing changed: every block is unchanged and stores nothing.
  const Bytes c4 = f.checkpoint(4);
  CHECK(kinds_of(c4).at(BlockKind::unchanged) == kMaxPar);
  CHECK(restored_image(c4, {c3, c2, c1}) == image(f.states));
}

TEST_CASE("a key group emptied by removals is emptied by its delta", "[incremental]") {
  // A delta however large, so that the emptied maps write their tombstones.
  Incremental f(KeyGroupRange::all(kMaxPar), {.max_delta_fraction = 1e9});
  populate(*f.backend, f.states, 600, 2);
  const Bytes c1 = f.checkpoint(1);
  // Every key of key group 5 removed from every state.
  const std::int32_t g = 5;
  std::size_t removed = 0;
  for (std::uint64_t k = 0; k < 600; ++k) {
    if (f.backend->key_group_of(k) != g) continue;
    REQUIRE(f.backend->set_current_key(k).ok());
    f.states.value->clear();
    f.states.map->clear();
    for (std::int32_t ns = 0; ns < 3; ++ns) {
      f.states.list->set_current_namespace(ns);
      f.states.list->clear();
      f.states.sum->set_current_namespace(ns);
      f.states.sum->clear();
    }
    f.states.average->set_current_namespace(7);
    f.states.average->clear();
    ++removed;
  }
  REQUIRE(removed > 0);
  for (std::size_t i = 0; i < f.backend->state_count(); ++i) {
    REQUIRE(f.backend->table_at(i).size(g) == 0);
  }
  const Bytes c2 = f.checkpoint(2);
  const cowstate::CheckpointLayout l2 = layout_of(c2);
  CHECK(l2.blocks[static_cast<std::size_t>(g)].kind == BlockKind::delta);
  const Image restored = restored_image(c2, {c1});
  CHECK(restored == image(f.states));
  CHECK(restored != restored_image(c1, {}));
}

TEST_CASE("a key group whose delta outgrows the fraction is written in full", "[incremental]") {
  Incremental f(KeyGroupRange::all(kMaxPar), {.max_delta_fraction = 0.5});
  populate(*f.backend, f.states, 3000, 3);
  const Bytes c1 = f.checkpoint(1);
  touch(*f.backend, f.states, 3000, 1, 7);  // every key
  const Bytes c2 = f.checkpoint(2);
  const auto k2 = kinds_of(c2);
  CHECK(k2.at(BlockKind::full) == kMaxPar);
  CHECK(layout_of(c2).header.parent_checkpoint_id == 1);
  CHECK(restored_image(c2, {c1}) == image(f.states));
  CHECK(restored_image(c2, {}) == image(f.states));  // all full: no chain needed
}

TEST_CASE("every full_every-th checkpoint and an outgrown chain are full", "[incremental]") {
  SECTION("full_every") {
    Incremental f(KeyGroupRange::all(kMaxPar), {.full_every = 3});
    populate(*f.backend, f.states, 1000, 4);
    std::vector<std::uint64_t> parents;
    for (std::uint64_t id = 1; id <= 7; ++id) {
      touch(*f.backend, f.states, 1000, 101, static_cast<std::int64_t>(id));
      parents.push_back(layout_of(f.checkpoint(id)).header.parent_checkpoint_id);
    }
    CHECK(parents == std::vector<std::uint64_t>{0, 1, 2, 0, 4, 5, 0});
  }
  SECTION("max_chain_share") {
    Incremental f(KeyGroupRange::all(kMaxPar), {.max_chain_share = 0.05});
    populate(*f.backend, f.states, 2000, 4);
    std::vector<std::uint64_t> parents;
    std::uint64_t chain_bytes = 0;
    std::uint64_t full_bytes = 0;
    for (std::uint64_t id = 1; id <= 8; ++id) {
      touch(*f.backend, f.states, 2000, 97, static_cast<std::int64_t>(id));
      const Bytes c = f.checkpoint(id);
      parents.push_back(layout_of(c).header.parent_checkpoint_id);
      if (parents.back() == 0) {
        full_bytes = c.size();
        chain_bytes = 0;
      } else {
        // A delta is written only while the chain before it is within its share.
        CHECK(static_cast<double>(chain_bytes) <= 0.05 * static_cast<double>(full_bytes));
        chain_bytes += c.size();
      }
    }
    CHECK(std::count(parents.begin(), parents.end(), 0) >= 2);
    CHECK(std::count(parents.begin(), parents.end(), 0) <= 6);
  }
}

TEST_CASE("a cancelled checkpoint resets no tracking, and older completions are ignored",
          "[incremental]") {
  Incremental f;
  populate(*f.backend, f.states, 2000, 5);
  const Bytes c1 = f.checkpoint(1);
  touch(*f.backend, f.states, 2000, 53, 11);  // changes the cancelled checkpoint sees
  {
    cowstate::MemoryCheckpointSink sink;
    cowstate::CheckpointWriter w(f.backend->snapshot(2), &sink);
    w.step(10);
    w.cancel();
    REQUIRE(w.failed());
    f.backend->notify_checkpoint_aborted(2);
  }
  CHECK(f.backend->next_parent_checkpoint() == 1);
  touch(*f.backend, f.states, 2000, 59, 13);
  const Bytes c3 = f.checkpoint(3);
  CHECK(layout_of(c3).header.parent_checkpoint_id == 1);
  CHECK(restored_image(c3, {c1}) == image(f.states));

  // Checkpoints 4 and 5 in flight together; 5 completes before 4.
  touch(*f.backend, f.states, 2000, 61, 17);
  const Bytes c4 = write_checkpoint(*f.backend, 4, 50);
  touch(*f.backend, f.states, 2000, 67, 19);
  const Bytes c5 = write_checkpoint(*f.backend, 5, 50);
  CHECK(layout_of(c4).header.parent_checkpoint_id == 3);
  CHECK(layout_of(c5).header.parent_checkpoint_id == 3);
  f.backend->notify_checkpoint_complete(5, c5.size());
  f.backend->notify_checkpoint_complete(4, c4.size());  // older: ignored
  CHECK(f.backend->next_parent_checkpoint() == 5);
  touch(*f.backend, f.states, 2000, 71, 23);
  const Bytes c6 = f.checkpoint(6);
  CHECK(layout_of(c6).header.parent_checkpoint_id == 5);
  CHECK(restored_image(c6, {c5, c3, c1}) == image(f.states));
}

TEST_CASE("chains restore with rescaling, in and out", "[incremental]") {
  const KeyGroupRange left = cowstate::key_group_range_for_operator(kMaxPar, 2, 0);
  const KeyGroupRange right = cowstate::key_group_range_for_operator(kMaxPar, 2, 1);
  Incremental a(left);
  Incremental b(right);
  populate(*a.backend, a.states, 3000, 6);
  populate(*b.backend, b.states, 3000, 7);
  const Bytes a1 = a.checkpoint(1);
  const Bytes b1 = b.checkpoint(1);
  touch(*a.backend, a.states, 3000, 41, 31);
  touch(*b.backend, b.states, 3000, 43, 37);
  const Bytes a2 = a.checkpoint(2);
  const Bytes b2 = b.checkpoint(2);
  touch(*a.backend, a.states, 3000, 47, 41);
  const Bytes a3 = a.checkpoint(3);
  Image all = image(a.states);
  const Image right_image = image(b.states);
  all.value.insert(right_image.value.begin(), right_image.value.end());
  all.list.insert(right_image.list.begin(), right_image.list.end());
  all.map.insert(right_image.map.begin(), right_image.map.end());
  all.sum.insert(right_image.sum.begin(), right_image.sum.end());
  all.average.insert(right_image.average.begin(), right_image.average.end());

  // Scale in: one backend of the whole range from two chains of different lengths.
  const std::vector<CheckpointInput> a_chain{{"a2", a2}, {"a1", a1}};
  const std::vector<CheckpointInput> b_chain{{"b1", b1}};
  const std::vector<CheckpointInput> heads{{"a3", a3, 3, a_chain}, {"b2", b2, 2, b_chain}};
  Backend whole(KeyGroupRange::all(kMaxPar), kMaxPar);
  States ws(whole);
  const cowstate::Status st = whole.restore(heads);
  INFO(st.message());
  REQUIRE(st.ok());
  CHECK(image(ws) == all);

  // Scale out: four backends, each from the chain that holds its key groups.
  for (std::int32_t i = 0; i < 4; ++i) {
    const KeyGroupRange r = cowstate::key_group_range_for_operator(kMaxPar, 4, i);
    Backend part(r, kMaxPar);
    States ps(part);
    REQUIRE(part.restore(heads).ok());
    CHECK(image(ps) == filter(all, r));
  }
}

TEST_CASE("TTL last-access times travel through deltas", "[incremental]") {
  cowstate::ManualTtlClock clock(1000);
  Backend b(KeyGroupRange::all(kMaxPar), kMaxPar, {}, &clock);
  b.enable_incremental_checkpoints();
  cowstate::StateTtlConfig ttl;
  ttl.ttl_ms = 10'000;
  auto& v = b.value_state<VoidNamespaceSerializer, cowstate::Int64Serializer>("v", -1, {ttl});
  for (std::uint64_t k = 0; k < 500; ++k) {
    REQUIRE(b.set_current_key(k).ok());
    v.update(static_cast<std::int64_t>(k));
  }
  const Bytes c1 = write_checkpoint(b, 1);
  b.notify_checkpoint_complete(1);
  clock.set(3000);
  for (std::uint64_t k = 0; k < 500; k += 25) {
    REQUIRE(b.set_current_key(k).ok());
    v.update(-static_cast<std::int64_t>(k));
  }
  const Bytes c2 = write_checkpoint(b, 2);
  REQUIRE(layout_of(c2).header.parent_checkpoint_id == 1);
  const auto expected = table_image(v.ttl_table());

  Backend r(KeyGroupRange::all(kMaxPar), kMaxPar, {}, &clock);
  auto& rv = r.value_state<VoidNamespaceSerializer, cowstate::Int64Serializer>("v", -1, {ttl});
  REQUIRE(restore_chain(r, c2, {c1}).ok());
  const auto restored = table_image(rv.ttl_table());
  CHECK(restored == expected);
  std::size_t later = 0;
  for (const auto& [kn, tv] : restored) later += tv.last_access == 3000 ? 1 : 0;
  CHECK(later == 20);
}

TEST_CASE("an incomplete, misordered or damaged chain is an error and restores nothing",
          "[incremental]") {
  Incremental f;
  populate(*f.backend, f.states, 1500, 8);
  const Bytes c1 = f.checkpoint(1);
  touch(*f.backend, f.states, 1500, 31, 3);
  const Bytes c2 = f.checkpoint(2);
  touch(*f.backend, f.states, 1500, 37, 5);
  const Bytes c3 = f.checkpoint(3);

  Backend r(KeyGroupRange::all(kMaxPar), kMaxPar);
  States rs(r);
  populate(r, rs, 100, 9);
  const Image before = image(rs);
  auto refused = [&](const cowstate::Status& st, const std::string& needle) {
    INFO(st.message());
    CHECK(!st.ok());
    CHECK(st.message().find(needle) != std::string::npos);
    CHECK(image(rs) == before);  // C4
  };
  refused(restore_chain(r, c3, {}), "expected its parent checkpoint 2 in the chain");
  refused(restore_chain(r, c3, {c2}), "expected its parent checkpoint 1 in the chain");
  refused(restore_chain(r, c3, {c1, c2}), "expected checkpoint id 2, found 1");
  Bytes damaged = c1;
  damaged[damaged.size() / 2] ^= std::byte{0x40};
  refused(restore_chain(r, c3, {c2, damaged}), "chain-1.cscp");
  // A delta block's record kind that is neither removal nor put.
  const cowstate::CheckpointLayout l2 = layout_of(c2);
  for (const auto& blk : l2.blocks) {
    if (blk.kind != BlockKind::delta) continue;
    Bytes bad = c2;
    // key group, section count, state index, count: the first record's kind follows.
    bad[blk.offset + 20] = std::byte{7};
    const cowstate::RestoreOptions no_sums{.verify_checksums = false};
    const std::vector<CheckpointInput> chain{{"c1", c1}};
    const CheckpointInput in{"bad.cscp", bad, 0, chain};
    const cowstate::Status st = r.restore({&in, 1}, no_sums);
    refused(st, "expected a delta record kind 0 (remove) or 1 (put), found 7");
    break;
  }
}

// A storage directory in `tmp` keeping the newest `retain` complete checkpoints, appending
// on the caller's thread.
std::unique_ptr<cowstate::CheckpointStorage> open_storage(const TempDir& tmp, std::size_t retain) {
  cowstate::StorageOptions so;
  so.retain = retain;
  so.io_thread = false;
  auto opened = cowstate::CheckpointStorage::open(tmp.path(), cowstate::posix_file_system(), so);
  REQUIRE(opened.ok());
  return std::move(*opened);
}

TEST_CASE("storage keeps every member of a retained chain, reads chains, and reports broken ones",
          "[incremental][storage]") {
  TempDir tmp;
  const auto opened = open_storage(tmp, 2);
  cowstate::CheckpointStorage& storage = *opened;
  Incremental f(KeyGroupRange::all(kMaxPar), {.full_every = 3});
  populate(*f.backend, f.states, 1000, 10);
  std::vector<std::uint64_t> parents;
  for (std::uint64_t id = 1; id <= 6; ++id) {
    touch(*f.backend, f.states, 1000, 53, static_cast<std::int64_t>(id));
    auto snap = f.backend->snapshot(id);
    const std::uint64_t parent = snap->header().parent_checkpoint_id;
    parents.push_back(parent);
    auto pending = storage.begin(id, parent);
    REQUIRE(pending.ok());
    cowstate::CheckpointWriter w(std::move(snap), pending->get());
    while (!w.step(100)) {
    }
    REQUIRE(w.done());
    REQUIRE((*pending)->commit().ok());
    f.backend->notify_checkpoint_complete(id, w.bytes_written());
    if (id == 3) {
      // Retention keeps 2 and 3, and 1, a member of both chains.
      CHECK(*storage.complete_checkpoints() == std::vector<std::uint64_t>{1, 2, 3});
      CHECK(storage.read_manifest(3)->chain == std::vector<std::uint64_t>{2, 1});
      auto data = storage.read(3);
      auto chain = storage.read_chain(3);
      REQUIRE(data.ok());
      REQUIRE(chain.ok());
      REQUIRE(chain->size() == 2);
      CHECK(restored_image(*data, *chain) == image(f.states));
    }
  }
  CHECK(parents == std::vector<std::uint64_t>{0, 1, 2, 0, 4, 5});
  // 4 is full: the chains of 5 and 6 reach back to it only, so 1 to 3 are gone.
  CHECK(*storage.complete_checkpoints() == std::vector<std::uint64_t>{4, 5, 6});
  CHECK(storage.read_manifest(4)->chain.empty());
  CHECK(storage.read_manifest(6)->chain == std::vector<std::uint64_t>{5, 4});
  CHECK(restored_image(*storage.read(6), *storage.read_chain(6)) == image(f.states));

  auto refused = storage.begin(7, 3);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().message().find("names checkpoint 3 as its parent") != std::string::npos);

  // The chain's full member loses its data file: every checkpoint of the chain is damaged,
  // and latest() says why rather than rolling back.
  std::filesystem::remove(storage.data_path(4));
  auto scan = storage.scan();
  REQUIRE(scan.ok());
  CHECK(scan->complete.empty());
  REQUIRE(scan->damaged.size() == 3);
  CHECK(scan->damaged[2].reason.find("its chain member checkpoint 5 is damaged") !=
        std::string::npos);
  auto latest = storage.latest();
  REQUIRE_FALSE(latest.ok());
  CHECK(latest.status().message().find("checkpoint 6 is damaged") != std::string::npos);
  CHECK_FALSE(storage.read_chain(6).ok());
}

TEST_CASE("inspect decodes a delta's records and reads nothing of an unchanged block",
          "[incremental][inspect]") {
  Incremental f;
  populate(*f.backend, f.states, 2000, 11);
  const Bytes c1 = f.checkpoint(1);
  touch(*f.backend, f.states, 2000, 61, 5);
  const Bytes c2 = f.checkpoint(2);
  const cowstate::CheckpointFileReport r = cowstate::inspect_checkpoint("c2.cscp", c2);
  INFO((r.damage ? r.damage->message : std::string()));
  CHECK(r.intact());
  REQUIRE(r.layout.has_value());
  CHECK(r.layout->version == 3);
  CHECK(r.layout->header.parent_checkpoint_id == 1);
  REQUIRE(r.blocks.size() == static_cast<std::size_t>(kMaxPar));
  std::size_t records = 0;
  std::map<BlockKind, std::size_t> kinds;
  for (const auto& b : r.blocks) {
    ++kinds[b.info.kind];
    if (b.info.kind == BlockKind::unchanged) CHECK(b.sections.empty());
    for (const auto& s : b.sections) records += s.entries;
  }
  CHECK(kinds[BlockKind::delta] > 10);
  CHECK(kinds[BlockKind::unchanged] > 10);
  CHECK(records > 20);
  CHECK(cowstate::inspect_checkpoint("c1.cscp", c1).intact());
}

TEST_CASE("a checkpoint being written holds its chain against pruning until it finishes",
          "[incremental][storage]") {
  TempDir tmp;
  const auto opened = open_storage(tmp, 1);
  cowstate::CheckpointStorage& storage = *opened;
  const std::vector<std::byte> data(64, std::byte{7});  // storage never decodes the data
  auto commit = [&](std::unique_ptr<cowstate::PendingCheckpoint> p) {
    REQUIRE(p->append(data).ok());
    REQUIRE(p->commit().ok());
  };
  auto begin = [&](std::uint64_t id, std::uint64_t parent) {
    auto p = storage.begin(id, parent);
    REQUIRE(p.ok());
    return std::move(*p);
  };
  auto complete = [&] { return *storage.complete_checkpoints(); };

  commit(begin(1, 0));
  auto delta = begin(2, 1);  // a delta of 1, still being written
  commit(begin(3, 0));       // retains 3 only; 1 is held by 2
  CHECK(complete() == std::vector<std::uint64_t>{1, 3});
  commit(std::move(delta));  // its chain is whole; its own commit prunes it and 1
  CHECK(complete() == std::vector<std::uint64_t>{3});

  auto aborted = begin(4, 3);
  commit(begin(5, 0));
  CHECK(complete() == std::vector<std::uint64_t>{3, 5});
  aborted->abort();  // the hold ends with it: the next commit may prune 3
  commit(begin(6, 0));
  CHECK(complete() == std::vector<std::uint64_t>{6});

  {
    auto dropped = begin(7, 6);  // destroyed unfinished: aborted, the hold ends too
  }
  commit(begin(8, 0));
  CHECK(complete() == std::vector<std::uint64_t>{8});
}
