// Stateful RapidCheck property: random command sequences run against CowStateMap and the
// reference model VersionedMap in lockstep (rc::state). The map's operations are the one list
// every driver of the map draws from (cowstate/sim/isolation.h: OpKind, Op, OpWeights), applied
// through an IsolationLane, which checks each result against the model and, after every
// command here, the live map, every live snapshot against the image of its version and both
// invariant checks. Two commands read snapshots on their own: an iteration pass whose cursor
// is resumed across commands (so a partial iteration is interleaved with writes), and a
// serialization in random step sizes followed by a restore.
//
// Model = the live snapshot versions, in the lane's order, which the generators need; the
// versioned state itself is the lane's model. Sut = the lane plus the iteration passes in
// progress, keyed by version.
//
// Map assertions (COWSTATE_ASSERT) throw while a property runs, so a broken invariant is
// reported and shrunk by RapidCheck like any other failure. Every command prints its
// arguments, so a counterexample reads as a replayable list of calls. Seed and test count
// come from RC_PARAMS (e.g. RC_PARAMS="seed=42 max_success=500").
#include <rapidcheck/catch.h>
#include <rapidcheck/state.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "cowstate/cow_state_map.h"
#include "cowstate/cow_state_map_access.h"
#include "cowstate/serializers.h"
#include "cowstate/sim/isolation.h"
#include "cowstate/snapshot_io.h"

