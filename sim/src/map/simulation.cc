// One simulation run; see run.h for the tasks and the checks.
#include "map/simulation.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/sim_core.h"
#include "cowstate/assert.h"
#include "cowstate/bytes.h"
#include "cowstate/checksum.h"
#include "cowstate/cow_state_map.h"
#include "cowstate/cow_state_map_access.h"
#include "cowstate/hooks.h"
#include "cowstate/model/versioned_map.h"
#include "cowstate/serializers.h"
#include "cowstate/sim/fiber.h"
#include "cowstate/sim/map_options.h"
#include "cowstate/sim/map_steps.h"
#include "cowstate/sim/random.h"
#include "cowstate/sim/run.h"
#include "cowstate/snapshot_io.h"

namespace cowstate::sim {

namespace {

using detail::AssertionCaught;
using detail::CheckFailed;
using detail::Digest;
using detail::directions;
using detail::expect;
using detail::kNoTask;
using detail::ScenarioInvalid;
using detail::step_action;
using detail::Task;
using detail::TaskKind;

using Key = std::uint64_t;
using Ns = std::int32_t;
using State = std::vector<std::int64_t>;

// The simulator's hash policy: the default mix, or identity to force collisions.
struct SimHash {
  bool identity = false;
  std::uint32_t operator()(const Key& k, const Ns& n) const noexcept {
    return identity ? IdentityHash<Key, Ns>{}(k, n) : DefaultHash<Key, Ns>{}(k, n);
  }
};

using Map = CowStateMap<Key, Ns, State, SimHash>;
using Model = model::VersionedMap<Key, Ns, State>;
using Image = Model::Image;
using Writer = MapSnapshotWriter<Map, UInt64Serializer, Int32Serializer, VectorInt64Serializer>;
using Access = CowStateMapAccess;

class Simulation;
// A run that failed in the middle of a writer operation leaves the map in a state its
// destructor cannot walk; such maps are parked here instead of destroyed.
template <class M>
std::vector<std::unique_ptr<M>>& graveyard() {
  static std::vector<std::unique_ptr<M>> maps;
  return maps;
}
std::string text(const State& s) { return model::to_text(s); }

struct SnapshotRecord {
  std::uint32_t number = 0;  // s1, s2, ... in start order
  std::string name;          // "s<number>", or the scenario's name for it
  std::uint32_t version = 0;
  Map::Snapshot handle;
  Image expected;
  bool released = false;
  bool decided = false;  // the releaser chose whether to cancel it
  bool cancel = false;   // asked to stop by the releaser
  bool in_step = false;  // its serializer is inside Writer::step
  bool completed = false;
  // The snapshot whose completed checkpoint was the map's change base when this one
  // started (change_log.h), or null when none had completed.
  const SnapshotRecord* base = nullptr;
  std::size_t emitted = 0;
  std::optional<Image> restored;  // what its bytes restored to, once completed
};

// A (key, namespace, state) row that points at the state instead of copying it.
struct Row {
  Key key;
  Ns ns;
  const State* state;
  bool operator<(const Row& o) const { return key != o.key ? key < o.key : ns < o.ns; }
  bool operator==(const Row& o) const { return key == o.key && ns == o.ns && *state == *o.state; }
};
Image to_image(const std::vector<Row>& rows) {
  Image out;
  for (const Row& r : rows) out.emplace(std::make_pair(r.key, r.ns), *r.state);
  return out;
}
// Collects the entries for_each enumerates into `rows`, sorted by key.
template <class ForEach>
void collect(ForEach&& for_each, std::vector<Row>& rows) {
  rows.clear();
  for_each([&rows](const Key& k, const Ns& n, const State& s) { rows.push_back(Row{k, n, &s}); });
  std::sort(rows.begin(), rows.end());
}
struct Scratch {
  std::vector<Row> got, expected;
};
std::unique_ptr<Scratch> make_scratch() { return std::make_unique<Scratch>(); }

class Simulation final : public detail::SimCore {
 public:
  Simulation(const RunConfig& config, Strategy& strategy)
      : SimCore(config, strategy),
        opts_(options_for(config)),
        map_(std::make_unique<Map>(MapOptions{.initial_capacity = opts_.initial_capacity,
                                              .min_capacity = opts_.min_capacity,
                                              .max_capacity = opts_.max_capacity},
                                   SimHash{opts_.identity_hash})),
        model_(std::make_unique<Model>()) {
    step_bound_ =
        config.step_bound != 0 ? config.step_bound : std::uint64_t{opts_.ops_max} * 400 + 100000;
    if (opts_.track_changes) map_->track_changes();
    track_copies_ = static_cast<bool>(config.on_step);
    if (scenario_ != nullptr) {
      for (const ScenarioItem& item : scenario_->items) {
        if (const auto* e = expectation_of(item)) {
          track_copies_ = track_copies_ || e->kind == ExpectKind::copied;
        }
      }
    }
  }

  // A scenario's workload: its capacities and hash; everything else comes from its lines.
  static MapWorkloadOptions options_for(const RunConfig& config) {
    if (config.scenario == nullptr) return options_of<MapWorkloadOptions>(*config.options);
    MapWorkloadOptions o;
    o.identity_hash = config.scenario->config.identity_hash;
    o.track_changes = config.scenario->config.track_changes;
    return detail::scenario_options(*config.scenario, o);
  }

  // Unwinds unfinished tasks first (their stacks refer to snapshots), then releases the
  // snapshots, then frees the map unless a failure left it mid-operation.
  ~Simulation() {
    // A run stopped between two steps may have left the writer inside an operation; let it
    // finish that operation (nothing else runs) so the map is whole again. A production
    // assertion, though, may have left the map broken: that map is parked, not freed.
    if (!map_broken_) finish_writer_op();
    tasks_.clear();
    snapshots_.clear();
    if (map_broken_ || writer_in_op_) graveyard<Map>().push_back(std::move(map_));
  }
  Simulation(const Simulation&) = delete;
  Simulation& operator=(const Simulation&) = delete;

