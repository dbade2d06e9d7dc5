// Stateful RapidCheck property: random command sequences run against CowStateMap and the
// reference model VersionedMap in lockstep (rc::state). After every command the live map must
// equal the model's live image, every live snapshot must equal the model's image of its
// version, and the deep invariant check must pass.
//
// Model = VersionedMap (copyable: it tracks snapshots by version, start_snapshot() and
// release_snapshot(v), never by handle); its live_versions() is the list of live snapshots.
// Sut = the map plus its snapshot handles keyed by version, each with a cursor that resumes
// across IterateSnapshot commands, so a partial iteration is interleaved with writes.
//
// Map assertions (COWSTATE_ASSERT) throw while a property runs, so a broken invariant is
// reported and shrunk by RapidCheck like any other failure. Every command prints its
// arguments, so a counterexample reads as a replayable list of calls. Seed and test count
// come from RC_PARAMS (e.g. RC_PARAMS="seed=42 max_success=500").
#include <rapidcheck/catch.h>
#include <rapidcheck/state.h>

#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cowstate/assert.h"
#include "cowstate/cow_state_map.h"
#include "cowstate/cow_state_map_access.h"
#include "cowstate/model/versioned_map.h"
#include "cowstate/serializers.h"
#include "cowstate/snapshot_io.h"

