// One simulation run; see run.h for the tasks and the checks.
#include "cowstate/sim/run.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cowstate/assert.h"
#include "cowstate/cow_state_map.h"
#include "cowstate/cow_state_map_access.h"
#include "cowstate/hooks.h"
#include "cowstate/model/versioned_map.h"
#include "cowstate/serializers.h"
#include "cowstate/sim/fiber.h"
#include "cowstate/sim/random.h"
#include "cowstate/snapshot_io.h"

namespace cowstate::sim {

int exit_code(Outcome outcome) noexcept {
  switch (outcome) {
    case Outcome::pass:
      return 0;
    case Outcome::failure:
      return 1;
    case Outcome::assertion:
      return 3;
    case Outcome::stuck:
      return 4;
  }
  return 3;
}

const char* outcome_name(Outcome outcome) noexcept {
  switch (outcome) {
    case Outcome::pass:
      return "pass";
    case Outcome::failure:
      return "failure";
    case Outcome::assertion:
      return "assertion";
    case Outcome::stuck:
      return "stuck";
  }
  return "?";
}

namespace {

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

// A check failed: thrown inside a task, caught by the scheduler.
struct CheckFailed {
  std::string check;
  std::string message;
};

class Simulation;
// A run that failed in the middle of a writer operation leaves the map in a state its
// destructor cannot walk; such maps are parked here instead of destroyed.
template <class M>
std::vector<std::unique_ptr<M>>& graveyard() {
  static std::vector<std::unique_ptr<M>> maps;
  return maps;
}
// A production assertion fired (the handler below turns it into this exception).
struct AssertionCaught {
  std::string invariant;
  std::string message;
};

[[noreturn]] void throw_assertion(const char* expr, const char* invariant, const char* message,
                                  const char* file, int line) {
  throw AssertionCaught{invariant, std::string(message) + " (" + expr + " at " + file + ":" +
                                       std::to_string(line) + ")"};
}

std::string text(const State& s) { return model::to_text(s); }
std::string text(const std::optional<State>& s) { return s ? text(*s) : "absent"; }
std::string text(const State* s) { return s ? text(*s) : "absent"; }

constexpr std::uint32_t kNoTask = 0xffffffffu;

Simulation* g_current = nullptr;  // the run whose fibers are executing (one thread)

enum class TaskKind : std::uint8_t { writer, serializer, releaser };

struct Task {
  std::uint32_t id = 0;
  std::string name;
  TaskKind kind = TaskKind::writer;
  std::uint32_t weight = 1;
  Prng rng{0};
  std::unique_ptr<Fiber> fiber;
  // Where the task is: steps it finished and yields taken inside the current one.
  std::uint64_t units_done = 0;
  std::uint64_t inner_yields = 0;
};

// FNV-1a over the words of a state, for exploration dedup.
struct Digest {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  void add(std::uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 0x100000001b3ULL;
    }
  }
};

struct SnapshotRecord {
  std::uint32_t number = 0;  // s1, s2, ... in start order
  std::uint32_t version = 0;
  Map::Snapshot handle;
  Image expected;
  bool released = false;
  bool decided = false;  // the releaser chose whether to cancel it
  bool cancel = false;   // asked to stop by the releaser
  bool in_step = false;  // its serializer is inside Writer::step
  bool completed = false;
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

class Simulation {
 public:
  Simulation(const RunConfig& config, Strategy& strategy)
      : config_(config),
        opts_(config.workload),
        strategy_(strategy),
        map_(std::make_unique<Map>(MapOptions{.initial_capacity = opts_.initial_capacity,
                                              .min_capacity = opts_.min_capacity,
                                              .max_capacity = opts_.max_capacity},
                                   SimHash{opts_.identity_hash})),
        model_(std::make_unique<Model>()) {
    step_bound_ =
        config.step_bound != 0 ? config.step_bound : std::uint64_t{opts_.ops_max} * 400 + 100000;
  }

  // Unwinds unfinished tasks first (their stacks refer to snapshots), then releases the
  // snapshots, then frees the map unless a failure left it mid-operation.
  ~Simulation() {
    // A run stopped between two steps may have left the writer inside an operation; let it
    // finish that operation (nothing else runs) so the map is whole again. A production
    // assertion, though, may have left the map broken: that map is parked, not freed.
    if (!map_broken_ && writer_in_op_ && !tasks_.empty()) {
      Task& w = *tasks_[0];
      running_ = &w;
      while (writer_in_op_ && !w.fiber->finished()) {
        try {
          w.fiber->resume();
        } catch (...) {
          break;
        }
      }
      running_ = nullptr;
    }
    tasks_.clear();
    snapshots_.clear();
    if (map_broken_ || writer_in_op_) graveyard<Map>().push_back(std::move(map_));
  }
  Simulation(const Simulation&) = delete;
  Simulation& operator=(const Simulation&) = delete;