 private:
  void writer_body();
  void after_run() override {
    if (config_.crash_states_max != 0) {
      throw ScenarioInvalid{0,
                            "crash states need checkpoint storage on a simulated disk, which "
                            "the map workload has not: use a backend scenario"};
    }
  }
  void serializer_body(SnapshotRecord& rec, Task& self);
  // A serializer's walk of its snapshot through the public iterator.
  struct IteratedSoFar {
    Map::Snapshot::Cursor cursor;
    std::set<std::pair<Key, Ns>> seen;
  };
  void iterate_to(const SnapshotRecord& rec, IteratedSoFar& it, std::size_t upto);
  void check_restore(SnapshotRecord& rec, const std::vector<std::byte>& bytes);
  void check_delta(const SnapshotRecord& rec);
  void notify_completions();
  void check_repeats_refused(const SnapshotRecord& rec, const std::vector<std::byte>& bytes);
  // A restored map starts small and lives within the run's capacity bounds.
  MapOptions restore_options() const {
    return MapOptions{.initial_capacity = 4,
                      .min_capacity = opts_.min_capacity,
                      .max_capacity = opts_.max_capacity};
  }
  void releaser_body(Task& self);
  void run_release(Task& self, const Action& a);
  std::optional<Action> draw_decision(Prng& rng) const;
  std::optional<Action> draw_release_again(Prng& rng) const;
  void cancel_snapshot(SnapshotRecord& r);
  void release_again(SnapshotRecord& r);
  std::vector<SnapshotRecord*> undecided() const;
  SnapshotRecord* snapshot_named(const std::string& name) const {
    for (const auto& r : snapshots_) {
      if (r->name == name) return r.get();
    }
    return nullptr;
  }
  bool is_runnable(const Task& t) const override {
    if (t.fiber->finished()) return false;
    return t.kind != TaskKind::releaser || releaser_ready(t);
  }
  bool releaser_ready(const Task& t) const {
    if (scenario_ != nullptr) {
      // A scripted releaser waits for the snapshot its next line names (and, in a free
      // schedule, a `release` for that snapshot's serializer to be between steps).
      return t.next_line >= t.program.size() || t.inner_yields > 0 ||
             !waits_for_snapshot(*t.program[t.next_line]);
    }
    return writer_done_ || undecided_count_ > 0;
  }
  bool waits_for_snapshot(const StepLine& line) const {
    const SnapshotRecord* r = snapshot_named(line.action.snapshot);
    if (r == nullptr) return true;
    return line.action.kind == ActionKind::release && r->in_step &&
           !scenario_->config.fixed_schedule;
  }

  // --- writer operations ---
  Key pick_key(Prng& rng) {
    if (opts_.hot_keys > 0 && rng.below(100) < opts_.hot_percent) {
      return rng.below(std::min(opts_.hot_keys, opts_.keys));
    }
    return rng.below(opts_.keys);
  }
  State pick_value(Prng& rng) {
    State v(rng.below(opts_.value_len_max + 1));
    for (auto& x : v) x = static_cast<std::int64_t>(rng.below(100));
    return v;
  }
  Action generate(Prng& rng);
  void execute(const Action& a);
  std::optional<std::string> keyed_step(const Action& a);
  void visit(const Action& a);
  void start_snapshot(const std::string& name);
  void release(SnapshotRecord& rec, const std::string& by);
  std::size_t live_snapshots() const { return live_count_; }

  // --- checks ---
  void check_minimal(const Access::EntryInfo& before, std::uint32_t h, Key k, Ns n,
                     const char* what);
  void after_step_checks() override;
  void deep_checks();
  void check_expectation(const Expectation& e) override;
  void check_image(const Expectation& e);
  // How what the last writer step copied differs from an `expect copied`.
  Difference copied_difference(const Expectation& e) const;
  Image snapshot_contents(const SnapshotRecord& r);
  std::uint64_t digest() const override;
  void start() override;
  void after_resume(Task& t, const StepRecord& rec) override;
  void on_assertion() override { map_broken_ = true; }

  // (key, ns) -> (slot, state object) of every live entry; for "what was copied".
  using Placement = std::map<std::pair<Key, Ns>, std::pair<std::uint32_t, const void*>>;
  Placement placement() const;
  MapLayout layout() const;