namespace {

using Key = std::uint64_t;
using Ns = std::int32_t;
using Value = std::vector<std::int64_t>;
using Map = cowstate::CowStateMap<Key, Ns, Value>;
using ModelMap = cowstate::model::VersionedMap<Key, Ns, Value>;
using Image = ModelMap::Image;
using cowstate::model::to_text;

static_assert(std::is_copy_constructible_v<ModelMap>,
              "rc::state copies the model for every command");
static_assert(!Map::kInline, "vector states are boxed, so state sharing is exercised");

// Capacity 4 to 8: with up to 48 keys every run rehashes and then chains at maximum capacity.
constexpr cowstate::MapOptions kTinyOptions{
    .initial_capacity = 4, .min_capacity = 4, .max_capacity = 8};

struct Model {
  ModelMap map;
};

// The map's snapshot of one version, and an iteration pass that may span several commands.
struct SnapshotSlot {
  explicit SnapshotSlot(Map::Snapshot s) : snapshot(std::move(s)) {}
  Map::Snapshot snapshot;
  Map::Snapshot::Cursor cursor;  // valid while in_pass
  bool in_pass = false;
  Image emitted;  // what the cursor produced in this pass
};

struct Sut {
  explicit Sut(cowstate::MapOptions o) : options(o), map(o) {}
  cowstate::MapOptions options;
  Map map;
  // Declared after the map, so destroyed (released) before it. Released snapshots stay, so
  // a release can be repeated on the same handle.
  std::map<std::uint32_t, SnapshotSlot> snapshots;
};

using Command = rc::state::Command<Model, Sut>;

// --- generators --------------------------------------------------------------------------------

Key gen_key() { return *rc::gen::inRange<Key>(0, 16); }
Ns gen_ns() { return *rc::gen::inRange<Ns>(0, 3); }
std::int64_t gen_element() { return *rc::gen::inRange<std::int64_t>(-20, 21); }
Value gen_value() {
  const auto n = *rc::gen::inRange<std::size_t>(0, 4);
  return *rc::gen::container<Value>(n, rc::gen::inRange<std::int64_t>(-20, 21));
}
// A live snapshot version. Discards the command when none is live.
std::uint32_t gen_live_version(const Model& m) {
  const std::vector<std::uint32_t> live = m.map.live_versions();
  RC_PRE(!live.empty());
  return *rc::gen::elementOf(live);
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

// After a command: `m` is the model after it, `sut` the system after it.
void check_all(const Model& m, Sut& sut) {
  require_same(m.map.live(), image_of(sut.map), "live map differs from the model");
  RC_ASSERT(sut.map.size() == m.map.size());
  RC_ASSERT(sut.map.map_version() == m.map.map_version());
  RC_ASSERT(sut.map.highest_required_version() == m.map.highest_required_version());
  RC_ASSERT(cowstate::CowStateMapAccess::live_versions(sut.map) == m.map.live_versions());
  for (const std::uint32_t v : m.map.live_versions()) {
    const auto it = sut.snapshots.find(v);
    RC_ASSERT(it != sut.snapshots.end());
    const Map::Snapshot& s = it->second.snapshot;
    RC_ASSERT(s.valid());
    const Image expected = m.map.image(v);
    RC_ASSERT(s.size() == expected.size());
    require_same(expected, image_of(s),
                 "snapshot " + std::to_string(v) + " differs from the model");
  }
  if (std::string why; !sut.map.check_invariants(&why)) RC_FAIL("check_invariants: " + why);
  if (m.map.live_versions().empty()) RC_ASSERT(sut.map.retired_count() == 0u);
}

// --- commands ----------------------------------------------------------------------------------

struct Put : Command {
  Key k = gen_key();
  Ns ns = gen_ns();
  Value v = gen_value();
  void apply(Model& m) const override { m.map.put(k, ns, v); }
  void run(const Model& m, Sut& sut) const override {
    sut.map.put(k, ns, v);
    check_all(nextState(m), sut);
  }
  void show(std::ostream& os) const override {
    os << "Put(k=" << k << ", ns=" << ns << ", v=" << to_text(v) << ")";
  }
};

struct Remove : Command {
  Key k = gen_key();
  Ns ns = gen_ns();
  void apply(Model& m) const override { m.map.remove(k, ns); }
  void run(const Model& m, Sut& sut) const override {
    RC_ASSERT(sut.map.remove(k, ns) == m.map.contains(k, ns));
    check_all(nextState(m), sut);
  }
  void show(std::ostream& os) const override { os << "Remove(k=" << k << ", ns=" << ns << ")"; }
};

// A const read: never copies, but takes a rehash step like every keyed operation.
struct Get : Command {
  Key k = gen_key();
  Ns ns = gen_ns();
  void run(const Model& m, Sut& sut) const override {
    const Value* got = sut.map.get(k, ns);
    const Value* expected = m.map.get(k, ns);
    RC_ASSERT((got == nullptr) == (expected == nullptr));
    if (got != nullptr) RC_ASSERT(*got == *expected);
    check_all(m, sut);
  }
  void show(std::ostream& os) const override { os << "Get(k=" << k << ", ns=" << ns << ")"; }
};

struct GetMutableAndMutate : Command {
  Key k = gen_key();
  Ns ns = gen_ns();
  std::int64_t x = gen_element();
  void apply(Model& m) const override {
    if (Value* v = m.map.get_mutable(k, ns)) v->push_back(x);
  }
  void run(const Model& m, Sut& sut) const override {
    Value* got = sut.map.get_mutable(k, ns);
    const Value* expected = m.map.get(k, ns);
    RC_ASSERT((got == nullptr) == (expected == nullptr));
    if (got != nullptr) {
      RC_ASSERT(*got == *expected);
      got->push_back(x);
    }
    check_all(nextState(m), sut);
  }
  void show(std::ostream& os) const override {
    os << "GetMutableAndMutate(k=" << k << ", ns=" << ns << ", push=" << x << ")";
  }
};

struct Transform : Command {
  Key k = gen_key();
  Ns ns = gen_ns();
  std::int64_t x = gen_element();
  static Value append(const Value* old, const std::int64_t& x) {
    Value v = old != nullptr ? *old : Value{};
    v.push_back(x);
    return v;
  }
  void apply(Model& m) const override { m.map.transform(k, ns, x, append); }
  void run(const Model& m, Sut& sut) const override {
    sut.map.transform(k, ns, x, append);
    check_all(nextState(m), sut);
  }
  void show(std::ostream& os) const override {
    os << "Transform(k=" << k << ", ns=" << ns << ", append=" << x << ")";
  }
};

struct StartSnapshot : Command {
  static constexpr std::size_t kMaxLive = 6;
  void checkPreconditions(const Model& m) const override {
    RC_PRE(m.map.live_versions().size() < kMaxLive);
  }
  void apply(Model& m) const override { m.map.start_snapshot(); }
  void run(const Model& m, Sut& sut) const override {
    Map::Snapshot s = sut.map.snapshot();
    RC_ASSERT(s.version() == m.map.map_version() + 1);
    RC_ASSERT(s.size() == m.map.size());
    const std::uint32_t v = s.version();
    const bool inserted = sut.snapshots.emplace(v, SnapshotSlot(std::move(s))).second;
    RC_ASSERT(inserted);
    check_all(nextState(m), sut);
  }
  void show(std::ostream& os) const override { os << "StartSnapshot()"; }
};

// Advances the snapshot's cursor by up to `count` entries; a pass may span commands, with
// writes in between. Each emitted entry must be in the model image with the same value; at
// the end of a pass the emitted entries must be the image exactly.
struct IterateSnapshot : Command {
  std::uint32_t v;
  std::size_t count = *rc::gen::inRange<std::size_t>(1, 20);
  explicit IterateSnapshot(const Model& m) : v(gen_live_version(m)) {}
  void checkPreconditions(const Model& m) const override { RC_PRE(m.map.is_live(v)); }
  void run(const Model& m, Sut& sut) const override {
    SnapshotSlot& slot = sut.snapshots.at(v);
    const Image expected = m.map.image(v);
    if (!slot.in_pass) {
      slot.cursor = slot.snapshot.cursor();
      slot.emitted.clear();
      slot.in_pass = true;
    }
    for (std::size_t i = 0; i < count && !slot.cursor.done(); ++i, slot.cursor.next()) {
      const auto e = slot.cursor.get();
      const auto key = std::make_pair(e.key, e.ns);
      const auto it = expected.find(key);
      if (it == expected.end()) {
        RC_FAIL("snapshot " + std::to_string(v) + " emitted " + to_text(key) + ":" +
                to_text(e.state) + ", absent from the model image");
      }
      if (!(it->second == e.state)) {
        RC_FAIL("snapshot " + std::to_string(v) + " emitted " + to_text(key) + ":" +
                to_text(e.state) + ", model image has " + to_text(it->second));
      }
      const bool fresh = slot.emitted.emplace(key, e.state).second;
      if (!fresh) RC_FAIL("snapshot " + std::to_string(v) + " emitted " + to_text(key) + " twice");
    }
    if (slot.cursor.done()) {
      require_same(expected, slot.emitted,
                   "full iteration of snapshot " + std::to_string(v) + " differs from the model");
      slot.in_pass = false;
    }
    check_all(m, sut);
  }
  void show(std::ostream& os) const override {
    os << "IterateSnapshot(v=" << v << ", entries=" << count << ")";
  }
};

// Releases a snapshot; mostly a live one, sometimes one released before (idempotent).
struct Release : Command {
  std::uint32_t v;
  explicit Release(const Model& m) : v(pick(m)) {}
  static std::uint32_t pick(const Model& m) {
    RC_PRE(m.map.map_version() >= 1u);
    const std::vector<std::uint32_t> live = m.map.live_versions();
    if (!live.empty() && *rc::gen::inRange(0, 4) != 0) return *rc::gen::elementOf(live);
    return *rc::gen::inRange<std::uint32_t>(1, m.map.map_version() + 1);
  }
  void checkPreconditions(const Model& m) const override {
    RC_PRE(v >= 1u);
    RC_PRE(v <= m.map.map_version());
  }
  void apply(Model& m) const override { m.map.release_snapshot(v); }
  void run(const Model& m, Sut& sut) const override {
    const auto it = sut.snapshots.find(v);
    RC_ASSERT(it != sut.snapshots.end());
    Map::Snapshot& s = it->second.snapshot;
    RC_ASSERT(s.released() == !m.map.is_live(v));
    s.release();
    RC_ASSERT(s.released());
    it->second.in_pass = false;
    check_all(nextState(m), sut);
  }
  void show(std::ostream& os) const override { os << "Release(v=" << v << ")"; }
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
  void checkPreconditions(const Model& m) const override { RC_PRE(m.map.is_live(v)); }
  void run(const Model& m, Sut& sut) const override;
  void show(std::ostream& os) const override {
    os << "SerializeRestore(v=" << v << ", steps=" << to_text(steps) << ")";
  }
};

void SerializeRestore::run(const Model& m, Sut& sut) const {
  const Image expected = m.map.image(v);
  const std::string name = "snapshot " + std::to_string(v);
  Writer writer(sut.snapshots.at(v).snapshot);
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

  const ModelMap restored_model = ModelMap::restore(expected);
  for (const cowstate::MapOptions& options : {sut.options, kTinyOptions}) {
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
  check_all(m, sut);
}

// --- the property ------------------------------------------------------------------------------

// Turns map assertions into exceptions for the duration of a test, so RapidCheck reports and
// shrinks them.
class ThrowingAsserts {
 public:
  ThrowingAsserts() : previous_(cowstate::set_assert_handler(&raise)) {}
  ~ThrowingAsserts() { cowstate::set_assert_handler(previous_); }
  ThrowingAsserts(const ThrowingAsserts&) = delete;
  ThrowingAsserts& operator=(const ThrowingAsserts&) = delete;

 private:
  [[noreturn]] static void raise(const char* expr, const char* invariant, const char* message,
                                 const char* file, int line) {
    throw std::logic_error(std::string(file) + ":" + std::to_string(line) + ": invariant " +
                           invariant + " violated: " + message + " (" + expr + ")");
  }
  cowstate::AssertHandler previous_;
};

constexpr double kSequenceScale = 4.0;

void check_map_against_model(cowstate::MapOptions options) {
  ThrowingAsserts throwing;
  rc::prop("command sequences agree with the model", [options] {
    // rc::state::check, with sequences four times longer than RapidCheck's default size
    // gives, so maps grow past a few entries and rehash under live snapshots.
    const auto commands = *rc::gen::scale(
        kSequenceScale,
        rc::state::gen::commands(
            Model{},
            rc::state::gen::execOneOfWithArgs<Put, Put, Remove, Get, GetMutableAndMutate, Transform,
                                              StartSnapshot, IterateSnapshot, IterateSnapshot,
                                              Release, SerializeRestore>()));
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