  RunResult run();

  // Called at every COWSTATE_YIELD point inside production code.
  void on_yield(const char* point) {
    if (!Fiber::in_fiber() || running_ == nullptr) return;
    ++result_.stats.yields;
    ++running_->inner_yields;
    trace(running_->name + " yield " + point);
    Fiber::yield();
  }

 private:
  // --- tasks ---
  Task& spawn(std::string name, TaskKind kind, std::uint32_t weight, std::function<void()> body) {
    auto t = std::make_unique<Task>();
    t->id = static_cast<std::uint32_t>(tasks_.size());
    t->name = std::move(name);
    t->kind = kind;
    t->weight = weight;
    t->rng = Prng(derive_seed(config_.seed, 1000 + t->id));
    t->fiber = std::make_unique<Fiber>(std::move(body));
    tasks_.push_back(std::move(t));
    return *tasks_.back();
  }
  void writer_body();
  void serializer_body(SnapshotRecord& rec, Task& self);
  void releaser_body(Task& self);
  std::vector<SnapshotRecord*> undecided() const;
  bool is_runnable(const Task& t) const {
    if (t.fiber->finished()) return false;
    if (t.kind != TaskKind::releaser) return true;
    return writer_done_ || undecided_count_ > 0;
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
  void do_op(Op op, Prng& rng);
  void start_snapshot();
  void release(SnapshotRecord& rec, const std::string& by);
  std::size_t live_snapshots() const { return live_count_; }

  // --- checks ---
  static void expect(bool ok, std::string check, const std::string& message) {
    if (!ok) throw CheckFailed{std::move(check), message};
  }
  void check_minimal(const Access::EntryInfo& before, std::uint32_t h, Key k, Ns n,
                     bool state_in_place, const char* what);
  void after_step_checks();
  void deep_checks();
  // Everything that decides the rest of the run, hashed (for exploration dedup).
  std::uint64_t digest() const;

  void trace(const std::string& line) {
    const std::string full = std::to_string(result_.stats.steps) + " " + line;
    for (const char c : full) {
      hash_ ^= static_cast<std::uint8_t>(c);
      hash_ *= 0x100000001b3ULL;
    }
    hash_ ^= static_cast<unsigned char>('\n');
    hash_ *= 0x100000001b3ULL;
    if (config_.keep_trace) {
      result_.trace.push_back(full);
    } else {
      if (tail_.size() < config_.trace_tail) {
        tail_.push_back(full);
      } else if (!tail_.empty()) {
        tail_[tail_next_] = full;  // ring buffer: tail_next_ is the oldest line
      }
      if (config_.trace_tail > 0) tail_next_ = (tail_next_ + 1) % config_.trace_tail;
    }
  }

  RunConfig config_;
  WorkloadOptions opts_;
  Strategy& strategy_;
  std::unique_ptr<Map> map_;
  std::unique_ptr<Model> model_;
  std::vector<std::unique_ptr<Task>> tasks_;
  std::vector<std::unique_ptr<SnapshotRecord>> snapshots_;
  Task* running_ = nullptr;
  bool writer_done_ = false;
  bool writer_in_op_ = false;
  bool map_broken_ = false;  // a production assertion fired mid-operation
  bool dirty_ = true;        // a step may have changed the map or the model since the checks
  std::uint64_t dirty_steps_ = 0;
  std::size_t live_count_ = 0;       // snapshots started and not released
  std::size_t undecided_count_ = 0;  // live snapshots the releaser has not decided on
  std::unique_ptr<Scratch> rows_ = make_scratch();  // buffers of the deep checks
  VisitCursor visit_cursor_;
  std::uint64_t step_bound_ = 0;
  std::uint64_t hash_ = 0xcbf29ce484222325ULL;
  std::vector<std::string> tail_;
  std::size_t tail_next_ = 0;
  RunResult result_;
};

void Simulation::writer_body() {
  Task& self = *tasks_[0];
  for (std::uint32_t i = 0; i < opts_.ops_max; ++i) {
    std::array<std::uint32_t, kOpCount> w = opts_.weights;
    if (live_snapshots() >= opts_.live_snapshots_max) w[static_cast<std::size_t>(Op::snapshot)] = 0;
    std::uint64_t total = 0;
    for (auto x : w) total += x;
    const Op op = total == 0 ? Op::get : static_cast<Op>(pick_weighted(self.rng, w));
    writer_in_op_ = true;
    try {
      do_op(op, self.rng);
    } catch (const CheckFailed&) {
      writer_in_op_ = false;  // checks run after the map call returned: the map is whole
      throw;
    }
    writer_in_op_ = false;
    ++result_.stats.ops;
    ++self.units_done;
    self.inner_yields = 0;
    Fiber::yield();
  }
  writer_done_ = true;
}

void Simulation::check_minimal(const Access::EntryInfo& before, std::uint32_t h, Key k, Ns n,
                               bool state_in_place, const char* what) {
  if (before.index == 0) return;
  const Access::EntryInfo after = Access::find(*map_, k, n);
  if (before.entry_version >= h) {
    expect(after.index == before.index, "minimal",
           std::string(what) + " copied entry (" + std::to_string(k) + "," + std::to_string(n) +
               ") with entry_version " + std::to_string(before.entry_version) + " >= H " +
               std::to_string(h) + " that no live snapshot can see");
  }
  if (state_in_place && before.state_version >= h && before.entry_version >= h) {
    expect(after.state == before.state, "minimal",
           std::string(what) + " copied the state of (" + std::to_string(k) + "," +
               std::to_string(n) + ") with state_version " + std::to_string(before.state_version) +
               " >= H " + std::to_string(h));
  }
}

void Simulation::do_op(Op op, Prng& rng) {
  const Key k = pick_key(rng);
  const Ns n = static_cast<Ns>(rng.below(opts_.namespaces));
  const std::string where = "(" + std::to_string(k) + "," + std::to_string(n) + ")";
  const std::uint32_t h = map_->highest_required_version();
  const Access::EntryInfo before = Access::find(*map_, k, n);
  switch (op) {
    case Op::put: {
      State v = pick_value(rng);
      trace("writer put " + where + " " + text(v));
      model_->put(k, n, v);
      map_->put(k, n, std::move(v));
      check_minimal(before, h, k, n, true, "put");
      break;
    }
    case Op::put_and_get_old: {
      State v = pick_value(rng);
      trace("writer put_and_get_old " + where + " " + text(v));
      auto expected = model_->put_and_get_old(k, n, v);
      auto got = map_->put_and_get_old(k, n, std::move(v));
      expect(got == expected, "result",
             "put_and_get_old " + where + " returned " + text(got) + ", model " + text(expected));
      check_minimal(before, h, k, n, true, "put_and_get_old");
      break;
    }
    case Op::remove: {
      trace("writer remove " + where);
      const bool expected = model_->remove(k, n);
      const bool got = map_->remove(k, n);
      expect(got == expected, "result", "remove " + where + " returned " + std::to_string(got));
      break;
    }
    case Op::remove_and_get_old: {
      trace("writer remove_and_get_old " + where);
      auto expected = model_->remove_and_get_old(k, n);
      auto got = map_->remove_and_get_old(k, n);
      expect(
          got == expected, "result",
          "remove_and_get_old " + where + " returned " + text(got) + ", model " + text(expected));
      break;
    }
    case Op::get: {
      trace("writer get " + where);
      const State* got = map_->get(k, n);
      const State* expected = model_->get(k, n);
      expect((got == nullptr) == (expected == nullptr) && (got == nullptr || *got == *expected),
             "result", "get " + where + " returned " + text(got) + ", model " + text(expected));
      check_minimal(before, h, k, n, true, "get");
      break;
    }
    case Op::contains: {
      trace("writer contains " + where);
      expect(map_->contains(k, n) == model_->contains(k, n), "result", "contains " + where);
      break;
    }
    case Op::get_mutable: {
      const std::uint64_t how = rng.below(3);
      const auto x = static_cast<std::int64_t>(rng.below(100));
      trace("writer get_mutable " + where + " mutate " + std::to_string(how) + " " +
            std::to_string(x));
      State* got = map_->get_mutable(k, n);
      State* expected = model_->get_mutable(k, n);
      expect((got == nullptr) == (expected == nullptr) && (got == nullptr || *got == *expected),
             "result",
             "get_mutable " + where + " returned " + text(got) + ", model " + text(expected));
      if (got != nullptr) {
        for (State* s : {got, expected}) {
          if (how == 0 || s->empty()) {
            s->push_back(x);
          } else if (how == 1) {
            (*s)[static_cast<std::size_t>(x) % s->size()] = -x;
          } else {
            s->pop_back();
          }
        }
      }
      check_minimal(before, h, k, n, true, "get_mutable");
      break;
    }
    case Op::transform: {
      const auto x = static_cast<std::int64_t>(rng.below(100));
      trace("writer transform " + where + " append " + std::to_string(x));
      auto fn = [](const State* old, std::int64_t value) {
        State s = old ? *old : State{};
        s.push_back(value);
        return s;
      };
      model_->transform(k, n, x, fn);
      map_->transform(k, n, x, fn);
      check_minimal(before, h, k, n, true, "transform");
      break;
    }
    case Op::snapshot:
      start_snapshot();
      break;
    case Op::visit: {
      const std::size_t budget = 1 + rng.below(6);
      const std::uint64_t salt = rng.below(7);
      trace("writer visit " + std::to_string(budget) + " salt " + std::to_string(salt));
      std::vector<std::pair<std::pair<Key, Ns>, std::optional<State>>> decisions;
      map_->visit_incremental(visit_cursor_, budget,
                              [&](const Key& vk, const Ns& vn, const State& s) {
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
      break;
    }
  }
}

void Simulation::start_snapshot() {
  auto rec = std::make_unique<SnapshotRecord>();
  rec->number = static_cast<std::uint32_t>(snapshots_.size() + 1);
  rec->handle = map_->snapshot();
  rec->version = model_->start_snapshot();
  rec->expected = model_->image(rec->version);
  ++result_.stats.snapshots;
  const std::string name = "s" + std::to_string(rec->number);
  trace("writer snapshot " + name + " version " + std::to_string(rec->version) + " size " +
        std::to_string(rec->expected.size()));
  expect(rec->handle.version() == rec->version, "I1",
         "snapshot " + name + " got version " + std::to_string(rec->handle.version()) + ", model " +
             std::to_string(rec->version));
  expect(Access::head_array_length(rec->handle) >= rec->handle.size(), "I9",
         "snapshot " + name + " head array " +
             std::to_string(Access::head_array_length(rec->handle)) + " shorter than size " +
             std::to_string(rec->handle.size()));
  SnapshotRecord& r = *rec;
  snapshots_.push_back(std::move(rec));
  ++live_count_;
  ++undecided_count_;
  const std::uint32_t id = static_cast<std::uint32_t>(tasks_.size());
  spawn("ser" + std::to_string(r.number), TaskKind::serializer, 2,
        [this, &r, id] { serializer_body(r, *tasks_[id]); });
}

void Simulation::release(SnapshotRecord& rec, const std::string& by) {
  COWSTATE_ASSERT(!rec.released, "T3", "the simulator released a snapshot record twice");
  trace(by + " release s" + std::to_string(rec.number));
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
  const std::string name = "s" + std::to_string(rec.number);
  std::set<std::pair<Key, Ns>> emitted;
  std::optional<Writer> writer;  // opened at the first step: the snapshot may be gone by then
  for (;;) {
    if (rec.released) {
      trace(self.name + " stops: " + name + " was cancelled");
      return;
    }
    if (rec.cancel) {
      release(rec, self.name);
      return;
    }
    if (!writer) writer.emplace(rec.handle);
    const std::size_t budget = 1 + self.rng.below(opts_.step_entries_max);
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
    trace(self.name + " step " + std::to_string(budget) + " -> " +
          std::to_string(writer->entries_written()) + "/" + std::to_string(rec.expected.size()));
    ++self.units_done;
    self.inner_yields = 0;
    if (done) break;
    Fiber::yield();
  }
  expect(emitted.size() == rec.expected.size(), "image",
         name + " emitted " + std::to_string(emitted.size()) + " entries, its version holds " +
             std::to_string(rec.expected.size()));
  // The bytes are complete: like the async phase of a checkpoint, the serializer is done
  // with the snapshot before it checks what it wrote.
  release(rec, self.name);
  auto restored = read_map_snapshot<Map, UInt64Serializer, Int32Serializer, VectorInt64Serializer>(
      writer->bytes(), MapOptions{.initial_capacity = 4,
                                  .min_capacity = opts_.min_capacity,
                                  .max_capacity = opts_.max_capacity});
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
  rec.completed = true;
  ++result_.stats.snapshots_checked;
}

std::vector<SnapshotRecord*> Simulation::undecided() const {
  std::vector<SnapshotRecord*> out;
  for (const auto& r : snapshots_) {
    if (!r->released && !r->decided) out.push_back(r.get());
  }
  return out;
}

// The releaser decides once per snapshot, when it first runs after the snapshot started,
// whether to cancel it; it is runnable only while a decision is pending (so strategies
// with strict priorities, like PCT, cannot starve the others behind an idle loop).
void Simulation::releaser_body(Task& self) {
  for (;;) {
    std::vector<SnapshotRecord*> pending = undecided();
    if (pending.empty()) {
      if (writer_done_) return;
      Fiber::yield();  // not runnable until a snapshot starts or the writer is done
      continue;
    }
    SnapshotRecord& r = *pending[self.rng.below(pending.size())];
    r.decided = true;
    --undecided_count_;
    if (self.rng.below(100) < opts_.cancel_percent) {
      if (r.in_step) {
        trace("releaser cancel s" + std::to_string(r.number) + " (mid-step)");
        r.cancel = true;
      } else {
        release(r, "releaser");
      }
    }
    if (self.rng.chance(1, 8)) {
      // Releasing a snapshot that is already gone must change nothing.
      SnapshotRecord& old = *snapshots_[self.rng.below(snapshots_.size())];
      if (old.released) {
        trace("releaser release s" + std::to_string(old.number) + " again");
        old.handle.release();
      }
    }
    ++self.units_done;
    Fiber::yield();
  }
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
  for (const auto& t : tasks_) {
    d.add(t->fiber->finished());
    d.add(t->units_done);
    d.add(t->inner_yields);
    for (int w = 0; w < 4; ++w) d.add(t->rng.state()[w]);
  }
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
    const std::size_t retired = map_->retired_count();
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
    const std::string name = "s" + std::to_string(r->number);
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

RunResult Simulation::run() {
  trace("seed " + std::to_string(config_.seed) + " options " + opts_.to_string());
  strategy_.begin_run(config_.seed);
  spawn("writer", TaskKind::writer, 4, [this] { writer_body(); });
  if (opts_.cancel_percent > 0) {
    spawn("releaser", TaskKind::releaser, 1, [this] { releaser_body(*tasks_[1]); });
  }
  std::uint32_t last = kNoTask;
  std::vector<TaskView> runnable;
  try {
    for (;;) {
      runnable.clear();
      bool unfinished = false;
      for (auto& t : tasks_) {
        unfinished = unfinished || !t->fiber->finished();
        if (is_runnable(*t)) runnable.push_back(TaskView{t->id, t->weight});
      }
      if (runnable.empty()) {
        if (!unfinished) break;
        result_.outcome = Outcome::stuck;
        result_.check = "deadlock";
        result_.message = "unfinished tasks but none runnable";
        break;
      }
      if (result_.stats.steps >= step_bound_) {
        result_.outcome = Outcome::stuck;
        result_.check = "steps";
        result_.message = "step bound " + std::to_string(step_bound_) + " hit";
        break;
      }
      if (strategy_.wants_digest() && !strategy_.on_state(digest())) {
        result_.abandoned = true;
        trace("abandoned: state already explored");
        break;
      }
      const std::uint32_t id = strategy_.pick(runnable, last, result_.stats.steps);
      Task& t = *tasks_.at(id);
      COWSTATE_ASSERT(!t.fiber->finished(), "T2", "strategy picked a finished task");
      result_.schedule.push_back(id);
      running_ = &t;
      t.fiber->resume();
      running_ = nullptr;
      if (t.kind == TaskKind::writer) dirty_ = true;
      last = id;
      ++result_.stats.steps;
      after_step_checks();
    }
  } catch (const CheckFailed& f) {
    result_.outcome = Outcome::failure;
    result_.check = f.check;
    result_.message = f.message;
  } catch (const AssertionCaught& a) {
    map_broken_ = true;
    result_.outcome = Outcome::assertion;
    result_.check = a.invariant;
    result_.message = a.message;
  }
  running_ = nullptr;
  if (result_.outcome != Outcome::pass) {
    trace("FAIL " + result_.check + ": " + result_.message);
  }
  result_.trace_hash = hash_;
  if (!config_.keep_trace) {
    if (tail_.size() == config_.trace_tail) {  // oldest first
      std::rotate(tail_.begin(), tail_.begin() + static_cast<std::ptrdiff_t>(tail_next_),
                  tail_.end());
    }
    result_.trace = tail_;
  }
  return std::move(result_);
}

}  // namespace

RunResult run_once(const RunConfig& config, Strategy& strategy) {
  auto sim = std::make_unique<Simulation>(config, strategy);
  AssertHandler previous = set_assert_handler(&throw_assertion);
#if defined(COWSTATE_SIM_HOOKS) && COWSTATE_SIM_HOOKS
  hooks::yield_fn() = [](const char* point) {
    if (g_current != nullptr) g_current->on_yield(point);
  };
#endif
  g_current = sim.get();
  RunResult result = sim->run();
  g_current = nullptr;
  sim.reset();
  set_assert_handler(previous);
  return result;
}

}  // namespace cowstate::sim