  MapWorkloadOptions opts_;
  std::unique_ptr<Map> map_;
  std::unique_ptr<Model> model_;
  std::vector<std::unique_ptr<SnapshotRecord>> snapshots_;
  bool map_broken_ = false;  // a production assertion fired mid-operation
  bool dirty_ = true;        // a step may have changed the map or the model since the checks
  std::uint64_t dirty_steps_ = 0;
  std::size_t live_count_ = 0;       // snapshots started and not released
  std::size_t undecided_count_ = 0;  // live snapshots the releaser has not decided on
  std::unique_ptr<Scratch> rows_ = make_scratch();  // buffers of the deep checks
  VisitCursor visit_cursor_;
  // Change tracking: serialized snapshots the writer has not yet told the map about (as a
  // task thread hears of a completed checkpoint), and the map's base.
  std::vector<const SnapshotRecord*> completions_;
  const SnapshotRecord* base_ = nullptr;
  // What the writer's last finished step copied (scenario expectations, explain).
  bool track_copies_ = false;
  Placement before_op_;
  std::set<EntryKey> copied_entries_, copied_states_;
};

Action Simulation::generate(Prng& rng) {
  OpWeights w = opts_.weights;
  if (live_snapshots() >= opts_.live_snapshots_max) w.snapshot_start = 0;
  const std::uint32_t total = total_weight(w);
  const OpKind op = total == 0 ? OpKind::get : kind_at(w, rng.below(total));
  Action a;
  a.map_op = op;
  a.entry.first = pick_key(rng);
  a.entry.second = static_cast<Ns>(rng.below(opts_.namespaces));
  switch (op) {
    case OpKind::put:
    case OpKind::put_and_get_old:
      a.value = pick_value(rng);
      break;
    case OpKind::get_mutable:
      a.mutation = static_cast<Mutation>(rng.below(3));
      a.x = static_cast<std::int64_t>(rng.below(100));
      break;
    case OpKind::transform:
      a.x = static_cast<std::int64_t>(rng.below(100));
      break;
    case OpKind::snapshot_start:
      a.snapshot = "s" + std::to_string(snapshots_.size() + 1);
      break;
    case OpKind::visit:
      a.budget = static_cast<std::uint32_t>(1 + rng.below(6));
      a.extras.set().salt = rng.below(7);
      break;
    default:
      break;
  }
  return a;
}

void Simulation::writer_body() {
  writer_loop(
      opts_.ops_max, [this](Prng& rng) { return generate(rng); },
      [this](const Action& action) {
        notify_completions();
        if (track_copies_) before_op_ = placement();
        execute(action);
      },
      [this] {
        if (!track_copies_) return;
        copied_entries_.clear();
        copied_states_.clear();
        const Placement after = placement();
        for (const auto& [key, where] : after) {
          auto it = before_op_.find(key);
          if (it == before_op_.end()) continue;
          if (it->second.first != where.first) copied_entries_.insert(key);
          if (it->second.second != where.second) copied_states_.insert(key);
        }
      });
}

void Simulation::check_minimal(const Access::EntryInfo& before, std::uint32_t h, Key k, Ns n,
                               const char* what) {
  if (before.index == 0) return;
  const Access::EntryInfo after = Access::find(*map_, k, n);
  if (before.entry_version >= h) {
    expect(after.index == before.index, "minimal",
           std::string(what) + " copied entry (" + std::to_string(k) + "," + std::to_string(n) +
               ") with entry_version " + std::to_string(before.entry_version) + " >= H " +
               std::to_string(h) + " that no live snapshot can see");
  }
  if (before.state_version >= h && before.entry_version >= h) {
    expect(after.state == before.state, "minimal",
           std::string(what) + " copied the state of (" + std::to_string(k) + "," +
               std::to_string(n) + ") with state_version " + std::to_string(before.state_version) +
               " >= H " + std::to_string(h));
  }
}

// `get_mutable ... then M` on a state it was handed (the map's or the model's).
void mutate(State& s, Mutation m, std::int64_t x) {
  if (m == Mutation::append || s.empty()) {
    s.push_back(x);
  } else if (m == Mutation::overwrite) {
    s[static_cast<std::size_t>(x < 0 ? -x : x) % s.size()] = -x;
  } else {
    s.pop_back();
  }
}

// The keyed writer action as the trace writes it: "put (1,0) [10]".
std::string step_text(const Action& a, const std::string& where) {
  std::string out = std::string(action_name(a)) + " " + where;
  switch (a.map_op) {
    case OpKind::put:
    case OpKind::put_and_get_old:
      return out + " " + text(State(a.value));
    case OpKind::get_mutable:
      return out + " mutate " + std::to_string(static_cast<int>(a.mutation)) + " " +
             std::to_string(a.x);
    case OpKind::transform:
      return out + " append " + std::to_string(a.x);
    default:
      return out;
  }
}

void Simulation::execute(const Action& a) {
  COWSTATE_ASSERT(a.kind == ActionKind::map_op && a.map_op != OpKind::snapshot_release, "T2",
                  "a writer ran a non-writer action");
  if (a.map_op == OpKind::snapshot_start) return start_snapshot(a.snapshot);
  if (a.map_op == OpKind::visit) return visit(a);
  const Key k = a.entry.first;
  const Ns n = a.entry.second;
  const std::string where = "(" + std::to_string(k) + "," + std::to_string(n) + ")";
  const std::uint32_t h = map_->highest_required_version();
  const Access::EntryInfo before = Access::find(*map_, k, n);
  trace("writer " + step_text(a, where));
  const std::optional<std::string> bad = keyed_step(a);
  expect(!bad, "result", bad.value_or(""));
  if (a.map_op != OpKind::remove && a.map_op != OpKind::remove_and_get_old) {
    check_minimal(before, h, k, n, action_name(a));
  }
}

// One keyed writer action through the shared step functions (map_steps.h): the model's
// call, the map's, and what differed between their results.
std::optional<std::string> Simulation::keyed_step(const Action& a) {
  MapSteps<Map, Model> steps(*map_, *model_);
  const Key k = a.entry.first;
  const Ns n = a.entry.second;
  switch (a.map_op) {
    case OpKind::put:
      return steps.put(k, n, a.value);
    case OpKind::put_and_get_old:
      return steps.put_and_get_old(k, n, a.value);
    case OpKind::remove:
      return steps.remove(k, n);
    case OpKind::remove_and_get_old:
      return steps.remove_and_get_old(k, n);
    case OpKind::get:
      return steps.get(k, n);
    case OpKind::contains:
      return steps.contains(k, n);
    case OpKind::get_mutable:
      return steps.get_mutable(k, n, [&a](State& s) { mutate(s, a.mutation, a.x); });
    case OpKind::transform:
      // The map gets the in-place form: the same append, on the state it may share.
      return steps.transform(
          k, n, a.x, [](State& s, const std::int64_t& x) { s.push_back(x); },
          [](const State* old, const std::int64_t& x) {
            State s = old != nullptr ? *old : State{};
            s.push_back(x);
            return s;
          });
    case OpKind::snapshot_start:
    case OpKind::snapshot_release:
    case OpKind::visit:
      break;
  }
  return std::nullopt;
}

// `visit N salt S`: one incremental-visitor call; its remove/replace decisions (a function of
// key, state size and salt) are mirrored on the model.
void Simulation::visit(const Action& a) {
  const std::size_t budget = a.budget;
  const std::uint64_t salt = a.extras.get().salt;
  trace("writer visit " + std::to_string(budget) + " salt " + std::to_string(salt));
  std::vector<std::pair<std::pair<Key, Ns>, std::optional<State>>> decisions;
  map_->visit_incremental(visit_cursor_, budget, [&](const Key& vk, const Ns& vn, const State& s) {
    const std::uint64_t r = (vk * 31 + s.size() + salt) % 7;
    if (r == 0) {
      decisions.push_back({{vk, vn}, std::nullopt});
      return VisitResult<State>::remove();
    }
    if (r == 1) {
      State next = s;
      next.push_back(static_cast<std::int64_t>(salt));
      decisions.push_back({{vk, vn}, next});
      return VisitResult<State>::replace(std::move(next));
    }
    return VisitResult<State>::keep();
  });
  for (auto& [key, state] : decisions) {
    if (state) {
      model_->put(key.first, key.second, *state);
    } else {
      model_->remove(key.first, key.second);
    }
  }
}

void Simulation::start_snapshot(const std::string& name) {
  auto rec = std::make_unique<SnapshotRecord>();
  rec->number = static_cast<std::uint32_t>(snapshots_.size() + 1);
  rec->name = name;
  rec->handle = map_->snapshot();
  rec->version = model_->start_snapshot();
  rec->expected = model_->image(rec->version);
  ++result_.stats.snapshots;
  trace("writer snapshot " + name + " version " + std::to_string(rec->version) + " size " +
        std::to_string(rec->expected.size()));
  expect(rec->handle.version() == rec->version, "I1",
         "snapshot " + name + " got version " + std::to_string(rec->handle.version()) + ", model " +
             std::to_string(rec->version));
  expect(!opts_.track_changes || (rec->handle.has_change_base() == (base_ != nullptr) &&
                                  (base_ == nullptr || rec->handle.change_base() == base_->version)),
         "I14",
         "snapshot " + name + " captured " +
             (rec->handle.has_change_base()
                  ? "change base " + std::to_string(rec->handle.change_base())
                  : std::string("no change base")) +
             ", the last completed checkpoint is " +
             (base_ != nullptr ? "of version " + std::to_string(base_->version)
                               : std::string("none")));
  rec->base = base_;
  const std::size_t buckets = map_->capacity() + Access::rehash_index(*map_);
  expect(Access::snapshot_bucket_span(rec->handle) == buckets, "I9",
         "snapshot " + name + " sees " + std::to_string(Access::snapshot_bucket_span(rec->handle)) +
             " buckets, the map has " + std::to_string(buckets));
  SnapshotRecord& r = *rec;
  snapshots_.push_back(std::move(rec));
  ++live_count_;
  ++undecided_count_;
  const std::uint32_t id = static_cast<std::uint32_t>(tasks_.size());
  spawn("ser" + std::to_string(r.number), name, TaskKind::serializer, 2,
        [this, &r, id] { serializer_body(r, *tasks_[id]); });
}

void Simulation::release(SnapshotRecord& rec, const std::string& by) {
  COWSTATE_ASSERT(!rec.released, "T3", "the simulator released a snapshot record twice");
  trace(by + " release " + rec.name);
  rec.handle.release();
  model_->release_snapshot(rec.version);
  rec.released = true;
  --live_count_;
  if (!rec.decided) {
    rec.decided = true;
    --undecided_count_;
  }
  dirty_ = true;
}

void Simulation::serializer_body(SnapshotRecord& rec, Task& self) {
  const std::string& name = rec.name;
  std::set<std::pair<Key, Ns>> emitted;
  std::optional<Writer> writer;  // opened at the first step: the snapshot may be gone by then
  // The public iterator walks the same snapshot by its chains, as far as the writer got:
  // the production writer reads by slot, so a broken chain would otherwise show only at
  // the deep checks.
  IteratedSoFar iterated;
  for (;;) {
    // A stopping serializer draws nothing; past its lines it writes the rest in one step.
    const bool stop = rec.released || rec.cancel;
    const Action step =
        next_action(self, [&](Prng& rng) {
          return std::optional<Action>(stop ? step_action(0)
                                            : step_action(1 + rng.below(opts_.step_entries_max)));
        }).value_or(step_action(0));
    if (stop) {
      begin_action(self, step_action(0));
      if (rec.released) {
        trace(self.name + " stops: " + name + " was cancelled");
      } else {
        release(rec, self.name);
      }
      end_unit(self);
      return;
    }
    if (!writer) {
      writer.emplace(rec.handle);
      iterated.cursor = rec.handle.cursor();
    }
    const std::size_t budget = step.budget == 0 ? SIZE_MAX : step.budget;
    begin_action(self, step);
    rec.in_step = true;
    const bool done = writer->step(budget, [&](const Key& k, const Ns& n, const State& s) {
      const auto key = std::make_pair(k, n);
      const std::string where = "(" + std::to_string(k) + "," + std::to_string(n) + ")";
      auto it = rec.expected.find(key);
      expect(it != rec.expected.end(), "emitted",
             name + " emitted " + where + " " + text(s) + " which its version does not hold");
      expect(
          it->second == s, "emitted",
          name + " emitted " + where + " " + text(s) + ", its version holds " + text(it->second));
      expect(emitted.insert(key).second, "emitted", name + " emitted " + where + " twice");
      ++result_.stats.entries_checked;
    });
    rec.in_step = false;
    rec.emitted = writer->entries_written();
    iterate_to(rec, iterated, writer->entries_written());
    trace(self.name + " step " +
          (budget == SIZE_MAX ? std::string("all") : std::to_string(budget)) + " -> " +
          std::to_string(writer->entries_written()) + "/" + std::to_string(rec.expected.size()));
    if (done) break;
    end_unit(self);
    Fiber::yield();
  }
  expect(emitted.size() == rec.expected.size(), "image",
         name + " emitted " + std::to_string(emitted.size()) + " entries, its version holds " +
             std::to_string(rec.expected.size()));
  iterate_to(rec, iterated, SIZE_MAX);
  expect(iterated.seen.size() == rec.expected.size(), "image",
         name + "'s iterator reached " + std::to_string(iterated.seen.size()) +
             " entries, its version holds " + std::to_string(rec.expected.size()));
  rec.in_step = true;
  check_delta(rec);
  rec.in_step = false;
  if (rec.cancel) {  // cancelled while it read its delta: its checkpoint does not complete
    trace(self.name + " stops: " + name + " was cancelled");
    release(rec, self.name);
    end_unit(self);
    return;
  }
  // The bytes are complete: like the async phase of a checkpoint, the serializer is done
  // with the snapshot before it checks what it wrote.
  release(rec, self.name);
  check_restore(rec, writer->bytes());
  rec.completed = true;
  if (opts_.track_changes) completions_.push_back(&rec);
  ++result_.stats.snapshots_checked;
  end_unit(self);
}

// I14, I15: the changes rec's snapshot captured since its base, applied to the base's image
// (tombstones first), give rec's image. Read like an incremental checkpoint's async phase,
// with the writer free to run at every changed entry.
void Simulation::check_delta(const SnapshotRecord& rec) {
  if (rec.base == nullptr) return;
  Image applied = rec.base->expected;
  std::size_t tombstones = 0;
  std::size_t changed = 0;
  rec.handle.for_each_tombstone([&](const Key& k, const Ns& n) {
    applied.erase(std::make_pair(k, n));
    ++tombstones;
  });
  rec.handle.for_each_changed([&](const Key& k, const Ns& n, const State& s) {
    applied[std::make_pair(k, n)] = s;
    ++changed;
  });
  trace(rec.name + " delta from " + rec.base->name + ": " + std::to_string(changed) +
        " changed, " + std::to_string(tombstones) + " tombstones");
  if (const auto d = model::diff(rec.expected, applied)) {
    // A key the delta keeps that rec does not hold lacks its tombstone (I15); any other
    // difference is a change the delta lost (I14).
    const bool kept = std::any_of(applied.begin(), applied.end(), [&rec](const auto& kv) {
      return rec.expected.count(kv.first) == 0;
    });
    expect(false, kept ? "I15" : "I14",
           rec.base->name + "'s image with " + rec.name + "'s delta applied differs from " +
               rec.name + "'s: " + *d);
  }
}

// The writer hears of the checkpoints completed since its last operation, in order.
void Simulation::notify_completions() {
  for (const SnapshotRecord* r : completions_) {
    map_->checkpoint_completed(r->version);
    if (base_ == nullptr || r->version > base_->version) base_ = r;
    trace("writer checkpoint of " + r->name + " completed");
  }
  completions_.clear();
}

// Advances rec's public iterator until it has visited `upto` entries (or its end), checking
// each against rec's version.
void Simulation::iterate_to(const SnapshotRecord& rec, IteratedSoFar& it, std::size_t upto) {
  for (; !it.cursor.done() && it.seen.size() < upto; it.cursor.next()) {
    const auto e = it.cursor.get();
    const auto key = std::make_pair(e.key, e.ns);
    const auto found = rec.expected.find(key);
    const bool held = found != rec.expected.end();
    if (!held || !(found->second == e.state) || !it.seen.insert(key).second) {
      const std::string where = rec.name + "'s iterator reached (" + std::to_string(e.key) + "," +
                                std::to_string(e.ns) + ") " + text(e.state);
      expect(held, "image", where + ", which its version does not hold");
      expect(found->second == e.state, "image",
             where + ", its version holds " + text(found->second));
      expect(false, "image", where + " twice");
    }
    ++result_.stats.entries_checked;
  }
}

// The bytes of rec's snapshot restore to a sound map holding exactly its version.
void Simulation::check_restore(SnapshotRecord& rec, const std::vector<std::byte>& bytes) {
  const std::string& name = rec.name;
  auto restored = read_map_snapshot<Map, UInt64Serializer, Int32Serializer, VectorInt64Serializer>(
      bytes, restore_options());
  expect(restored.ok(), "restore",
         name + " bytes do not restore: " +
             (restored.ok() ? std::string() : restored.status().message()));
  Image got;
  (*restored)->for_each(
      [&got](const Key& k, const Ns& n, const State& s) { got.emplace(std::make_pair(k, n), s); });
  auto d = model::diff(rec.expected, got);
  expect(!d, "restore", name + " restored map differs from its version: " + d.value_or(""));
  std::string why;
  expect((*restored)->check_invariants(&why), "restore", name + " restored map: " + why);
  rec.restored = std::move(got);
  check_repeats_refused(rec, bytes);
}

// The same bytes with every entry written twice, count, trailer and checksum to match: a
// well-formed file but for its repeated keys. The reader must refuse it at the first repeat,
// entry n + 1, naming its offset, and never restore a map that holds a key twice (the bulk
// loader links chains without a lookup per entry and relies on its distinct-key check).
void Simulation::check_repeats_refused(const SnapshotRecord& rec,
                                       const std::vector<std::byte>& bytes) {
  const detail::BesideSchedule beside;  // the run's trace and coverage stay its steps' alone
  constexpr std::size_t kCountAt = kMapSnapshotHeaderSize - 8;  // the header ends with it
  const std::uint64_t n = cowstate::detail::load_le<std::uint64_t>(bytes.data() + kCountAt);
  if (n == 0) return;
  const std::span<const std::byte> all(bytes);
  const auto header = all.first(kMapSnapshotHeaderSize);
  const auto entries = all.subspan(kMapSnapshotHeaderSize,
                                   all.size() - kMapSnapshotHeaderSize - kMapSnapshotTrailerSize);
  std::vector<std::byte> twice(header.begin(), header.end());
  twice.insert(twice.end(), entries.begin(), entries.end());
  twice.insert(twice.end(), entries.begin(), entries.end());
  twice.resize(twice.size() + kMapSnapshotTrailerSize);
  cowstate::detail::store_le<std::uint64_t>(twice.data() + kCountAt, 2 * n);
  std::byte* trailer = twice.data() + twice.size() - kMapSnapshotTrailerSize;
  cowstate::detail::store_le<std::uint64_t>(trailer, 2 * n);
  cowstate::detail::store_le<std::uint64_t>(
      trailer + 8, checksum64(std::span<const std::byte>(twice.data(), twice.size() - 8)));

  auto restored = read_map_snapshot<Map, UInt64Serializer, Int32Serializer, VectorInt64Serializer>(
      twice, restore_options());
  const std::string want = cowstate::detail::map_snapshot_duplicate_error(
                               kMapSnapshotHeaderSize + entries.size(), n, 2 * n)
                               .message();
  const std::string where = rec.name + "'s bytes with every entry twice";
  expect(!restored.ok(), "restore",
         where + " restore to a map of " + std::to_string(restored.ok() ? (*restored)->size() : 0) +
             " entries, expected \"" + want + "\"");
  expect(restored.status().message() == want, "restore",
         where + ": expected \"" + want + "\", found \"" + restored.status().message() + "\"");
}

std::vector<SnapshotRecord*> Simulation::undecided() const {
  std::vector<SnapshotRecord*> out;
  for (const auto& r : snapshots_) {
    if (!r->released && !r->decided) out.push_back(r.get());
  }
  return out;
}

// The releaser cancels a snapshot: at once, or, inside a serializer step, when the step
// ends.
void Simulation::cancel_snapshot(SnapshotRecord& r) {
  if (r.in_step) {
    trace("releaser cancel " + r.name + " (mid-step)");
    probe("cow.cancel_mid_step");
    r.cancel = true;
  } else {
    release(r, "releaser");
  }
}

// Releasing a snapshot that is already gone must change nothing.
void Simulation::release_again(SnapshotRecord& r) {
  trace("releaser release " + r.name + " again");
  r.handle.release();
}

// The releaser's steps: each decides whether a snapshot is cancelled, kept or released.
// Generated runs: it decides once per snapshot, and is runnable only while a decision is
// pending (so strategies with strict priorities, like PCT, cannot starve the others behind
// an idle loop); one step in eight then also releases an already released snapshot again
// (which must change nothing). Scenario runs: it does what its lines say, each when its
// snapshot has started.
void Simulation::releaser_body(Task& self) {
  for (;;) {
    while (!releaser_ready(self)) Fiber::yield();  // not runnable: see is_runnable
    const std::optional<Action> a =
        next_action(self, [this](Prng& rng) { return draw_decision(rng); });
    if (!a) return;
    run_release(self, *a);
    if (const std::optional<Action> again =
            follow_up(self, [this](Prng& rng) { return draw_release_again(rng); })) {
      run_release(self, *again);
    }
    end_unit(self);
    Fiber::yield();
  }
}

void Simulation::run_release(Task& self, const Action& a) {
  begin_action(self, a);
  SnapshotRecord& r = *snapshot_named(a.snapshot);
  if (!r.decided) {
    r.decided = true;
    --undecided_count_;
  }
  switch (a.kind) {
    case ActionKind::cancel:
      if (r.released) {
        release_again(r);
      } else if (!r.cancel) {
        cancel_snapshot(r);
      }
      return;
    case ActionKind::release:
      if (r.released) {
        release_again(r);
      } else {
        if (r.in_step) invalid(self, r.name + " is inside a serializer step; cancel it");
        release(r, "releaser");
      }
      return;
    case ActionKind::keep:  // a decision that changes nothing (traces nothing)
      return;
    default:
      invalid(self, "the releaser cannot run this action");
  }
}

// A decision on a snapshot the releaser has not decided on; nullopt once there is none
// (the writer is done then, see is_runnable).
std::optional<Action> Simulation::draw_decision(Prng& rng) const {
  const std::vector<SnapshotRecord*> pending = undecided();
  if (pending.empty()) return std::nullopt;
  Action a;
  a.snapshot = pending[rng.below(pending.size())]->name;
  a.kind = rng.below(100) < opts_.cancel_percent ? ActionKind::cancel : ActionKind::keep;
  return a;
}

// One time in eight, a release of a snapshot picked at random, if it is already released.
std::optional<Action> Simulation::draw_release_again(Prng& rng) const {
  if (!rng.chance(1, 8)) return std::nullopt;
  const SnapshotRecord& old = *snapshots_[rng.below(snapshots_.size())];
  if (!old.released) return std::nullopt;
  Action a;
  a.kind = ActionKind::release;
  a.snapshot = old.name;
  return a;
}

std::uint64_t Simulation::digest() const {
  Digest d;
  model_->for_each([&d](const Key& k, const Ns& n, const State& s) {
    d.add(k);
    d.add(static_cast<std::uint64_t>(n));
    d.add(s.size());
    for (auto x : s) d.add(static_cast<std::uint64_t>(x));
  });
  d.add(model_->map_version());
  d.add(map_->map_version());
  d.add(map_->highest_required_version());
  d.add(map_->capacity());
  d.add(Access::rehash_index(*map_));
  for (int t = 0; t < 2; ++t) {
    const std::size_t buckets = t == 0 ? map_->capacity() : Access::rehash_capacity(*map_);
    for (std::uint32_t b = 0; b < buckets; ++b) {
      for (std::uint32_t i : Access::chain(*map_, t, b)) {
        const Access::EntryInfo e = Access::info(*map_, i);
        d.add(i);
        d.add(Access::key_of(*map_, i));
        d.add(static_cast<std::uint64_t>(Access::namespace_of(*map_, i)));
        d.add(e.entry_version);
        d.add(e.state_version);
      }
      d.add(0xffff);
    }
  }
  for (std::uint32_t i : Access::free_list(*map_)) d.add(i);
  d.add(Access::retired_entries(*map_));
  d.add(Access::retired_states(*map_));
  d.add(Access::pool_slots(*map_));
  digest_tasks(d);
  for (const auto& r : snapshots_) {
    d.add(r->version);
    d.add(static_cast<std::uint64_t>(r->released) | (std::uint64_t{r->cancel} << 1) |
          (std::uint64_t{r->in_step} << 2) | (std::uint64_t{r->completed} << 3) |
          (std::uint64_t{r->decided} << 4));
  }
  d.add(visit_cursor_.table);
  d.add(visit_cursor_.bucket);
  d.add(writer_done_);
  d.add(writer_in_op_);
  return d.h;
}

void Simulation::after_step_checks() {
  // Only writer steps and releases change the map or the model; serializer steps read.
  if (!dirty_ || writer_in_op_) return;  // mid-operation: only the serializers' checks apply
  dirty_ = false;
  expect(map_->size() == model_->size(), "size",
         "map holds " + std::to_string(map_->size()) + " entries, model " +
             std::to_string(model_->size()));
  expect(map_->highest_required_version() == model_->highest_required_version(), "I2",
         "H is " + std::to_string(map_->highest_required_version()) + ", model " +
             std::to_string(model_->highest_required_version()));
  if (live_count_ == 0) {
    std::size_t retired = map_->retired_count();  // reclaims first
    retired += Access::retired_segments(*map_);
    if (retired != 0) {
      std::string versions;
      for (std::uint32_t v : Access::live_versions(*map_)) versions += " " + std::to_string(v);
      expect(false, "I10",
             std::to_string(retired) +
                 " retired items remain with no live snapshot (map's live versions:" +
                 (versions.empty() ? " none" : versions) + ")");
    }
  }
  if (opts_.deep_check_every != 0 && ++dirty_steps_ % opts_.deep_check_every == 0) deep_checks();
}

void Simulation::deep_checks() {
  ++result_.stats.deep_checks;
  std::string why;
  const bool sound = map_->check_invariants(&why);
  expect(sound, why.substr(0, why.find(':')), why);
  std::vector<Row>& rows = rows_->got;
  std::vector<Row>& expected = rows_->expected;
  collect([this](auto&& fn) { map_->for_each(fn); }, rows);
  collect([this](auto&& fn) { model_->for_each(fn); }, expected);
  if (rows != expected) {
    auto d = model::diff(to_image(expected), to_image(rows));
    expect(false, "live", "live map differs from the model: " + d.value_or("(same image?)"));
  }
  result_.stats.entries_checked += rows.size();
  if (live_count_ == 0) return;
  const std::vector<bool> free = Access::free_slot_mask(*map_);
  for (auto& r : snapshots_) {
    if (r->released) continue;
    const std::string& name = r->name;
    for (std::uint32_t slot : Access::snapshot_slots(r->handle, Access::pool_slots(*map_) + 1)) {
      expect(slot >= free.size() || !free[slot], "I10",
             name + " reaches pool slot " + std::to_string(slot) + ", which was freed");
    }
    collect([&r](auto&& fn) { r->handle.for_each(fn); }, rows);
    bool same = rows.size() == r->expected.size();
    auto it = r->expected.begin();
    for (std::size_t i = 0; same && i < rows.size(); ++i, ++it) {
      same = it->first.first == rows[i].key && it->first.second == rows[i].ns &&
             it->second == *rows[i].state;
    }
    if (!same) {
      auto sd = model::diff(r->expected, to_image(rows));
      expect(false, "image", name + " no longer iterates to its version: " + sd.value_or(""));
    }
    result_.stats.entries_checked += rows.size();
  }
}

Simulation::Placement Simulation::placement() const {
  Placement out;
  for (int t = 0; t < 2; ++t) {
    const std::size_t buckets = t == 0 ? map_->capacity() : Access::rehash_capacity(*map_);
    for (std::uint32_t b = 0; b < buckets; ++b) {
      for (std::uint32_t i : Access::chain(*map_, t, b)) {
        const Access::EntryInfo e = Access::info(*map_, i);
        out[{Access::key_of(*map_, i), Access::namespace_of(*map_, i)}] = {i, e.state};
      }
    }
  }
  return out;
}

MapLayout Simulation::layout() const {
  MapLayout out;
  out.map_version = map_->map_version();
  out.highest_required_version = map_->highest_required_version();
  out.size = map_->size();
  out.rehash_index = Access::rehash_index(*map_);
  out.retired_entries = Access::retired_entries(*map_);
  out.retired_states = Access::retired_states(*map_);
  out.free_slots = Access::free_list(*map_).size();
  // Which live snapshot reaches which slot.
  std::map<std::uint32_t, std::vector<std::string>> seen;
  const std::size_t limit = Access::pool_slots(*map_) + 1;
  for (const auto& r : snapshots_) {
    if (r->released) continue;
    SnapshotLayout s;
    s.name = r->name;
    s.version = r->version;
    s.size = r->expected.size();
    s.emitted = r->emitted;
    s.completed = r->completed;
    for (std::uint32_t slot : Access::snapshot_slots(r->handle, limit)) {
      seen[slot].push_back(r->name);
    }
    s.heads = Access::snapshot_heads(r->handle);
    out.snapshots.push_back(std::move(s));
  }
  auto entry = [this, &seen](std::uint32_t i) {
    const Access::EntryInfo e = Access::info(*map_, i);
    LayoutEntry le;
    le.slot = i;
    le.key = {Access::key_of(*map_, i), Access::namespace_of(*map_, i)};
    le.state = *static_cast<const State*>(e.state);
    le.state_id = reinterpret_cast<std::uintptr_t>(e.state);
    le.entry_version = e.entry_version;
    le.state_version = e.state_version;
    if (auto it = seen.find(i); it != seen.end()) le.seen_by = it->second;
    return le;
  };
  std::set<std::uint32_t> live_slots;
  for (int t = 0; t < 2; ++t) {
    const std::size_t buckets = t == 0 ? map_->capacity() : Access::rehash_capacity(*map_);
    if (t == 1 && buckets == 0) break;
    out.tables.emplace_back(buckets);
    for (std::uint32_t b = 0; b < buckets; ++b) {
      for (std::uint32_t i : Access::chain(*map_, t, b)) {
        out.tables[static_cast<std::size_t>(t)][b].push_back(entry(i));
        live_slots.insert(i);
      }
    }
  }
  for (const auto& [slot, names] : seen) {
    if (!live_slots.count(slot)) out.retired.push_back(entry(slot));
  }
  return out;
}

// What a snapshot holds as production code shows it: the frozen version while it is live,
// what its bytes restored to once completed, nothing once cancelled.
Image Simulation::snapshot_contents(const SnapshotRecord& r) {
  Image got;
  if (!r.released) {
    r.handle.for_each([&got](const Key& k, const Ns& n, const State& s) {
      got.emplace(std::make_pair(k, n), s);
    });
  } else if (r.restored) {
    got = *r.restored;
  }
  return got;
}

// `expect image T {...}`: the live map, or snapshot T by the model and in production
// (iterated while live, restored once released).
void Simulation::check_image(const Expectation& e) {
  auto fail = [&](const std::string& message, Difference d) {
    expectation_failed(e, message, std::move(d));
  };
  auto differs = [](const Image& want, const Image& got, const char* who) {
    Difference d = image_difference(want, got);
    d.shape = who;
    return d;
  };
  const Image want(e.image.begin(), e.image.end());
  if (e.target == "live") {
    Image live;
    map_->for_each([&live](const Key& k, const Ns& n, const State& s) {
      live.emplace(std::make_pair(k, n), s);
    });
    if (live != want) {
      fail("the live map is " + print_image(live) + ", expected " + print_image(want),
           differs(want, live, "in production"));
    }
    return;
  }
  const SnapshotRecord* r = snapshot_named(e.target);
  if (r == nullptr) fail(e.target + " has not started", Difference::of("not started"));
  if (r->expected != want) {
    fail(e.target + " is " + print_image(r->expected) + " by the model, expected " +
             print_image(want),
         differs(want, r->expected, "by the model"));
  }
  if (r->released && !r->restored) return;  // cancelled: the model's word is all there is
  const Image got = snapshot_contents(*r);
  if (got != want) {
    fail(e.target + (r->released ? " restored to " : " iterates to ") + print_image(got) +
             ", expected " + print_image(want),
         differs(want, got, "in production"));
  }
}

void Simulation::check_expectation(const Expectation& e) {
  auto fail = [&](const std::string& message, Difference d) {
    expectation_failed(e, message, std::move(d));
  };
  switch (e.kind) {
    case ExpectKind::image:
      check_image(e);
      return;
    case ExpectKind::copied: {
      auto names = [](const std::set<EntryKey>& keys) {
        std::string out = "{";
        for (const EntryKey& k : keys) {
          out += (out.size() > 1 ? ", " : "") + std::string("(") + std::to_string(k.first) + "," +
                 std::to_string(k.second) + ")";
        }
        return out + "}";
      };
      if (copied_entries_ != e.copied_entries || copied_states_ != e.copied_states) {
        fail("the last writer step copied entries " + names(copied_entries_) + " and states " +
                 names(copied_states_) + ", expected entries " + names(e.copied_entries) +
                 " and states " + names(e.copied_states),
             copied_difference(e));
      }
      return;
    }
    case ExpectKind::versions:
      if (map_->map_version() != e.a || map_->highest_required_version() != e.b) {
        fail("map version " + std::to_string(map_->map_version()) + ", highest required " +
                 std::to_string(map_->highest_required_version()) + "; expected " +
                 std::to_string(e.a) + " and " + std::to_string(e.b),
             Difference::of(directions({{"map", map_->map_version(), e.a},
                                        {"h", map_->highest_required_version(), e.b}})));
      }
      return;
    case ExpectKind::retired: {
      const std::size_t entries = Access::retired_entries(*map_);
      const std::size_t states = Access::retired_states(*map_);
      if (entries != e.a || states != e.b) {
        fail(std::to_string(entries) + " retired entries and " + std::to_string(states) +
                 " retired states; expected " + std::to_string(e.a) + " and " + std::to_string(e.b),
             Difference::of(directions({{"entries", entries, e.a}, {"states", states, e.b}})));
      }
      return;
    }
    case ExpectKind::failure:
      return;  // judged on the outcome of the whole run
    case ExpectKind::latest:
      COWSTATE_ASSERT(false, "REQUIRES", "the parser refuses backend expectations in map files");
  }
}

Difference Simulation::copied_difference(const Expectation& e) const {
  Difference d;
  auto add = [&d](const char* name, const std::set<EntryKey>& a, const std::set<EntryKey>& b) {
    std::set<EntryKey> only;
    std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::inserter(only, only.begin()));
    if (!only.empty()) d.keys[name] = std::move(only);
  };
  add("entries missing", e.copied_entries, copied_entries_);
  add("entries extra", copied_entries_, e.copied_entries);
  add("states missing", e.copied_states, copied_states_);
  add("states extra", copied_states_, e.copied_states);
  return d;
}

void Simulation::after_resume(Task& t, const StepRecord& rec) {
  if (t.kind == TaskKind::writer) dirty_ = true;
  after_step_checks();
  if (config_.on_step) {
    StepView v = step_view(t, rec);
    if (t.kind == TaskKind::writer && t.inner_yields == 0) {
      v.copied_entries = copied_entries_;
      v.copied_states = copied_states_;
    }
    const MapLayout l = layout();
    v.layout = &l;
    config_.on_step(v);
  }
}

void Simulation::start() {
  if (scenario_ != nullptr) {
    trace("scenario " + scenario_->file + " seed " + std::to_string(config_.seed) + " " +
          (scenario_->config.fixed_schedule ? "fixed schedule" : "free schedule"));
  } else {
    trace("seed " + std::to_string(config_.seed) + " options " + opts_.to_string());
  }
  strategy_.begin_run(config_.seed);
  spawn("writer", "writer", TaskKind::writer, 4, [this] { writer_body(); });
  if (opts_.cancel_percent > 0) {
    spawn("releaser", "releaser", TaskKind::releaser, 1, [this] { releaser_body(*tasks_[1]); });
  }
}

}  // namespace

std::unique_ptr<detail::SimCore> make_map_simulation(const RunConfig& config, Strategy& strategy) {
  return std::make_unique<Simulation>(config, strategy);
}

}  // namespace cowstate::sim