namespace {

using cowstate::model::to_text;
using cowstate::sim::Op;
using cowstate::sim::OpKind;
using Key = std::uint64_t;
using Ns = std::int32_t;
using Value = std::vector<std::int64_t>;
using Lane = cowstate::sim::IsolationLane<Value>;
using Map = Lane::Map;
using Image = Lane::Image;

static_assert(!Map::kInline, "vector states are boxed, so state sharing is exercised");

// Capacity 4 to 8: with up to 48 keys every run rehashes and then chains at maximum capacity.
constexpr cowstate::MapOptions kTinyOptions{
    .initial_capacity = 4, .min_capacity = 4, .max_capacity = 8};

cowstate::sim::IsolationOptions lane_options(cowstate::MapOptions map_options) {
  cowstate::sim::IsolationOptions o;
  o.key_count = 16;
  o.namespace_count = 3;
  o.map_options = map_options;
  o.live_snapshots_max = 6;
  o.state_length_max = 4;
  o.inline_lane = false;
  return o;
}

// What the generators draw from: the key space, the weights and the live limit, the same
// for every map size.
const cowstate::sim::IsolationOptions& generator_options() {
  static const cowstate::sim::IsolationOptions o = lane_options({});
  return o;
}

struct Model {
  std::uint32_t version = 0;        // snapshots started so far
  std::vector<std::uint32_t> live;  // live snapshot versions, oldest first
  bool is_live(std::uint32_t v) const {
    return std::find(live.begin(), live.end(), v) != live.end();
  }
};

// An iteration pass over one live snapshot that may span several commands.
struct Pass {
  Map::Snapshot::Cursor cursor;
  Image emitted;  // what the cursor produced in this pass
};

struct Sut {
  explicit Sut(cowstate::MapOptions map_options)
      : options(lane_options(map_options)), lane(options) {}
  const Lane::LiveSnapshot& live(std::uint32_t v) const {
    const Lane::LiveSnapshot* s = lane.live_snapshot(v);
    RC_ASSERT(s != nullptr);
    return *s;
  }
  // Drops the passes over snapshots a command released.
  void forget_released() {
    std::erase_if(passes, [this](const auto& p) { return lane.live_snapshot(p.first) == nullptr; });
  }
  cowstate::sim::IsolationOptions options;  // the lane keeps a reference
  Lane lane;
  cowstate::sim::IsolationCounters counters;
  std::map<std::uint32_t, Pass> passes;  // destroyed before the lane's snapshots
};

using Command = rc::state::Command<Model, Sut>;

// --- generators --------------------------------------------------------------------------------

// An operation of the one list, its kind drawn by the lane's weights as draw_op() draws it;
// every field shrinks towards 0 (the kind towards put).
Op gen_op(const cowstate::sim::IsolationOptions& o) {
  Op op;
  const std::uint32_t total = cowstate::sim::total_weight(o.weights);
  op.kind = cowstate::sim::kind_at(o.weights, *rc::gen::inRange<std::uint32_t>(0, total));
  switch (op.kind) {
    case OpKind::snapshot_start:
      break;
    case OpKind::snapshot_release:
      op.choice = *rc::gen::inRange<std::uint32_t>(0, 8);
      op.length = *rc::gen::inRange<std::uint32_t>(0, 4);  // bit 0: twice, bit 1: again
      break;
    case OpKind::visit:
      op.value = *rc::gen::inRange<std::int64_t>(0, 64);
      op.length = *rc::gen::inRange<std::uint32_t>(1, o.visit_entries_max + 1);
      break;
    default:
      op.key = *rc::gen::inRange<Key>(0, o.key_count) * o.key_stride;
      op.ns = *rc::gen::inRange<Ns>(0, static_cast<Ns>(o.namespace_count));
      op.value = *rc::gen::inRange<std::int64_t>(-20, 21);
      op.length = *rc::gen::inRange<std::uint32_t>(1, o.state_length_max + 1);
      op.choice = *rc::gen::inRange<std::uint32_t>(0, 3);
      break;
  }
  return op;
}

// A live snapshot version. Discards the command when none is live.
std::uint32_t gen_live_version(const Model& m) {
  RC_PRE(!m.live.empty());
  return *rc::gen::elementOf(m.live);
}

// --- checks ------------------------------------------------------------------------------------

template <class Snap>
Image image_of(const Snap& s) {
  Image out;
  s.for_each([&out](const Key& k, const Ns& n, const Value& v) {
    const bool inserted = out.emplace(std::make_pair(k, n), v).second;
    RC_ASSERT(inserted);  // no (key, ns) twice
  });
  return out;
}

void require_same(const Image& expected, const Image& actual, const std::string& what) {
  if (auto d = cowstate::model::diff(expected, actual)) RC_FAIL(what + ": " + *d);
}

// After a command (which checked the map, its snapshots and both models): the generators'
// view of the live snapshots agrees with the lane's model and with the map's own list.
void check_versions(const Model& m, Sut& sut) {
  RC_ASSERT(sut.lane.model().live_versions() == m.live);
  RC_ASSERT(cowstate::CowStateMapAccess::live_versions(sut.lane.map()) == m.live);
  RC_ASSERT(sut.lane.map().map_version() == m.version);
}

// --- commands ----------------------------------------------------------------------------------

struct MapOp : Command {
  Op op = gen_op(generator_options());
  void checkPreconditions(const Model& m) const override {
    if (op.kind == OpKind::snapshot_start) {
      RC_PRE(m.live.size() < generator_options().live_snapshots_max);
    }
    if (op.kind == OpKind::snapshot_release) RC_PRE(!m.live.empty());
  }
  void apply(Model& m) const override {
    if (op.kind == OpKind::snapshot_start) m.live.push_back(++m.version);
    if (op.kind == OpKind::snapshot_release) {
      m.live.erase(m.live.begin() + static_cast<std::ptrdiff_t>(op.choice % m.live.size()));
    }
  }
  void run(const Model& m, Sut& sut) const override {
    if (auto bad = sut.lane.apply(op, true, true, sut.counters)) RC_FAIL(*bad);
    sut.forget_released();
    check_versions(nextState(m), sut);
  }
  void show(std::ostream& os) const override { os << to_text(op); }
};

// Advances the snapshot's cursor by up to `count` entries; a pass may span commands, with
// writes in between. Each emitted entry must be in the model image with the same value; at
// the end of a pass the emitted entries must be the image exactly.
struct IterateSnapshot : Command {
  std::uint32_t v;
  std::size_t count = *rc::gen::inRange<std::size_t>(1, 20);
  explicit IterateSnapshot(const Model& m) : v(gen_live_version(m)) {}
  void checkPreconditions(const Model& m) const override { RC_PRE(m.is_live(v)); }
  void run(const Model& m, Sut& sut) const override {
    const Lane::LiveSnapshot& snapshot = sut.live(v);
    const Image& expected = snapshot.expected;
    auto [it, fresh_pass] = sut.passes.try_emplace(v);
    Pass& pass = it->second;
    if (fresh_pass) pass.cursor = snapshot.handle.cursor();
    for (std::size_t i = 0; i < count && !pass.cursor.done(); ++i, pass.cursor.next()) {
      const auto e = pass.cursor.get();
      const auto key = std::make_pair(e.key, e.ns);
      const auto want = expected.find(key);
      if (want == expected.end()) {
        RC_FAIL("snapshot " + std::to_string(v) + " emitted " + to_text(key) + ":" +
                to_text(e.state) + ", absent from the model image");
      }
      if (!(want->second == e.state)) {
        RC_FAIL("snapshot " + std::to_string(v) + " emitted " + to_text(key) + ":" +
                to_text(e.state) + ", model image has " + to_text(want->second));
      }
      const bool fresh = pass.emitted.emplace(key, e.state).second;
      if (!fresh) RC_FAIL("snapshot " + std::to_string(v) + " emitted " + to_text(key) + " twice");
    }
    if (pass.cursor.done()) {
      require_same(expected, pass.emitted,
                   "full iteration of snapshot " + std::to_string(v) + " differs from the model");
      sut.passes.erase(it);
    }
    check_versions(m, sut);
  }
  void show(std::ostream& os) const override {
    os << "IterateSnapshot(v=" << v << ", entries=" << count << ")";
  }
};

// Writes a live snapshot with the snapshot writer in random step sizes, reads the bytes back
// into a fresh map and compares it with the model image of that version, and with a fresh
// model restored from that image.
struct SerializeRestore : Command {
  using Writer =
      cowstate::MapSnapshotWriter<Map, cowstate::UInt64Serializer, cowstate::Int32Serializer,
                                  cowstate::VectorInt64Serializer>;
  std::uint32_t v;
  std::vector<std::size_t> steps = *rc::gen::container<std::vector<std::size_t>>(
      *rc::gen::inRange<std::size_t>(1, 5), rc::gen::inRange<std::size_t>(1, 8));
  explicit SerializeRestore(const Model& m) : v(gen_live_version(m)) {}
  void checkPreconditions(const Model& m) const override { RC_PRE(m.is_live(v)); }
  void run(const Model& m, Sut& sut) const override;
  void show(std::ostream& os) const override {
    os << "SerializeRestore(v=" << v << ", steps=" << to_text(steps) << ")";
  }
};

void SerializeRestore::run(const Model& m, Sut& sut) const {
  const Image& expected = sut.live(v).expected;
  const std::string name = "snapshot " + std::to_string(v);
  Writer writer(sut.live(v).handle);
  Image written;
  std::size_t calls = 0;
  for (bool done = false; !done;) {
    RC_ASSERT(calls <= expected.size() + 1);  // every step but the last writes >= 1 entry
    const std::size_t budget = steps[calls++ % steps.size()];
    const std::size_t before = writer.entries_written();
    done = writer.step(budget, [&](const Key& k, const Ns& n, const Value& state) {
      const auto key = std::make_pair(k, n);
      const auto it = expected.find(key);
      if (it == expected.end() || !(it->second == state)) {
        RC_FAIL(name + " wrote " + to_text(key) + ":" + to_text(state) + ", model image has " +
                (it == expected.end() ? std::string("absent") : to_text(it->second)));
      }
      if (!written.emplace(key, state).second) RC_FAIL(name + " wrote " + to_text(key) + " twice");
    });
    RC_ASSERT(writer.done() == done);
    RC_ASSERT(writer.entries_written() - before <= budget);
  }
  RC_ASSERT(writer.entries_written() == expected.size());
  require_same(expected, written, "entries written for " + name);

  const Lane::Model restored_model = Lane::Model::restore(expected);
  for (const cowstate::MapOptions& options : {sut.options.map_options, kTinyOptions}) {
    auto restored =
        cowstate::read_map_snapshot<Map, cowstate::UInt64Serializer, cowstate::Int32Serializer,
                                    cowstate::VectorInt64Serializer>(writer.bytes(), options);
    if (!restored.ok()) RC_FAIL("reading " + name + " back: " + restored.status().message());
    Map& fresh = *restored.value();
    require_same(expected, image_of(fresh), "map restored from " + name);
    require_same(restored_model.live(), image_of(fresh), "restored map vs restored model");
    RC_ASSERT(fresh.size() == expected.size());
    RC_ASSERT(fresh.map_version() == 0u);
    if (std::string why; !fresh.check_invariants(&why)) {
      RC_FAIL("check_invariants of the map restored from " + name + ": " + why);
    }
  }
  check_versions(m, sut);
}

// --- the property ------------------------------------------------------------------------------

constexpr double kSequenceScale = 4.0;

void check_map_against_model(cowstate::MapOptions options) {
  // Map assertions throw, so RapidCheck reports and shrinks them.
  cowstate::sim::ScopedThrowingAssertHandler throwing;
  rc::prop("command sequences agree with the model", [options] {
    // rc::state::check, with sequences four times longer than RapidCheck's default size
    // gives, so maps grow past a few entries and rehash under live snapshots.
    const auto commands = *rc::gen::scale(
        kSequenceScale,
        rc::state::gen::commands(
            Model{}, rc::state::gen::execOneOfWithArgs<MapOp, MapOp, MapOp, MapOp, MapOp, MapOp,
                                                       IterateSnapshot, IterateSnapshot,
                                                       SerializeRestore>()));
    Sut sut(options);
    rc::state::runAll(commands, Model{}, sut);
  });
}

}  // namespace

TEST_CASE("random command sequences on the map agree with the reference model", "[property]") {
  check_map_against_model(cowstate::MapOptions{});
}

TEST_CASE(
    "random command sequences on a map of capacity four to eight agree with the reference model, "
    "through rehash and maximum capacity",
    "[property]") {
  check_map_against_model(kTinyOptions);
}
