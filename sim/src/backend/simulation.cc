// The backend simulation: a KeyedStateBackend, its checkpoints on a simulated disk (or a
// real file system, COWSTATE_SIM_TMPDIR) and its restores, against the reference
// KeyedStateModel, under the deterministic scheduler.
//
// The backend owns the key groups of the workload's range and registers one state of each
// kind (backend_states() of backend/scenario_lines.h: count value, events list, attrs map,
// sum reducing, avg aggregating), all with int32 namespaces. Values are compared in one
// canonical form, a vector of int64: a value or a sum as [v], a list as its elements, a map
// as its sorted (user key, user value) pairs flattened, an average's accumulator as
// [sum, count].
//
// Tasks (SimCore runs them; see sim_core.h):
//   writer     per step one operation on one state, at a key of the backend's range (the
//              key is switched with set_current_key every time, so key groups change from
//              step to step), and its namespace; or the sync phase of a checkpoint (a
//              BackendSnapshot, the model's image of that moment, and the storage's
//              pending file); or, in scenarios, a restore to check; or, with no
//              checkpoint in flight, a power loss and restart (below).
//   c<N>       one serializer per checkpoint: the async phase, CheckpointWriter::step(k)
//              with yield points inside, into the pending file; at the end the commit, then
//              the restore round trips below. It may first arm an injected I/O error.
//   releaser   cancels checkpoints before they finish.
// A checkpoint that completes is read back from storage and restored (1) into a backend of
// the same range, (2) into a two-way split of the range (the first half registering its
// states in reverse order), and (3) the two halves' own checkpoints merged back into one
// backend of the whole range: each must hold exactly the model's image of the checkpoint,
// restricted to its range by the model's own key-group function. A checkpoint that fails
// (injected error) or is cancelled must have released every map snapshot, must not be
// complete in storage, and the newest complete checkpoint must still restore exactly.
//
// Incremental checkpoints (incremental=N): the backend writes deltas of its last completed
// checkpoint (every N-th of a chain full); a commit that completes is reported to it, a
// failure or cancel too (notify_checkpoint_aborted). Every restore reads the checkpoint's
// chain through the storage's manifests (read_chain) and must still give the model's image;
// pruning must keep every member of a retained chain (C11).
//
// Power loss (simulated disk only): SimulatedFileSystem::power_loss_after undoes every disk
// operation after the crash point and decides what survives of those not yet durable; the
// backend restarts from nothing but the disk: storage reopened, latest checkpoint restored
// (through a read fault, when one is drawn), model reset to that checkpoint's image. C8:
// the latest is at least the newest checkpoint that committed before the crash point and
// survived every power loss since, and restores exactly; C9: a damaged copy is refused,
// naming the file, and leaves nothing half-restored.
//
// TTL (config ttl=MS, or BackendWorkloadOptions::ttl_ms): the count, events and attrs
// states get a StateTtlConfig on a ManualTtlClock that only the clock task moves. Their
// canonical values carry last-access times: count [v, t], events [e1, t1, e2, t2, ...],
// attrs [k1, v1, t1, ...]. The model applies each operation at logical time (what a read
// may return: the live value, or under ReturnExpiredIfNotCleanedUp an expired one not
// cleaned up yet; what it leaves: expired values removed, live ones refreshed under
// OnReadAndWrite). Cleanup (incremental, on key switch, lazy) runs inside production calls
// the model cannot see into, so after every operation the live backend is reconciled with
// the model: it may lack only elements that are expired now (never a live one, never a
// changed timestamp, never an empty list or map), and the model adopts what cleanup did.
// A checkpoint with full-snapshot cleanup must hold its image less what was expired when
// each entry was written: exact when the clock stood still while its serializer wrote,
// bounded by the first and last write times otherwise. `cleanup s=X n=all` (and the end
// of every generated run) drives incremental cleanup over every entry; nothing expired
// may remain.
//   clock      advances logical time, between writer operations (never while the writer is
//              paused inside one); in generated runs often exactly to a stored value's
//              expiry instant (last access + ttl), where the boundary is decided.
//
// Checks (ids from docs/invariants.md, or a checker name):
//   result   every state operation's result equals the model's
//   B6       the current key group and every stored entry's key group are Flink's
//   B1       every table of a (restored) backend covers exactly the backend's range
//   live     the live backend equals the model (deep cadence); restored backends are sound
//   C1       a sync phase snapshots exactly the model's image
//   C2       a finished checkpoint holds no map snapshot; with none in flight no map has a
//            highest required version or retired memory
//   C6       a failed or cancelled checkpoint is not complete in storage
//   storage  a storage call failed without an injected fault; the newest complete
//            checkpoint is the newest one that committed
//   restore  the round trips above
//   L2       a TTL read returned what expiry at logical time forbids; cleanup removed a
//            live value or left an expired one after a full pass
//   L4       a stored list or map of a TTL state is empty
//   L5       a full-snapshot-cleanup checkpoint holds other than its image less what was
//            expired when written
#include "backend/simulation.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backend/layout.h"
#include "backend/scenario_lines.h"
#include "core/sim_core.h"
#include "cowstate/checkpoint.h"
#include "cowstate/checkpoint_storage.h"
#include "cowstate/keyed_state_backend.h"
#include "cowstate/model/backend_model.h"
#include "cowstate/model/keyed_state_model.h"
#include "cowstate/model/ttl_model.h"
#include "cowstate/serializers.h"
#include "cowstate/sim/backend_options.h"
#include "cowstate/simulated_file_system.h"
#include "cowstate/ttl.h"

namespace cowstate::sim::detail {

namespace {

// A writer action as its scenario line says it ("list s=events k=1 add 7").
std::string writer_text(const Action& a) {
  return action_name(a) + backend_lines::print_writer_action(a);
}

using Key = std::uint64_t;
using Ns = std::int32_t;
using Value = std::vector<std::int64_t>;  // the canonical form of every state
using Model = model::KeyedStateModel<Key, Ns>;
using Store = Model::Backend;  // the model's versioned values and checkpoints
using Image = Store::Image;
using BackendImage = Store::BackendImage;

using Backend = KeyedStateBackend<UInt64Serializer>;
using CountState = ValueState<Backend, Int32Serializer, Int64Serializer>;
using EventsState = ListState<Backend, Int32Serializer, Int64Serializer>;
using AttrsState = MapState<Backend, Int32Serializer, Int64Serializer, Int64Serializer>;
using SumState = ReducingState<Backend, Int32Serializer, Int64Serializer>;
using AvgState =
    AggregatingState<Backend, Int32Serializer, VectorInt64Serializer, std::int64_t, std::int64_t>;

constexpr std::int64_t kCountDefault = -1;  // ValueState's default value
constexpr std::size_t kRetain = 3;          // complete checkpoints the storage keeps

AggregateFunction<std::int64_t, Value, std::int64_t> average_function() {
  return {[] {
            return Value{0, 0};
          },
          [](const std::int64_t& in, Value acc) {
            acc[0] += in;
            acc[1] += 1;
            return acc;
          },
          [](const Value& acc) { return acc[1] == 0 ? 0 : acc[0] / acc[1]; },
          [](Value a, const Value& b) {
            a[0] += b[0];
            a[1] += b[1];
            return a;
          }};
}

// The canonical form of each state type.
Value canonical(std::int64_t v) { return {v}; }
Value canonical(const Value& v) { return v; }
Value canonical(const std::map<std::int64_t, std::int64_t>& m) {
  Value out;
  for (const auto& [k, v] : m) {
    out.push_back(k);
    out.push_back(v);
  }
  return out;
}
// TTL forms: each value or element followed by its last-access time.
template <class T>
Value canonical(const TtlValue<T>& v) {
  Value out = canonical(v.value);
  out.push_back(v.last_access);
  return out;
}
Value canonical(const std::vector<TtlValue<std::int64_t>>& l) {
  Value out;
  for (const auto& e : l) {
    out.push_back(e.value);
    out.push_back(e.last_access);
  }
  return out;
}
Value canonical(const std::map<std::int64_t, TtlValue<std::int64_t>>& m) {
  Value out;
  for (const auto& [k, v] : m) {
    out.push_back(k);
    out.push_back(v.value);
    out.push_back(v.last_access);
  }
  return out;
}
// A backend with the five states, registered in the usual order or reversed; with `ttl`,
// count, events and attrs have it (on `clock`).
struct SimBackend {
  SimBackend(KeyGroupRange range, std::int32_t max_parallelism, MapOptions options, bool reversed,
             const TtlTimeProvider* clock = nullptr,
             const std::optional<StateTtlConfig>& ttl = std::nullopt, SpillOptions spill = {},
             std::optional<IncrementalCheckpointOptions> incremental = std::nullopt)
      : backend(
            std::make_unique<Backend>(range, max_parallelism, options, clock, std::move(spill))) {
    Backend& b = *backend;
    if (incremental) b.enable_incremental_checkpoints(*incremental);
    const StateOptions with_ttl{ttl};
    auto reg = [&](int which) {
      switch (which) {
        case 0:
          count =
              &b.value_state<Int32Serializer, Int64Serializer>("count", kCountDefault, with_ttl);
          break;
        case 1:
          events = &b.list_state<Int32Serializer, Int64Serializer>("events", with_ttl);
          break;
        case 2:
          attrs =
              &b.map_state<Int32Serializer, Int64Serializer, Int64Serializer>("attrs", with_ttl);
          break;
        case 3:
          sum = &b.reducing_state<Int32Serializer, Int64Serializer>(
              "sum", [](const std::int64_t& x, const std::int64_t& y) { return x + y; });
          break;
        default:
          avg = &b.aggregating_state<Int32Serializer, VectorInt64Serializer, std::int64_t,
                                     std::int64_t>("avg", average_function());
      }
    };
    for (int i = 0; i < 5; ++i) reg(reversed ? 4 - i : i);
    COWSTATE_ASSERT(b.state_count() == 5, "B3", "five states registered once");
  }
  // Calls f(name, handle) for every state.
  template <class F>
  void each(F&& f) {
    f("count", *count);
    f("events", *events);
    f("attrs", *attrs);
    f("sum", *sum);
    f("avg", *avg);
  }

  // Calls f(table) with the table of `handle` (its TTL form when it has a TTL).
  template <class H, class F>
  static void with_table(H& handle, F&& f) {
    if (handle.has_ttl()) {
      f(handle.ttl_table());
    } else {
      f(handle.table());
    }
  }

  std::unique_ptr<Backend> backend;
  CountState* count = nullptr;
  EventsState* events = nullptr;
  AttrsState* attrs = nullptr;
  SumState* sum = nullptr;
  AvgState* avg = nullptr;
};

// A complete checkpoint as a restore needs it: its data file and, for an incremental one,
// every member of its chain (CheckpointStorage::read_chain), parent first. Not copyable:
// `members` refers into `chain`.
struct StoredCheckpoint {
  StoredCheckpoint() = default;
  StoredCheckpoint(const StoredCheckpoint&) = delete;
  StoredCheckpoint& operator=(const StoredCheckpoint&) = delete;
  StoredCheckpoint(StoredCheckpoint&&) = default;
  StoredCheckpoint& operator=(StoredCheckpoint&&) = default;
  CheckpointInput input(const std::string& name, std::uint64_t id) const {
    return {name, data, id, members};
  }
  std::vector<std::byte> data;
  std::vector<std::vector<std::byte>> chain;
  std::vector<CheckpointInput> members;  // over `chain`, each with its expected id
};

// Reads the chain of complete checkpoint `id` of `storage` into `s` (nothing for a full one).
Status read_chain_into(CheckpointStorage& storage, std::uint64_t id, StoredCheckpoint& s) {
  Result<CheckpointManifest> m = storage.read_manifest(id);
  if (!m.ok()) return m.status();
  Result<std::vector<std::vector<std::byte>>> chain = storage.read_chain(id);
  if (!chain.ok()) return chain.status();
  s.chain = std::move(*chain);
  s.members.clear();
  for (std::size_t i = 0; i < s.chain.size(); ++i) {
    s.members.push_back({"chain member " + std::to_string(m->chain[i]), s.chain[i], m->chain[i]});
  }
  return Status();
}

struct CheckpointRecord {
  std::string name;  // c1, c2, ... (the scenario's name)
  std::uint64_t id = 0;
  BackendImage image;                  // the model's image at the sync phase
  BackendImage expected;               // what it restores to: image, less full-snapshot TTL cleanup
  std::set<std::int64_t> write_times;  // TTL clock readings while its serializer wrote
  std::uint64_t parent = 0;  // the checkpoint its delta and unchanged blocks change; 0: full
  std::unique_ptr<BackendSnapshot> snapshot;  // until the writer takes it
  std::unique_ptr<PendingCheckpoint> pending;
  std::unique_ptr<CheckpointWriter> writer;
  bool in_step = false;  // its serializer is inside a step (writing, or about to commit)
  // What the releaser's first cancel returned (C7: accepted means never published).
  std::optional<CancelResult> cancelled;
  bool decided = false;        // the releaser chose whether to cancel it
  bool fault_decided = false;  // generated runs: the serializer chose whether to arm one
  bool finished = false;
  bool committed = false;  // its commit returned success
  bool complete = false;   // committed, and not lost at a power loss or pruned since
  bool lost = false;       // a power loss struck before it was durable
  // A write fault its serializer armed changed what its commit left on the medium: its data
  // file (damaged_data) or its manifest (damaged_manifest) is not what it wrote.
  bool pruned = false;  // retention removed it after it committed
  bool damaged_data = false;
  bool damaged_manifest = false;
  bool damaged() const { return damaged_data || damaged_manifest; }
  std::uint64_t committed_op = 0;  // the disk's operation count when its commit returned
  std::uint64_t began_op = 0;      // the file operation count when its sync phase began
  std::uint64_t bytes = 0;         // of its data file, once complete
  std::vector<MapSnapshotId> taken;  // the map snapshots of its sync phase (explain)
};

class BackendSimulation final : public SimCore {
 public:
  BackendSimulation(const RunConfig& config, Strategy& strategy)
      : SimCore(config, strategy), opts_(options_for(config)) {
    step_bound_ =
        config.step_bound != 0 ? config.step_bound : std::uint64_t{opts_.ops_max} * 400 + 100000;
    range_ = KeyGroupRange(static_cast<std::int32_t>(opts_.key_group_first),
                           static_cast<std::int32_t>(opts_.key_group_last));
    max_parallelism_ = static_cast<std::int32_t>(opts_.max_parallelism);
    map_options_ = MapOptions{.initial_capacity = opts_.initial_capacity,
                              .min_capacity = opts_.min_capacity,
                              .max_capacity = opts_.max_capacity};
    ttl_ = ttl_for(config);
    if (ttl_) {
      model_ = Model(model::TtlModel(ttl_->ttl(), ttl_->refresh_on_read(), ttl_->return_expired()));
    }
  }

  ~BackendSimulation() override {
    // Stop the fibers first (their stacks refer to checkpoints), then the checkpoints
    // (which release their map snapshots), then the backend, then the files.
    if (!broken_) finish_writer_op();
    tasks_.clear();
    if (broken_ || writer_in_op_) {
      // A production assertion fired, or the writer is stuck mid-operation: the maps may be
      // inconsistent, so nothing that walks them is destroyed.
      for (auto& r : checkpoints_) {
        (void)r->writer.release();
        (void)r->snapshot.release();
      }
      (void)primary_.release();
    }
    checkpoints_.clear();
    primary_.reset();
    storage_.reset();
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }

  // The TTL of the count, events and attrs states, if the run has one.
  static std::optional<StateTtlConfig> ttl_for(const RunConfig& config) {
    StateTtlConfig t;
    std::uint32_t cleanup = 0;
    bool key_switch = false;
    if (config.scenario != nullptr) {
      const ScenarioConfig& c = config.scenario->config;
      if (c.ttl_ms == 0) return std::nullopt;
      t.ttl_ms = c.ttl_ms;
      t.update_type = c.ttl_read_refresh ? StateTtlConfig::UpdateType::on_read_and_write
                                         : StateTtlConfig::UpdateType::on_create_and_write;
      t.visibility = c.ttl_return_expired
                         ? StateTtlConfig::Visibility::return_expired_if_not_cleaned_up
                         : StateTtlConfig::Visibility::never_return_expired;
      t.full_snapshot_cleanup = c.ttl_full_snapshot;
      cleanup = c.ttl_cleanup;
      key_switch = c.ttl_key_switch;
    } else {
      const BackendWorkloadOptions& o = options_of<BackendWorkloadOptions>(*config.options);
      if (o.ttl_ms == 0) return std::nullopt;
      t.ttl_ms = o.ttl_ms;
      t.update_type = o.ttl_update == 1 ? StateTtlConfig::UpdateType::on_read_and_write
                                        : StateTtlConfig::UpdateType::on_create_and_write;
      t.visibility = o.ttl_visibility == 1
                         ? StateTtlConfig::Visibility::return_expired_if_not_cleaned_up
                         : StateTtlConfig::Visibility::never_return_expired;
      t.full_snapshot_cleanup = o.ttl_full_snapshot == 1;
      cleanup = o.ttl_cleanup;
      key_switch = o.ttl_key_switch == 1;
    }
    t.incremental_cleanup = std::nullopt;
    if (cleanup != 0)
      t.incremental_cleanup = StateTtlConfig::IncrementalCleanup{cleanup, key_switch};
    return t;
  }

  // A scenario's workload: its backend and capacities; the rest comes from its lines.
  static BackendWorkloadOptions options_for(const RunConfig& config) {
    if (config.scenario == nullptr) return options_of<BackendWorkloadOptions>(*config.options);
    const ScenarioConfig& c = config.scenario->config;
    BackendWorkloadOptions o;
    o.max_parallelism = static_cast<std::uint32_t>(c.max_parallelism);
    o.key_group_first = static_cast<std::uint32_t>(c.key_groups.first);
    o.key_group_last = static_cast<std::uint32_t>(c.key_groups.last);
    o.async_io = c.async_io ? 1 : 0;
    o.io_buffer_bytes = c.io_buffer_bytes;
    o.budget_bytes = static_cast<std::uint32_t>(c.budget_bytes);
    o.spill_check = c.spill_check;
    o.cold_cache_percent = c.cold_cache_percent;
    o.incremental = c.incremental;
    return scenario_options(*config.scenario, o);
  }

 private:
  // --- SimCore ---
  void start() override;
  bool is_runnable(const Task& t) const override {
    if (t.fiber->finished()) return false;
    if (t.kind == TaskKind::writer) {
      // A scripted restore waits until its checkpoint has finished (free schedules).
      if (scenario_ == nullptr || t.inner_yields > 0 || t.next_line >= t.program.size()) {
        return true;
      }
      const Action& next = t.program[t.next_line]->action;
      const CheckpointRecord* rec = named(next.snapshot);
      return next.kind != ActionKind::restore || (rec != nullptr && rec->finished);
    }
    if (t.kind == TaskKind::clock) {
      // Never inside a writer operation (see clock_body). Generated runs: one advance per
      // step of another task (a clock always runnable would starve the others under PCT),
      // and runnable at the end to finish.
      if (writer_in_op_) return false;
      return scenario_ != nullptr || clock_armed_ || (writer_done_ && in_flight() == 0);
    }
    if (t.kind == TaskKind::io) {
      // Runnable with a buffer to land (scenarios: the one its next line names), and at the
      // end of a generated run to finish.
      if (scenario_ != nullptr) {
        return t.next_line >= t.program.size() ||
               queued_file(t.program[t.next_line]->action.snapshot).has_value();
      }
      return manual_io_.waiting() != 0 || (writer_done_ && in_flight() == 0);
    }
    if (t.kind != TaskKind::releaser) return true;
    if (scenario_ != nullptr) {
      return t.next_line >= t.program.size() || t.inner_yields > 0 ||
             named(t.program[t.next_line]->action.snapshot) != nullptr;
    }
    return writer_done_ || undecided_ > 0;
  }
  void after_resume(Task& t, const StepRecord& rec) override {
    if (t.kind == TaskKind::writer || t.kind == TaskKind::releaser) dirty_ = true;
    clock_armed_ = t.kind != TaskKind::clock;
    if (t.kind == TaskKind::serializer && ttl_) {
      // A slice that stopped inside a step wrote at this time (the clock stood still).
      CheckpointRecord* c = named(t.script_name);
      if (c != nullptr && c->in_step) c->write_times.insert(now());
    }
    after_step_checks();
    if (config_.on_step) {
      StepView v = step_view(t, rec);
      const BackendLayout l = layout();
      v.backend = &l;
      config_.on_step(v);
    }
  }
  BackendLayout layout() const;  // for explain, below
  void after_step_checks() override;
  void check_expectation(const Expectation& e) override;
  void check_latest(const Expectation& e);
  std::uint64_t digest() const override;
  void on_assertion() override { broken_ = true; }

  // --- tasks ---
  void writer_body();
  void serializer_body(CheckpointRecord& rec, Task& self);
  void releaser_body(Task& self);
  void clock_body(Task& self);
  void io_body(Task& self);
  // The ManualIo index of checkpoint `name`'s data file, if it has a queued buffer.
  std::optional<std::size_t> queued_file(const std::string& name) const;
  Action draw_slice(CheckpointRecord& rec, Prng& rng);
  std::optional<Action> draw_decision(Prng& rng) const;
  CheckpointRecord* named(const std::string& name) const {
    for (const auto& r : checkpoints_) {
      if (r->name == name) return r.get();
    }
    return nullptr;
  }
  std::size_t in_flight() const {
    std::size_t n = 0;
    for (const auto& r : checkpoints_) n += r->finished ? 0U : 1U;
    return n;
  }

  // --- the writer ---
  Action generate(Prng& rng);
  bool generate_cleanup(Prng& rng, Action& a);  // TTL: a cleanup instead, now and then
  StateOp generate_op(Prng& rng, ActionKind kind);
  void generate_operands(Prng& rng, Action& a);
  void generate_stored_read(Prng& rng, Action& a);  // TTL: a read of a stored entry
  void execute(const Action& a);
  void state_operation(const Action& a);
  void start_checkpoint(const std::string& name);
  void scripted_restore(const Action& a);
  // --- the spill tier (with a memory budget) ---
  // The backend's spill options: the run's budget; `observed`: the manager's decisions are
  // checked (the live backend's).
  SpillOptions spill_options(bool observed);
  // `spill s=X g=G` / `load s=X g=G`, by hand.
  void move_key_group(const Action& a);
  // After every check of the manager: M1 (a recount), the budget (or the reason why not)
  // and M3 (the spill order), on the live backend.
  void check_decision(const SpillDecision& d, const std::vector<SpillCandidate>& candidates,
                      std::uint64_t before, std::uint64_t after);
  // M3: the chosen heap key groups are those of the highest spill scores (FLIP-50's
  // 0.7 size - 0.3 rate over the heap candidates, each normalised to [0, 1]).
  void check_spill_order(const SpillDecision& d, const std::vector<SpillCandidate>& candidates);
  // M1 on `sb`: accounted memory equals a recount from scratch.
  void check_accounting(SimBackend& sb, const std::string& who);
  // A backend restored under the budget: M1, and SP6 (its heap maps hold at most the high
  // watermark plus one key group's map).
  void check_restored_under_budget(SimBackend& sb, const std::string& who);
  bool budgeted() const { return opts_.budget_bytes != 0; }
  void power_loss(const Action& a);
  // The backend after a power loss: reopens the storage, restores the latest checkpoint
  // (through read fault `a.budget` first, if any) and resets the model to it.
  void restart(const Action& a, std::uint64_t crash_op);
  // What a restart found on the disk: the storage it opened, the checkpoint it restored (0:
  // none), the backend restored from it, and what that backend holds.
  struct Recovered {
    std::unique_ptr<CheckpointStorage> storage;
    std::uint64_t id = 0;
    std::set<std::uint64_t> passed_over;  // complete checkpoints with a damaged data file
    bool fell_back = false;               // `storage` was opened with fall_back_past_damaged
    std::unique_ptr<SimBackend> backend;
    BackendImage image;
  };
  // Opens the storage on `fs`, finds the latest checkpoint and restores it (through read
  // fault `a.budget`, if any), checking C8 against what had committed by disk operation
  // `crash_op` and C9 on damage; past a checkpoint a write fault damaged it falls back to an
  // older one explicitly, as a user must. Changes no record and not the model. `narrate`:
  // trace what it found.
  Recovered recover(FileSystem& fs, const Action& a, std::uint64_t crash_op,
                    const std::string& after, bool narrate);
  // The newest checkpoint recover() may restore: the latest, or past a damaged one (reported
  // as C9 demands) the newest intact complete one.
  std::uint64_t latest_intact(Recovered& r, FileSystem& fs, const std::string& after);
  std::optional<std::vector<std::byte>> read_through_fault(const Action& a, std::uint64_t id,
                                                           CheckpointStorage& storage);
  // A restore of `bytes`, a copy of `file` (checkpoint `id`) that differs from what was
  // written, is refused naming the file and leaves nothing behind (C9, C4).
  void expect_restore_refused(const std::string& file, const std::vector<std::byte>& bytes,
                              std::uint64_t id);
  void after_run() override;
  // RunConfig::crash_states_max: a restart from every crash state of the disk's history.
  void explore_crash_states();
  // `fall_back`: StorageOptions::fall_back_past_damaged, an explicit rollback.
  Result<std::unique_ptr<CheckpointStorage>> open_storage(FileSystem& fs, bool fall_back = false) {
    StorageOptions options;
    options.retain = kRetain;
    options.fall_back_past_damaged = fall_back;
    // Every write on a simulated task: at once, where errors happen, or (async_io) when the
    // io task lands it, errors surfacing at a later call of the writer.
    options.io_thread = opts_.async_io == 1 && disk_ != nullptr;
    options.io_buffers = AsyncFileOptions{.buffer_bytes = opts_.io_buffer_bytes,
                                          .buffers = 3,
                                          .pool = nullptr,
                                          .manual_io = &manual_io_,
                                          .label = {}};
    return CheckpointStorage::open(dir_.empty() ? "checkpoints" : dir_ + "/checkpoints", fs,
                                   options);
  }

  // --- TTL (the rules are the model's, model/ttl_model.h) ---
  std::int64_t now() const { return clock_.current_timestamp(); }
  bool expired(std::int64_t last_access) const {
    return model_.ttl()->expired_at(last_access, now());
  }
  // Numbers per element of a TTL state's canonical form (the last one is the time).
  std::size_t stride(const std::string& state) const { return model_.stride(state); }
  Value live_part(const std::string& state, const Value& v, std::int64_t at) const {
    return model_.ttl()->live_part(stride(state), v, at, false);
  }
  // `image` less what full-snapshot cleanup leaves out when writing at `at`.
  BackendImage filtered(const BackendImage& image, std::int64_t at) const;
  void run_cleanup(const Action& a);
  void reconcile(const std::string& after);
  // What a full-snapshot-cleanup checkpoint restores to, given `got`, what it restored to in
  // its own range: checked against its image and write times first (L5).
  BackendImage full_snapshot_expected(const CheckpointRecord& rec, const BackendImage& got);
  std::int64_t pick_advance(Prng& rng) const;
  // Calls fn(last_access) for every element stored in the model's TTL states.
  template <class F>
  void for_each_last_access(F&& fn) const {
    for (const std::string& name : ttl_states()) {
      const std::size_t s = stride(name);
      model_.backend().state(name).for_each([&](const auto&, const auto&, const Value& v) {
        for (std::size_t i = s - 1; i < v.size(); i += s) fn(v[i]);
      });
    }
  }
  // Whether some stored element expires exactly now (its boundary instant).
  bool at_expiry_instant() const {
    bool found = false;
    for_each_last_access([&](std::int64_t last) {
      found = found || (expired(last) && !model_.ttl()->expired_at(last, now() - 1));
    });
    return found;
  }

  // --- checkpoints ---
  void cancel(CheckpointRecord& rec, const std::string& by);
  void commit(CheckpointRecord& rec);
  // No temporary file of rec's is left in the checkpoint directory, unless the armed fault
  // fired at a file operation since `since` (the removal may be what failed).
  void expect_no_temporary(const CheckpointRecord& rec, std::uint64_t since, const char* check,
                           const std::string& after);
  static bool accepted_cancel(const CheckpointRecord& rec) {
    return rec.cancelled == CancelResult::accepted;
  }
  // `since`: the disk operation count when its failure began (a refused commit has
  // already tried to remove its temporary file).
  void finish_failed(CheckpointRecord& rec, const std::string& why,
                     std::uint64_t since = UINT64_MAX);
  void finish_complete(CheckpointRecord& rec);
  // Arms write fault `a` (ActionKind::write_fault) on rec's data file or manifest.
  void arm_write_fault(CheckpointRecord& rec, const Action& a, const Task& self);
  // After rec's commit returned: whether an armed write fault changed what it left on the
  // medium (the bytes its files were given, from the disk's history, against the files).
  void settle_write_faults(CheckpointRecord& rec);
  // A damaged checkpoint is reported, naming the damaged file, wherever it is read: scan()
  // and latest() for a manifest, read() and a restore of the raw bytes for a data file (C9).
  void expect_damage_reported(const CheckpointRecord& rec, CheckpointStorage& storage,
                              FileSystem& fs);
  // storage.scan(), expecting (as `check`) no damaged checkpoint but one whose manifest a
  // write fault damaged; `prefix` starts each finding ("c2 committed and ").
  CheckpointScan scan_expecting_faulted_damage(CheckpointStorage& storage, const char* check,
                                               const std::string& prefix);
  // Arms an injected I/O error at the n-th mutating file operation from now.
  void arm_fault(std::uint32_t n) {
    fs_->fail_at(n);
    armed_at_ = fs_->operations() + n;
    armed_ops_.push_back(armed_at_);
  }
  // Whether an injected error fired at a file operation after `since`, up to now.
  bool fault_fired_since(std::uint64_t since) const {
    return std::any_of(armed_ops_.begin(), armed_ops_.end(),
                       [&](std::uint64_t op) { return since < op && op <= fs_->operations(); });
  }
  // A storage call that started at operation count `before` failed with `st`: fine when an
  // armed fault fired since (inside it, or with async_io in a write landed since that the
  // call reports), a failure of check `storage` otherwise.
  void expect_injected(std::uint64_t before, const std::string& what, const Status& st) {
    expect(fault_fired_since(before), "storage",
           what + " failed without an injected fault: " + scrub(st.message()));
    // With async_io the window reaches back to the checkpoint's start: the error reported
    // must be the injected one itself, not another failure that it happens to excuse.
    expect(opts_.async_io == 0 || st.message().find("injected I/O error") != std::string::npos,
           "storage",
           what + " failed with another error than the injected one: " + scrub(st.message()));
  }
  void check_previous_restores(const std::string& after);
  void verify_round_trips(CheckpointRecord& rec, const StoredCheckpoint& stored);
  // Complete checkpoint `id` as a restore needs it: its data and its chain (restore check
  // when either does not read back; `who` names it).
  StoredCheckpoint read_stored(CheckpointStorage& storage, std::uint64_t id,
                               const std::string& who) {
    StoredCheckpoint out;
    auto bytes = storage.read(id);
    expect(bytes.ok(), "restore", who + " does not read back: " + scrub(bytes.status().message()));
    out.data = std::move(*bytes);
    const Status chained = read_chain_into(storage, id, out);
    expect(chained.ok(), "restore",
           who + "'s chain does not read back: " + scrub(chained.message()));
    return out;
  }

  // --- restore and compare ---
  std::int32_t key_group_of(Key k) const {
    return model::flink_key_group(model::java_long_hash(k), max_parallelism_);
  }
  model::KeyGroupSpan span(KeyGroupRange r) const { return {r.start(), r.end()}; }
  BackendImage restricted(const BackendImage& image, KeyGroupRange r) const {
    return Store::restrict(image, span(r), [this](const Key& k) { return key_group_of(k); });
  }
  // Everything `sb` holds; checks B1 and B6 on the way.
  BackendImage contents(SimBackend& sb, const std::string& who);
  void compare(const BackendImage& want, const BackendImage& got, const std::string& check,
               const std::string& who);
  // A fresh backend of `range` restored from `inputs` (which must restore).
  // `budget`: under the run's memory budget (and checked against it).
  std::unique_ptr<SimBackend> restored(const std::vector<CheckpointInput>& inputs,
                                       KeyGroupRange range, bool reversed, const std::string& who,
                                       bool budget = false);
  std::vector<std::byte> checkpoint_in_memory(SimBackend& sb, std::uint64_t id);
  // Restores `stored` into `a` (and `b`), compares, and with merge_back restores the two
  // halves' own checkpoints into one backend over both.
  void round_trip(const BackendImage& image, const StoredCheckpoint& stored,
                  const std::string& name, KeyGroupRange a, KeyGroupRange b, bool merge_back);
  // What every backend of the run writes its checkpoints as.
  std::optional<IncrementalCheckpointOptions> incremental_options() const {
    if (opts_.incremental == 0) return std::nullopt;
    // Generous shares, so that small states still write deltas and chains grow to N.
    return IncrementalCheckpointOptions{
        .max_delta_fraction = 1.0, .full_every = opts_.incremental, .max_chain_share = 4.0};
  }
  std::string scrub(std::string message) const {
    for (std::size_t at; !dir_.empty() && (at = message.find(dir_)) != std::string::npos;) {
      message.replace(at, dir_.size(), "<dir>");
    }
    return message;
  }

  BackendWorkloadOptions opts_;
  KeyGroupRange range_;
  std::int32_t max_parallelism_ = 8;
  MapOptions map_options_;
  Model model_;
  std::unique_ptr<SimBackend> primary_;
  std::vector<Key> keys_;  // the key space: keys of the backend's range, by the model
  std::string dir_;        // the run's checkpoint directory on a real file system, if any
  // Before the storage and the checkpoints: their async files (async_io) use it.
  ManualIo manual_io_;
  std::unique_ptr<SimulatedFileSystem> disk_;  // otherwise the simulated disk
  std::uint64_t disk_base_ = 0;                // the disk's operation count at its last power loss
  std::unique_ptr<FaultInjectionFileSystem> fs_;
  std::unique_ptr<CheckpointStorage> storage_;
  std::uint64_t armed_at_ = 0;            // operation number of the armed fault, 0 when none
  std::vector<std::uint64_t> armed_ops_;  // every one armed since the last power loss
  std::vector<std::unique_ptr<CheckpointRecord>> checkpoints_;
  std::optional<std::uint64_t> newest_committed_;
  std::size_t undecided_ = 0;  // unfinished checkpoints the releaser has not decided on
  bool dirty_ = true;
  bool broken_ = false;
  std::uint64_t dirty_steps_ = 0;
  ManualTtlClock clock_;                 // logical time; only the clock task moves it
  std::optional<StateTtlConfig> ttl_;    // of count, events and attrs, if the run has one
  std::uint32_t generated_ = 0;          // writer operations generated so far
  bool clock_armed_ = false;             // another task stepped since the clock last moved
  std::uint64_t decisions_checked_ = 0;  // manager checks seen by check_decision
};

void BackendSimulation::start() {
  if (scenario_ != nullptr) {
    trace("scenario " + scenario_->file + " seed " + std::to_string(config_.seed) + " " +
          (scenario_->config.fixed_schedule ? "fixed schedule" : "free schedule") + " backend");
  } else {
    trace("seed " + std::to_string(config_.seed) + " backend options " + opts_.to_string());
  }
  strategy_.begin_run(config_.seed);
  for (const BackendStateInfo& info : backend_states()) {
    model::StateSpec spec;
    spec.kind = static_cast<model::StateKind>(static_cast<int>(info.kind) -
                                              static_cast<int>(ActionKind::value_state));
    spec.ttl = ttl_.has_value() && is_ttl_state(info.name);
    spec.default_value = kCountDefault;
    model_.register_state(info.name, std::move(spec));
  }
  // The key space: the first opts_.keys keys whose key group (by the model) is ours.
  for (Key k = 0; keys_.size() < std::size_t{opts_.keys} && k < (Key{1} << 24); ++k) {
    if (range_.contains(key_group_of(k))) keys_.push_back(k);
  }
  // The run's checkpoints: on the simulated disk, or (COWSTATE_SIM_TMPDIR=DIR) in a fresh
  // directory under DIR of the real file system, where no power loss can strike.
  if (const char* env = std::getenv("COWSTATE_SIM_TMPDIR"); env != nullptr) {
    std::string tmpl = std::string(env) + "/cowstate-sim-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) {
      throw ScenarioInvalid{0, "cannot create a checkpoint directory under " + std::string(env) +
                                   " (COWSTATE_SIM_TMPDIR)"};
    }
    dir_ = tmpl;
    fs_ = std::make_unique<FaultInjectionFileSystem>(posix_file_system());
  } else {
    disk_ = std::make_unique<SimulatedFileSystem>();
    fs_ = std::make_unique<FaultInjectionFileSystem>(*disk_);
  }
  auto storage = open_storage(*fs_);
  if (!storage.ok()) throw ScenarioInvalid{0, "checkpoint storage: " + storage.status().message()};
  storage_ = std::move(*storage);
  // After the checkpoint directory: a cold tier goes where COWSTATE_SIM_TMPDIR says too.
  try {
    primary_ = std::make_unique<SimBackend>(range_, max_parallelism_, map_options_, false, &clock_,
                                            ttl_, spill_options(true), incremental_options());
  } catch (const ColdStoreError& e) {
    throw ScenarioInvalid{0, std::string("the cold tier: ") + e.what()};
  }
  spawn("writer", "writer", TaskKind::writer, 4, [this] { writer_body(); });
  if (opts_.cancel_percent > 0) {
    spawn("releaser", "releaser", TaskKind::releaser, 1, [this] { releaser_body(*tasks_[1]); });
  }
  if (opts_.async_io == 1 && disk_ != nullptr) {
    const std::uint32_t task = static_cast<std::uint32_t>(tasks_.size());
    spawn("io", "io", TaskKind::io, 2, [this, task] { io_body(*tasks_[task]); });
  }
  if (ttl_) {
    const std::uint32_t task = static_cast<std::uint32_t>(tasks_.size());
    spawn("clock", "clock", TaskKind::clock, 1, [this, task] { clock_body(*tasks_[task]); });
  }
}

// ---------------------------------------------------------------------------------------
// The writer

Action BackendSimulation::generate(Prng& rng) {
  ++generated_;
  Action a;
  if (ttl_ && generate_cleanup(rng, a)) return a;
  if (disk_ != nullptr && opts_.power_loss_percent != 0 && in_flight() == 0 &&
      rng.below(100) < opts_.power_loss_percent) {
    a.kind = ActionKind::power_loss;
    // Counted back from the last operation, as a scenario's `after=now-K`.
    a.x = crash_point_back(rng.below(disk_->operations() - disk_base_ + 1));
    a.extras.set().salt = rng.next();
    if (rng.below(100) < opts_.read_fault_percent) {
      a.budget = static_cast<std::uint32_t>(1 + rng.below(std::size(kReadFaultNames) - 1));
      // A bit of the newest committed checkpoint's file (or of a manifest), so that the
      // position stays where it is while the shrinker drops steps around it; half of the
      // time in its first sector, where the header is.
      std::uint64_t bytes = std::max<std::uint64_t>(
          CheckpointStorage::kManifestSize,
          newest_committed_ ? checkpoints_.at(*newest_committed_ - 1)->bytes : 0);
      if (rng.chance(1, 2))
        bytes = std::min<std::uint64_t>(bytes, SimulatedFileSystem::kSectorBytes);
      a.entry.first = rng.below(8 * bytes);
    }
    return a;
  }
  if (budgeted() && rng.below(100) < opts_.spill_percent) {
    const BackendStateInfo& info = backend_states()[rng.below(backend_states().size())];
    a.state = info.name;
    a.x = range_.start() +
          static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(range_.size())));
    bool heap = false;
    primary_->each([&](const char* name, auto& handle) {
      if (a.state != name) return;
      SimBackend::with_table(handle, [&](auto& table) {
        heap = table.heap_map(static_cast<std::int32_t>(a.x)) != nullptr;
      });
    });
    a.kind = heap ? ActionKind::spill : ActionKind::load;
    return a;
  }
  std::array<std::uint32_t, 6> w = opts_.weights;
  if (in_flight() >= opts_.live_checkpoints_max) w[5] = 0;
  const std::size_t which = pick_weighted(rng, w);
  if (which == 5) {
    a.kind = ActionKind::checkpoint;
    a.snapshot = "c" + std::to_string(checkpoints_.size() + 1);
    return a;
  }
  const BackendStateInfo& info = backend_states()[which];
  a.kind = info.kind;
  a.state = info.name;
  a.entry.first = keys_[rng.below(keys_.size())];
  a.entry.second = static_cast<Ns>(rng.below(opts_.namespaces));
  a.op = generate_op(rng, a.kind);
  generate_operands(rng, a);
  return a;
}

bool BackendSimulation::generate_cleanup(Prng& rng, Action& a) {
  // The last three operations drive cleanup over every entry of each TTL state; before
  // them, one in thirty drives a little of it by hand.
  const std::vector<std::string>& states = ttl_states();
  const std::uint32_t left = opts_.ops_max - generated_;
  if (left >= 3 && !rng.chance(1, 30)) return false;
  a.kind = ActionKind::cleanup;
  a.state = states[left < 3 ? 2 - left : rng.below(states.size())];
  a.budget = left < 3 ? 0 : static_cast<std::uint32_t>(rng.between(1, 16));
  return true;
}

StateOp BackendSimulation::generate_op(Prng& rng, ActionKind kind) {
  struct Choice {
    StateOp op;
    std::uint32_t weight;
  };
  std::vector<Choice> ops;
  switch (kind) {
    case ActionKind::value_state:
      ops = {{StateOp::update, 60}, {StateOp::get, 25}, {StateOp::clear, 15}};
      break;
    case ActionKind::list_state:
      ops = {{StateOp::add, 40}, {StateOp::add_all, 15}, {StateOp::update, 10},
             {StateOp::get, 15}, {StateOp::clear, 10},   {StateOp::merge, 10}};
      break;
    case ActionKind::map_state:
      ops = {{StateOp::put, 50}, {StateOp::remove, 20}, {StateOp::get, 20}, {StateOp::clear, 10}};
      break;
    default:
      ops = {{StateOp::add, 60}, {StateOp::get, 20}, {StateOp::clear, 10}, {StateOp::merge, 10}};
  }
  std::vector<std::uint32_t> weights;
  for (const Choice& c : ops) weights.push_back(c.weight);
  return ops[pick_weighted(rng, weights)].op;
}

void BackendSimulation::generate_operands(Prng& rng, Action& a) {
  auto values = [&rng] {
    Value v(rng.below(3));
    for (auto& x : v) x = static_cast<std::int64_t>(rng.below(100));
    return v;
  };
  switch (a.op) {
    case StateOp::update:
      if (a.kind == ActionKind::list_state) {
        a.value = values();
      } else {
        a.x = static_cast<std::int64_t>(rng.below(100));
      }
      break;
    case StateOp::add:
      a.x = static_cast<std::int64_t>(rng.below(100));
      break;
    case StateOp::add_all:
      a.value = values();
      break;
    case StateOp::put:
      a.x = static_cast<std::int64_t>(rng.below(8));
      a.value = {static_cast<std::int64_t>(rng.below(100))};
      break;
    case StateOp::remove:
    case StateOp::get:
      if (a.kind == ActionKind::map_state) a.x = static_cast<std::int64_t>(rng.below(8));
      if (a.op == StateOp::get && ttl_ && is_ttl_state(a.state) && rng.chance(1, 2)) {
        generate_stored_read(rng, a);
      }
      break;
    case StateOp::merge:
      for (std::uint64_t i = 1 + rng.below(2); i > 0; --i) {
        a.extras.set().sources.push_back(static_cast<Ns>(rng.below(opts_.namespaces)));
      }
      break;
    case StateOp::clear:
      break;
  }
}

void BackendSimulation::generate_stored_read(Prng& rng, Action& a) {
  // With a TTL, half the reads go to a stored value (for a map, a stored user key): expiry,
  // refresh and stale reads show only there.
  const Image stored = model_.backend().state(a.state).live();
  if (stored.empty()) return;
  auto it = stored.begin();
  std::advance(it, static_cast<std::ptrdiff_t>(rng.below(stored.size())));
  a.entry = it->first;
  if (a.kind == ActionKind::map_state) a.x = it->second[3 * rng.below(it->second.size() / 3)];
}

void BackendSimulation::writer_body() {
  writer_loop(
      opts_.ops_max, [this](Prng& rng) { return generate(rng); },
      [this](const Action& a) { execute(a); }, [] {});
}

void BackendSimulation::execute(const Action& a) {
  switch (a.kind) {
    case ActionKind::value_state:
    case ActionKind::list_state:
    case ActionKind::map_state:
    case ActionKind::reducing_state:
    case ActionKind::aggregating_state:
      state_operation(a);
      if (ttl_) reconcile("after " + a.state + " " + state_op_name(a.op));
      return;
    case ActionKind::cleanup:
      run_cleanup(a);
      reconcile("after cleanup of " + a.state);
      return;
    case ActionKind::checkpoint:
      start_checkpoint(a.snapshot);
      return;
    case ActionKind::restore:
      scripted_restore(a);
      return;
    case ActionKind::power_loss:
      power_loss(a);
      return;
    case ActionKind::spill:
    case ActionKind::load:
      move_key_group(a);
      return;
    default:
      COWSTATE_ASSERT(false, "T2", "the backend writer ran a non-writer action");
  }
}

// The operation `a` describes, as the model takes it.
model::StateCall<Ns> call_of(const Action& a) {
  model::StateCall<Ns> c;
  c.op = a.op;
  c.x = a.x;
  c.y = a.value.empty() ? 0 : a.value[0];
  if (a.op == StateOp::add_all || a.op == StateOp::update)
    c.values.assign(a.value.begin(), a.value.end());
  if (a.op == StateOp::merge) c.sources = a.extras.get().sources;
  return c;
}

std::string result_text(const model::StateResult& r, bool sequence) {
  if (!r) return "absent";
  return sequence ? model::to_text(*r) : model::to_text(r->empty() ? 0 : (*r)[0]);
}

// Calls `a` on the backend's state at its current key: what a read returned.
model::StateResult call_backend(SimBackend& sb, const Action& a) {
  const Ns n = a.entry.second;
  auto some = [](const auto& v) -> model::StateResult {
    if (!v) return std::nullopt;
    return Value{*v};
  };
  switch (a.kind) {
    case ActionKind::value_state:
      sb.count->set_current_namespace(n);
      if (a.op == StateOp::update) sb.count->update(a.x);
      if (a.op == StateOp::clear) sb.count->clear();
      if (a.op == StateOp::get) return Value{sb.count->value()};
      return std::nullopt;
    case ActionKind::list_state:
      sb.events->set_current_namespace(n);
      if (a.op == StateOp::add) sb.events->add(a.x);
      if (a.op == StateOp::add_all) sb.events->add_all(a.value);
      if (a.op == StateOp::update) sb.events->update(a.value);
      if (a.op == StateOp::merge) sb.events->merge_namespaces(n, a.extras.get().sources);
      if (a.op == StateOp::clear) sb.events->clear();
      if (a.op == StateOp::get) return sb.events->get();
      return std::nullopt;
    case ActionKind::map_state:
      sb.attrs->set_current_namespace(n);
      if (a.op == StateOp::put) sb.attrs->put(a.x, a.value.empty() ? 0 : a.value[0]);
      if (a.op == StateOp::remove) sb.attrs->remove(a.x);
      if (a.op == StateOp::clear) sb.attrs->clear();
      if (a.op == StateOp::get) return some(sb.attrs->get(a.x));
      return std::nullopt;
    case ActionKind::reducing_state:
      sb.sum->set_current_namespace(n);
      if (a.op == StateOp::add) sb.sum->add(a.x);
      if (a.op == StateOp::merge) sb.sum->merge_namespaces(n, a.extras.get().sources);
      if (a.op == StateOp::clear) sb.sum->clear();
      if (a.op == StateOp::get) return some(sb.sum->get());
      return std::nullopt;
    default:
      sb.avg->set_current_namespace(n);
      if (a.op == StateOp::add) sb.avg->add(a.x);
      if (a.op == StateOp::merge) sb.avg->merge_namespaces(n, a.extras.get().sources);
      if (a.op == StateOp::clear) sb.avg->clear();
      if (a.op == StateOp::get) return some(sb.avg->get());
      return std::nullopt;
  }
}

// One operation on one state: on the backend and on the model, which says what a read may
// return. A read runs on the backend first (what it returns is what the model held before),
// a write on the model first; the model's state between the two is never checked (the
// writer is inside an operation).
void BackendSimulation::state_operation(const Action& a) {
  const Key k = a.entry.first;
  const Ns n = a.entry.second;
  const std::string what = writer_text(a);
  trace("writer " + what);
  const std::int32_t g = key_group_of(k);
  if (!range_.contains(g)) {
    invalid(*tasks_[0], "key " + std::to_string(k) + " is in key group " + std::to_string(g) +
                            ", outside the backend's key groups " + range_.to_string());
  }
  SimBackend& sb = *primary_;
  const Status st = sb.backend->set_current_key(k);
  expect(st.ok(), "result",
         "set_current_key(" + std::to_string(k) + ") of key group " + std::to_string(g) +
             " refused: " + st.message());
  expect(sb.backend->current_key_group() == g, "B6",
         "key " + std::to_string(k) + " went to key group " +
             std::to_string(sb.backend->current_key_group()) + ", Flink's key group is " +
             std::to_string(g));
  const model::StateCall<Ns> call = call_of(a);
  if (a.op != StateOp::get) {
    model_.apply(a.state, k, n, call, now());
    call_backend(sb, a);
    return;
  }
  const Value* stored = model_.backend().state(a.state).get(k, n);
  const std::string had =
      model_.has_ttl(a.state) && stored != nullptr ? model::to_text(*stored) : "nothing";
  const model::StateResult got = call_backend(sb, a);
  const model::Allowed want = model_.apply(a.state, k, n, call, now());
  if (want.allows(got)) return;
  const bool sequence = a.kind == ActionKind::list_state;
  std::string list;
  for (const model::StateResult& r : want.results) {
    list += (list.empty() ? "" : " or ") + result_text(r, sequence);
  }
  if (!model_.has_ttl(a.state)) {
    expect(false, "result", what + " returned " + result_text(got, sequence) + ", model " + list);
    return;
  }
  expect(false, "L2",
         what + " at time " + std::to_string(now()) + " returned " + result_text(got, sequence) +
             ", the model allows " + list + " (stored: " + had + ", ttl " +
             std::to_string(ttl_->ttl()) + ")");
}

// ---------------------------------------------------------------------------------------
// TTL

BackendImage BackendSimulation::filtered(const BackendImage& image, std::int64_t at) const {
  BackendImage out = image;
  for (auto& [name, entries] : out) {
    if (!is_ttl_state(name)) continue;
    for (auto it = entries.begin(); it != entries.end();) {
      it->second = live_part(name, it->second, at);
      it = it->second.empty() ? entries.erase(it) : std::next(it);
    }
  }
  return out;
}

// `cleanup s=X n=N`: N entries of incremental cleanup; n=all: enough runs to pass over
// every key group and entry, after which nothing expired may remain.
void BackendSimulation::run_cleanup(const Action& a) {
  trace("writer " + writer_text(a));
  COWSTATE_ASSERT(ttl_.has_value() && is_ttl_state(a.state), "T2",
                  "a cleanup action in a run without TTL");
  // Incremental cleanup passes over the heap key groups only: a spilled key group's expired
  // values go when they are read (lazy expiry) or once it is loaded and cleaned again.
  std::set<std::int32_t> spilled;
  auto drive = [&](auto& handle) {
    if (a.budget != 0) {
      handle.run_ttl_cleanup(a.budget);
      return;
    }
    auto& table = handle.ttl_table();
    std::size_t total = 1;
    for (std::int32_t g = table.range().start(); g <= table.range().end(); ++g) {
      if (table.heap_map(g) != nullptr) total += table.heap_map(g)->size();
      if (table.heap_map(g) == nullptr) spilled.insert(g);
    }
    for (std::int32_t i = 0; i < table.range().size() + 2; ++i) handle.run_ttl_cleanup(total);
  };
  if (a.state == "count") drive(*primary_->count);
  if (a.state == "events") drive(*primary_->events);
  if (a.state == "attrs") drive(*primary_->attrs);
  if (a.budget != 0) return;
  const BackendImage live = contents(*primary_, "the live backend");
  for (const auto& [key, v] : live.at(a.state)) {
    if (spilled.contains(key_group_of(key.first))) continue;
    expect(live_part(a.state, v, now()) == v, "L2",
           "cleanup over every entry of " + a.state + " at time " + std::to_string(now()) +
               " left expired elements in (" + std::to_string(key.first) + ", " +
               std::to_string(key.second) + "): " + model::to_text(v) + " (ttl " +
               std::to_string(ttl_->ttl()) + ")");
  }
}

// After an operation: the live TTL states may differ from the model only by what cleanup
// may remove (elements expired now, lists and maps never left empty); the model adopts it.
void BackendSimulation::reconcile(const std::string& after) {
  const BackendImage live = contents(*primary_, "the live backend");
  const std::int64_t t = now();
  for (const std::string& name : ttl_states()) {
    Store::Map& m = model_.backend().state(name);
    const Image want = m.live();
    const Image& got = live.at(name);
    auto where = [&](const EntryKey& key) {
      return after + " at time " + std::to_string(t) + ": " + name + " (" +
             std::to_string(key.first) + ", " + std::to_string(key.second) + ")";
    };
    for (const auto& [key, v] : got) {
      expect(!v.empty(), "L4", where(key) + " is stored empty");
      expect(want.contains(key), "L2",
             where(key) + " holds " + model::to_text(v) + ", which the model does not have");
    }
    for (const auto& [key, v] : want) {
      const auto it = got.find(key);
      const Value& have = it != got.end() ? it->second : Value{};
      if (it != got.end() && have == v) continue;
      expect(model_.ttl()->is_cleanup(stride(name), v, have, t), "L2",
             where(key) + " is " + (it != got.end() ? model::to_text(have) : "gone") +
                 "; the model has " + model::to_text(v) +
                 " and cleanup may remove only elements expired now (ttl " +
                 std::to_string(ttl_->ttl()) + ")");
      if (it == got.end()) {
        m.remove(key.first, key.second);
      } else {
        m.put(key.first, key.second, have);
      }
    }
  }
}

// A completed checkpoint with full-snapshot cleanup holds its image less what was expired
// when each entry was written (L5). Exact when its serializer wrote at one time only;
// otherwise every element expired at the first write time is left out, every element live
// at the last one is kept, and the restored contents become what later restores expect.
// An incremental checkpoint's unchanged entries were written by a member of its chain, at
// any earlier time: cleanup drops what each block rewrites, so an element expired since
// may be kept, never one live at the last write time.
BackendImage BackendSimulation::full_snapshot_expected(const CheckpointRecord& rec,
                                                       const BackendImage& got) {
  const std::int64_t lo = rec.parent != 0           ? std::numeric_limits<std::int64_t>::min()
                          : rec.write_times.empty() ? now()
                                                    : *rec.write_times.begin();
  const std::int64_t hi = rec.write_times.empty() ? now() : *rec.write_times.rbegin();
  if (lo == hi) return filtered(rec.image, lo);
  const std::string who =
      rec.name +
      (rec.parent != 0
           ? " (incremental, last written at time " + std::to_string(hi) + ")"
           : " (written between times " + std::to_string(lo) + " and " + std::to_string(hi) + ")") +
      " restored into its range";
  for (const auto& [name, image] : rec.image) {
    const Image& have = got.at(name);
    if (!is_ttl_state(name)) {
      auto d = model::diff(image, have);
      expect(!d, "restore", who + ": state " + name + " differs from the model: " + d.value_or(""));
      continue;
    }
    for (const auto& [key, v] : have) {
      expect(image.contains(key), "L5",
             who + ": " + name + " holds (" + std::to_string(key.first) + ", " +
                 std::to_string(key.second) + "), which the checkpoint's image does not");
    }
    for (const auto& [key, v] : image) {
      const auto it = have.find(key);
      const Value& kept = it != have.end() ? it->second : Value{};
      expect(model_.ttl()->is_full_snapshot_write(stride(name), v, kept, lo, hi), "L5",
             who + ": " + name + " (" + std::to_string(key.first) + ", " +
                 std::to_string(key.second) + ") is " +
                 (it != have.end() ? model::to_text(kept) : "left out") + "; its image holds " +
                 model::to_text(v) + " (ttl " + std::to_string(ttl_->ttl()) + ")");
    }
  }
  return got;
}

// How far the clock moves: often exactly to a stored value's expiry instant (where `<` and
// `<=` differ), often by 1 (time passing with values still live, where refresh on read and
// stale timestamps show), sometimes by the whole TTL.
std::int64_t BackendSimulation::pick_advance(Prng& rng) const {
  const std::int64_t ttl = ttl_->ttl();
  const std::int64_t t = now();
  const std::uint64_t roll = rng.below(100);
  if (roll < 40) {
    std::vector<std::int64_t> instants;
    for_each_last_access([&](std::int64_t last) {
      if (!expired(last)) instants.push_back(last + ttl - t);
    });
    if (!instants.empty()) return instants[rng.below(instants.size())];
  }
  if (roll < 50) return ttl;
  if (roll < 75) return 1;
  return static_cast<std::int64_t>(rng.between(1, static_cast<std::uint64_t>(ttl)));
}

// ---------------------------------------------------------------------------------------
// Checkpoints

void BackendSimulation::start_checkpoint(const std::string& name) {
  auto owned = std::make_unique<CheckpointRecord>();
  CheckpointRecord& rec = *owned;
  rec.name = name;
  rec.id = checkpoints_.size() + 1;
  checkpoints_.push_back(std::move(owned));
  ++result_.stats.snapshots;
  rec.snapshot = primary_->backend->snapshot(rec.id);
  const std::uint64_t parent = rec.snapshot->header().parent_checkpoint_id;
  rec.parent = parent;
  CheckpointView sync_phase;
  add_map_snapshots(sync_phase, *rec.snapshot);
  rec.taken = std::move(sync_phase.taken);
  model_.backend().start_checkpoint(rec.id);
  rec.image = model_.backend().image(rec.id);
  rec.expected = rec.image;
  std::size_t entries = 0;
  for (const auto& [state, image] : rec.image) entries += image.size();
  trace("writer checkpoint " + name + " id " + std::to_string(rec.id) + " entries " +
        std::to_string(entries) +
        (parent != 0 ? " delta of " + checkpoints_.at(parent - 1)->name + " (" +
                           std::to_string(rec.snapshot->delta_key_groups()) + " key groups)"
                     : ""));
  expect(rec.snapshot->entries() == entries, "C1",
         name + "'s sync phase snapshotted " + std::to_string(rec.snapshot->entries()) +
             " entries, the model holds " + std::to_string(entries));
  ++undecided_;
  const std::uint32_t task = static_cast<std::uint32_t>(tasks_.size());
  spawn(name, name, TaskKind::serializer, 2,
        [this, &rec, task] { serializer_body(rec, *tasks_[task]); });
  const std::uint64_t before = fs_->operations();
  rec.began_op = before;
  auto pending = storage_->begin(rec.id, parent);
  if (!pending.ok()) {
    expect_injected(before, name + ": begin", pending.status());
    finish_failed(rec, "begin: " + pending.status().message());
    return;
  }
  rec.pending = std::move(*pending);
  rec.writer = std::make_unique<CheckpointWriter>(std::move(rec.snapshot), rec.pending.get());
}

// Generated runs: a serializer's first slice may instead arm an I/O error a few file
// operations ahead (unless one is armed and has not fired); every other slice writes up
// to step_entries_max entries.
Action BackendSimulation::draw_slice(CheckpointRecord& rec, Prng& rng) {
  if (!rec.fault_decided) {
    rec.fault_decided = true;
    const bool pending = armed_at_ > fs_->operations();  // armed and not fired yet
    if (rng.below(100) < opts_.fault_percent && !pending) {
      Action a;
      a.kind = ActionKind::fail;
      a.budget = static_cast<std::uint32_t>(1 + rng.below(opts_.fault_within));
      return a;
    }
    if (opts_.write_fault_percent != 0 && disk_ != nullptr &&
        rng.below(100) < opts_.write_fault_percent) {
      Action a;  // one of the first appends of the data file, or the manifest's
      a.kind = ActionKind::write_fault;
      a.budget = static_cast<std::uint32_t>(rng.below(4));
      a.x = rng.chance(1, 2) ? 0 : static_cast<std::int64_t>(1 + rng.below(4096));
      return a;
    }
  }
  return step_action(1 + rng.below(opts_.step_entries_max));
}

void BackendSimulation::serializer_body(CheckpointRecord& rec, Task& self) {
  for (;;) {
    // A finished checkpoint's serializer draws nothing; past its lines it writes the rest
    // in one step.
    const Action act =
        next_action(self, [&](Prng& rng) {
          return std::optional<Action>(rec.finished ? step_action(0) : draw_slice(rec, rng));
        }).value_or(step_action(0));
    if (rec.finished) {
      begin_action(self, step_action(0));
      trace(self.name + " stops: " + rec.name + " has finished");
      end_unit(self);
      return;
    }
    begin_action(self, act);
    if (act.kind == ActionKind::fail) {
      arm_fault(act.budget);
      trace(self.name + " fail at write " + std::to_string(act.budget) + " (operation " +
            std::to_string(armed_at_) + ")");
      end_unit(self);
      Fiber::yield();
      continue;
    }
    if (act.kind == ActionKind::write_fault) {
      arm_write_fault(rec, act, self);
      end_unit(self);
      Fiber::yield();
      continue;
    }
    const std::size_t budget = act.budget == 0 ? SIZE_MAX : act.budget;
    const std::uint64_t before = fs_->operations();
    // The clock moves only between slices: the times a step writes at are the one it
    // starts at, the one it ends at, and those of the slices it yields in between.
    if (ttl_) rec.write_times.insert(now());
    rec.in_step = true;
    const bool finished = rec.writer->step(budget);
    if (ttl_) rec.write_times.insert(now());
    trace(self.name + " step " + (act.budget == 0 ? std::string("all") : std::to_string(budget)) +
          " -> " + std::to_string(rec.writer->bytes_written()) + " bytes");
    if (rec.writer->failed()) {
      rec.in_step = false;
      if (!accepted_cancel(rec)) {
        expect_injected(opts_.async_io == 1 ? rec.began_op : before, rec.name + ": write",
                        rec.writer->status());
        probe("fault.io_error");
      }
      finish_failed(rec, rec.writer->status().message());
      end_unit(self);
      return;
    }
    if (finished) {
      commit(rec);
      end_unit(self);
      return;
    }
    rec.in_step = false;
    end_unit(self);
    Fiber::yield();
  }
}

// The end of the async phase: the file is written, the commit decides. Between the two is
// where another thread's cancel races the commit (checkpoint.commit); C7 says who wins.
void BackendSimulation::commit(CheckpointRecord& rec) {
  on_yield("checkpoint.commit");
  rec.in_step = false;
  const std::uint64_t at = fs_->operations();
  const Status committed = rec.pending->commit();
  if (!committed.ok()) {
    if (accepted_cancel(rec)) {
      expect_no_temporary(rec, at, "C7", "its commit refused the cancelled checkpoint");
    } else {
      expect_injected(opts_.async_io == 1 ? rec.began_op : at, rec.name + ": commit", committed);
      probe("fault.io_error");
    }
    finish_failed(rec, committed.message(), at);
    return;
  }
  expect(!accepted_cancel(rec), "C7",
         rec.name + " was published although its cancel was accepted before the commit");
  rec.committed = true;
  rec.committed_op = disk_ != nullptr ? disk_->operations() : 0;
  settle_write_faults(rec);
  finish_complete(rec);
}

// The releaser asks the pending checkpoint to stop, as another thread would; the serializer
// sees it at its next section, block or commit. The answer must match where the serializer
// is: a checkpoint that has not begun its commit accepts, a committed one is too late.
void BackendSimulation::cancel(CheckpointRecord& rec, const std::string& by) {
  const std::string where = rec.in_step ? " (mid-step)" : "";
  if (rec.pending == nullptr) {
    trace(by + " cancel " + rec.name + ": finished (it never began)");
    return;
  }
  const CancelResult got = rec.pending->cancel();
  if (rec.in_step) probe("cow.cancel_mid_step");
  trace(by + " cancel " + rec.name + where + ": " + cancel_result_name(got));
  CancelResult want = CancelResult::accepted;
  if (rec.cancelled == CancelResult::accepted) {
    want = CancelResult::repeated;
  } else if (rec.finished) {
    want = rec.committed ? CancelResult::too_late : CancelResult::finished;
  }
  expect(got == want, "C7",
         by + "'s cancel of " + rec.name + where + " returned " + cancel_result_name(got) +
             ", expected " + cancel_result_name(want) +
             (rec.finished ? (rec.committed ? " (it committed)" : " (it failed)")
                           : " (its commit has not begun)"));
  if (!rec.cancelled) rec.cancelled = got;
  dirty_ = true;
}

void BackendSimulation::finish_failed(CheckpointRecord& rec, const std::string& why,
                                      std::uint64_t since) {
  COWSTATE_ASSERT(!rec.finished, "T3", "a checkpoint record finished twice");
  rec.finished = true;
  if (!rec.decided) {
    rec.decided = true;
    --undecided_;
  }
  const std::uint64_t before_abort = std::min(since, fs_->operations());
  if (rec.pending != nullptr) rec.pending->abort();
  trace(rec.name + " failed: " + scrub(why));
  expect_no_temporary(rec, before_abort, "C6", "it was aborted");
  // C2: a dead checkpoint pins nothing (the writer is kept: only its release may free them).
  const BackendSnapshot* snap = rec.writer != nullptr ? rec.writer->snapshot() : nullptr;
  if (snap != nullptr) {
    expect(snap->live_key_groups() == 0, "C2",
           rec.name + " failed but still holds the map snapshots of " +
               std::to_string(snap->live_key_groups()) + " key groups");
  }
  rec.snapshot.reset();  // never handed to a writer (begin failed): release it
  primary_->backend->notify_checkpoint_aborted(rec.id);
  model_.backend().release_checkpoint(rec.id);
  auto complete = storage_->complete_checkpoints();
  expect(complete.ok(), "storage",
         "listing complete checkpoints: " + scrub(complete.status().message()));
  for (std::uint64_t id : *complete) {
    expect(id != rec.id, "C6",
           rec.name + " failed but checkpoint " + std::to_string(id) + " is complete in storage");
  }
  dirty_ = true;
  check_previous_restores("after " + rec.name + " failed");
}

void BackendSimulation::expect_no_temporary(const CheckpointRecord& rec, std::uint64_t since,
                                            const char* check, const std::string& after) {
  if (fault_fired_since(since)) {
    // The injected fault hit the removal itself (abort is best effort): the next open()
    // removes what is left.
    return;
  }
  auto names = fs_->list_dir(storage_->dir());
  expect(names.ok(), "storage",
         "listing the checkpoint directory: " + scrub(names.status().message()));
  const std::string tmp = std::filesystem::path(storage_->data_path(rec.id)).filename().string();
  for (const std::string& name : *names) {
    expect(name.rfind(tmp, 0) != 0 || name == tmp, check,
           rec.name + "'s temporary file " + name + " is still there after " + after);
  }
}

void BackendSimulation::finish_complete(CheckpointRecord& rec) {
  rec.finished = true;
  rec.complete = true;
  if (!rec.decided) {
    rec.decided = true;
    --undecided_;
  }
  expect(rec.writer->snapshot()->live_key_groups() == 0, "C2",
         rec.name + " completed but still holds map snapshots");
  model_.backend().release_checkpoint(rec.id);
  if (!newest_committed_ || *newest_committed_ < rec.id) newest_committed_ = rec.id;
  dirty_ = true;
  rec.bytes = rec.writer->bytes_written();
  trace(rec.name + " complete: " + std::to_string(rec.bytes) + " bytes");
  // Storage keeps the newest kRetain complete checkpoints by id: one that commits after
  // kRetain newer ones is pruned at once, which is right (and all that may explain it).
  const CheckpointScan found =
      scan_expecting_faulted_damage(*storage_, "C9", rec.name + " committed and ");
  // What the commit pruned is no longer complete. Retention keeps the newest kRetain
  // complete checkpoints, counting those whose data file a write fault damaged (damage that
  // shows only when read), so it may remove the newest intact one: C8 then expects no more.
  for (auto& r : checkpoints_) {
    if (r.get() == &rec || !r->complete) continue;
    if (std::find(found.complete.begin(), found.complete.end(), r->id) == found.complete.end()) {
      r->complete = false;
      r->pruned = true;
    }
  }
  if (rec.damaged_manifest) {  // never complete: reported, or pruned at once (C9)
    expect_damage_reported(rec, *storage_, *fs_);
    return;
  }
  const std::vector<std::uint64_t>& complete = found.complete;
  std::size_t newer = 0;
  for (std::uint64_t id : complete) newer += id > rec.id ? 1U : 0U;
  if (std::find(complete.begin(), complete.end(), rec.id) == complete.end()) {
    expect(newer >= kRetain, "storage",
           rec.name + " committed but is not complete in storage, with only " +
               std::to_string(newer) + " newer complete checkpoints");
    trace(rec.name + " pruned: " + std::to_string(newer) + " newer checkpoints are complete");
    rec.complete = false;
    rec.pruned = true;
    return;
  }
  if (rec.damaged_data) {
    expect_damage_reported(rec, *storage_, *fs_);
    return;
  }
  primary_->backend->notify_checkpoint_complete(rec.id, rec.bytes);
  const StoredCheckpoint stored = read_stored(*storage_, rec.id, rec.name);
  verify_round_trips(rec, stored);
  ++result_.stats.snapshots_checked;
}

// The newest complete checkpoint is the newest that committed and restores exactly, or
// what stands in its way is reported: latest() may fail only naming a damaged manifest, and
// return an older checkpoint only past damaged ones (D1), and a damaged data file is
// refused when read (C9).
void BackendSimulation::check_previous_restores(const std::string& after) {
  auto latest = storage_->latest();
  if (!latest.ok()) {
    bool named = false;
    for (const auto& r : checkpoints_) {
      const std::string manifest =
          std::filesystem::path(storage_->manifest_path(r->id)).filename().string();
      named = named || (r->damaged_manifest &&
                        latest.status().message().find(manifest) != std::string::npos);
    }
    expect(named, "storage",
           after + ": finding the latest checkpoint: " + scrub(latest.status().message()));
    return;
  }
  const std::uint64_t id = latest->value_or(0);
  const std::uint64_t newest = newest_committed_.value_or(0);
  expect(id <= newest, "storage",
         after + ": the latest complete checkpoint is " + std::to_string(id) +
             ", newer than every committed one (" + std::to_string(newest) + ")");
  for (std::uint64_t skipped = id + 1; skipped <= newest; ++skipped) {
    const CheckpointRecord& r = *checkpoints_.at(skipped - 1);
    expect(!r.complete || r.damaged(), "storage",
           after + ": the latest complete checkpoint is " +
               (id == 0 ? std::string("none") : checkpoints_.at(id - 1)->name) + ", but " + r.name +
               " committed intact after it");
  }
  if (id == 0) return;
  const CheckpointRecord& prev = *checkpoints_.at(id - 1);
  if (prev.damaged()) {
    expect_damage_reported(prev, *storage_, *fs_);
    return;
  }
  const StoredCheckpoint stored = read_stored(*storage_, prev.id, prev.name + " " + after);
  const CheckpointInput in = stored.input(prev.name, prev.id);
  yields_enabled_ = false;
  const auto r = restored({in}, range_, false, prev.name + " restored " + after);
  compare(prev.expected, contents(*r, prev.name), "restore", prev.name + " restored " + after);
  yields_enabled_ = true;
}

void BackendSimulation::verify_round_trips(CheckpointRecord& rec, const StoredCheckpoint& stored) {
  KeyGroupRange a = range_, b;
  if (range_.size() >= 2) {
    const std::int32_t mid = range_.start() + range_.size() / 2 - 1;
    a = KeyGroupRange(range_.start(), mid);
    b = KeyGroupRange(mid + 1, range_.end());
  }
  yields_enabled_ = false;
  const CheckpointInput in = stored.input(rec.name, rec.id);
  const auto same = restored({in}, range_, false, rec.name + " restored into its own range", true);
  const BackendImage got = contents(*same, rec.name);
  if (ttl_ && ttl_->full_snapshot_cleanup) rec.expected = full_snapshot_expected(rec, got);
  compare(rec.expected, got, "restore", rec.name + " restored into its range");
  round_trip(rec.expected, stored, rec.name, a, b, !b.empty());
  yields_enabled_ = true;
}

void BackendSimulation::round_trip(const BackendImage& image, const StoredCheckpoint& stored,
                                   const std::string& name, KeyGroupRange a, KeyGroupRange b,
                                   bool merge_back) {
  const CheckpointInput in = stored.input(name, 0);
  const std::string into_a = name + " restored into " + a.to_string();
  const auto ra = restored({in}, a, true, into_a);
  compare(restricted(image, a), contents(*ra, into_a), "restore", into_a);
  if (b.empty()) return;
  const std::string into_b = name + " restored into " + b.to_string();
  const auto rb = restored({in}, b, false, into_b);
  compare(restricted(image, b), contents(*rb, into_b), "restore", into_b);
  if (!merge_back) return;
  // Scale back in: each half's own checkpoint (its states numbered its own way), merged.
  const std::vector<std::byte> bytes_a = checkpoint_in_memory(*ra, 1);
  const std::vector<std::byte> bytes_b = checkpoint_in_memory(*rb, 1);
  const KeyGroupRange both(std::min(a.start(), b.start()), std::max(a.end(), b.end()));
  const std::string merged = name + " split and merged back into " + both.to_string();
  const auto rm = restored({CheckpointInput{"half " + a.to_string(), bytes_a, 1},
                            CheckpointInput{"half " + b.to_string(), bytes_b, 1}},
                           both, false, merged);
  // The halves' own checkpoints were written now: full-snapshot cleanup judged them now.
  const bool now_filtered = ttl_ && ttl_->full_snapshot_cleanup;
  compare(now_filtered ? filtered(restricted(image, both), now()) : restricted(image, both),
          contents(*rm, merged), "restore", merged);
}

std::vector<std::byte> BackendSimulation::checkpoint_in_memory(SimBackend& sb, std::uint64_t id) {
  MemoryCheckpointSink sink;
  CheckpointWriter w(sb.backend->snapshot(id), &sink);
  while (!w.step(1024)) {
  }
  expect(w.done(), "restore", "a checkpoint into memory failed: " + w.status().message());
  return sink.take();
}

std::unique_ptr<SimBackend> BackendSimulation::restored(const std::vector<CheckpointInput>& inputs,
                                                        KeyGroupRange range, bool reversed,
                                                        const std::string& who, bool budget) {
  budget = budget && budgeted();
  auto sb = std::make_unique<SimBackend>(range, max_parallelism_, map_options_, reversed, &clock_,
                                         ttl_, budget ? spill_options(true) : SpillOptions{},
                                         incremental_options());
  const Status st = sb->backend->restore(inputs);
  expect(st.ok(), "restore", who + ": " + st.message());
  std::string why;
  const bool sound = sb->backend->check_invariants(&why);  // before `why` is read
  expect(sound, "restore", who + ": " + why);
  if (budget) check_restored_under_budget(*sb, who);
  return sb;
}

BackendImage BackendSimulation::contents(SimBackend& sb, const std::string& who) {
  BackendImage out;
  const KeyGroupRange range = sb.backend->range();
  sb.each([&](const char* name, auto& handle) {
    SimBackend::with_table(handle, [&](auto& table) {
      expect(table.range() == range, "B1",
             who + ": the table of state " + name + " covers key groups " +
                 table.range().to_string() + ", the backend's range is " + range.to_string());
      Image& image = out[name];
      for (std::int32_t g = table.range().start(); g <= table.range().end(); ++g) {
        table.for_each_in_tier(g, [&](const Key& k, const Ns& n, const auto& s) {
          expect(key_group_of(k) == g, "B6",
                 who + ": key " + std::to_string(k) + " of state " + name +
                     " is stored in key group " + std::to_string(g) + ", Flink's key group is " +
                     std::to_string(key_group_of(k)));
          image.emplace(std::make_pair(k, n), canonical(s));
        });
      }
    });
  });
  return out;
}

void BackendSimulation::compare(const BackendImage& want, const BackendImage& got,
                                const std::string& check, const std::string& who) {
  const auto kinds = model_.backend().kinds();
  const BackendImage w = Store::with_states(kinds, want);
  const BackendImage g = Store::with_states(kinds, got);
  for (const auto& [name, image] : w) {
    auto d = model::diff(image, g.at(name));
    expect(!d, check, who + ": state " + name + " differs from the model: " + d.value_or(""));
  }
  expect(w.size() == g.size(), check, who + ": holds states the model does not know");
}

// ---------------------------------------------------------------------------------------
// The spill tier

SpillOptions BackendSimulation::spill_options(bool observed) {
  SpillOptions o;
  if (!budgeted()) return o;
  o.memory_budget_bytes = opts_.budget_bytes;
  o.check_every_key_switches =
      opts_.spill_check == 0 ? std::numeric_limits<std::uint32_t>::max() : opts_.spill_check;
  o.cold_cache_ratio = opts_.cold_cache_percent / 100.0;
  // The empty maps' bookkeeping takes about half of a generated budget: loads start at 70%
  // (FLIP-50's 50% would never come) and stop short of 80%; spills start above 90%.
  o.load_start_ratio = 0.7;
  o.load_end_ratio = 0.8;
  o.cold.map_size_bytes = std::size_t{1} << 26;
  if (const char* env = std::getenv("COWSTATE_SIM_TMPDIR"); env != nullptr) {
    o.cold.parent_directory = env;
  }
  if (observed) {
    o.on_decision = [this](const SpillDecision& d, const std::vector<SpillCandidate>& candidates,
                           std::uint64_t before,
                           std::uint64_t after) { check_decision(d, candidates, before, after); };
  }
  return o;
}

void BackendSimulation::move_key_group(const Action& a) {
  trace("writer " + writer_text(a));
  const auto g = static_cast<std::int32_t>(a.x);
  if (!budgeted()) invalid(*tasks_[0], writer_text(a) + " needs a memory budget (config budget=)");
  if (!range_.contains(g)) {
    invalid(*tasks_[0], "key group " + std::to_string(g) + " is outside the backend's key groups " +
                            range_.to_string());
  }
  std::size_t index = 0;
  bool heap = false;
  std::size_t i = 0;
  primary_->each([&](const char* name, auto& handle) {
    if (a.state == name) {
      index = i;
      SimBackend::with_table(handle, [&](auto& table) { heap = table.heap_map(g) != nullptr; });
    }
    ++i;
  });
  const bool spill = a.kind == ActionKind::spill;
  if (spill != heap) {
    invalid(*tasks_[0], writer_text(a) + ": key group " + std::to_string(g) + " of state " +
                            a.state.str() + " is in the " + (heap ? "heap" : "cold") + " tier");
  }
  Backend& b = *primary_->backend;
  const Status st = spill ? b.spill(index, g) : b.load(index, g);
  expect(st.ok(), "spill", writer_text(a) + " failed: " + st.message());
  check_accounting(*primary_, "after " + writer_text(a));
}

void BackendSimulation::check_accounting(SimBackend& sb, const std::string& who) {
  std::string why;
  const bool exact = sb.backend->check_accounting(&why);  // before `why` is read
  expect(exact, "M1", who + ": " + why);
}

void BackendSimulation::check_decision(const SpillDecision& d,
                                       const std::vector<SpillCandidate>& candidates,
                                       std::uint64_t before, std::uint64_t after) {
  ++decisions_checked_;
  if (d.action != SpillAction::none) {
    static constexpr const char* kActions[] = {"none", "spill", "load", "swap"};
    std::string moved;
    for (const SpillCandidate& c : d.chosen) {
      moved +=
          " " + std::string(backend_states()[c.state].name) + "/" + std::to_string(c.key_group);
    }
    trace("manager " + std::string(kActions[static_cast<int>(d.action)]) + moved + " (" +
          std::to_string(before) + " -> " + std::to_string(after) + " bytes)");
  }
  check_accounting(*primary_, "after the manager's check");
  const std::uint64_t high = SpillLoadManager(spill_options(false)).high_watermark_bytes();
  if (d.action == SpillAction::spill || d.action == SpillAction::none) {
    expect(after <= high || !d.why.empty(), "M4",
           std::to_string(after) +
               " bytes accounted after the manager's check, above the high watermark " +
               std::to_string(high) + ", and the manager says nothing of why");
  }
  if (d.action == SpillAction::spill) check_spill_order(d, candidates);
}

void BackendSimulation::check_spill_order(const SpillDecision& d,
                                          const std::vector<SpillCandidate>& candidates) {
  std::vector<SpillCandidate> heap;
  for (const SpillCandidate& c : candidates) {
    if (c.tier == Tier::heap && c.bytes > 0) heap.push_back(c);
  }
  if (heap.empty()) return;
  auto [bmin, bmax] = std::minmax_element(
      heap.begin(), heap.end(), [](const auto& x, const auto& y) { return x.bytes < y.bytes; });
  auto [rmin, rmax] = std::minmax_element(
      heap.begin(), heap.end(), [](const auto& x, const auto& y) { return x.rate < y.rate; });
  const double b0 = static_cast<double>(bmin->bytes);
  const double bspan = static_cast<double>(bmax->bytes) - b0;
  const double r0 = rmin->rate;
  const double rspan = rmax->rate - r0;
  auto score = [&](const SpillCandidate& c) {
    const double s = bspan > 0 ? (static_cast<double>(c.bytes) - b0) / bspan : 0.0;
    const double r = rspan > 0 ? (c.rate - r0) / rspan : 0.0;
    return 0.7 * s - 0.3 * r;
  };
  auto name = [](const SpillCandidate& c) {
    return std::string(backend_states()[c.state].name) + "/" + std::to_string(c.key_group) + " (" +
           std::to_string(c.bytes) + " bytes, rate " + std::to_string(c.rate) + ")";
  };
  for (const SpillCandidate& c : d.chosen) {
    expect(c.tier == Tier::heap, "M3", "a spill round chose the cold key group " + name(c));
    for (const SpillCandidate& o : heap) {
      const bool also = std::any_of(d.chosen.begin(), d.chosen.end(), [&](const auto& x) {
        return x.state == o.state && x.key_group == o.key_group;
      });
      expect(also || score(o) <= score(c) + 1e-9, "M3",
             "the manager spilled " + name(c) + " and kept " + name(o) +
                 ", whose spill score 0.7 size - 0.3 rate is higher");
    }
  }
}

void BackendSimulation::check_restored_under_budget(SimBackend& sb, const std::string& who) {
  check_accounting(sb, who);
  const std::uint64_t high = SpillLoadManager(spill_options(false)).high_watermark_bytes();
  std::uint64_t heap = 0;
  std::uint64_t largest = 0;
  // The maps the restore decoded (an empty key group's map holds only its bookkeeping,
  // which the restore's limit does not count).
  for (const KeyGroupMetrics& k : sb.backend->metrics().key_groups) {
    if (k.tier != Tier::heap || k.entries == 0) continue;
    heap += k.bytes;
    largest = std::max<std::uint64_t>(largest, k.bytes);
  }
  expect(heap <= high + largest, "SP6",
         who + ": the heap maps it decoded hold " + std::to_string(heap) +
             " bytes, above the high watermark " + std::to_string(high) +
             " plus the largest key group's " + std::to_string(largest));
}

// A scenario's `restore c1 into A [and B [then merge]]`.
void BackendSimulation::scripted_restore(const Action& a) {
  trace("writer " + writer_text(a));
  const CheckpointRecord* rec = named(a.snapshot);
  if (rec == nullptr || !rec->complete) {
    invalid(*tasks_[0], a.snapshot + " is not a complete checkpoint (it " +
                            (rec == nullptr || !rec->finished ? "has not finished"
                             : rec->lost                      ? "was lost at a power loss"
                             : rec->pruned                    ? "was pruned"
                                                              : "failed") +
                            "); only a complete one restores");
  }
  if (rec->damaged()) {
    invalid(*tasks_[0], a.snapshot +
                            " was damaged by a write fault; only an intact checkpoint "
                            "restores");
  }
  for (const GroupRange& r : {a.extras.get().into, a.extras.get().also}) {
    COWSTATE_ASSERT(r.empty() || r.last < max_parallelism_, "REQUIRES",
                    "the parser refuses key groups beyond max parallelism");
  }
  const StoredCheckpoint stored = read_stored(*storage_, rec->id, rec->name);
  const KeyGroupRange ra(a.extras.get().into.first, a.extras.get().into.last);
  const KeyGroupRange rb = a.extras.get().also.empty()
                               ? KeyGroupRange()
                               : KeyGroupRange(a.extras.get().also.first, a.extras.get().also.last);
  yields_enabled_ = false;
  round_trip(rec->expected, stored, rec->name, ra, rb, a.extras.get().merge_back);
  yields_enabled_ = true;
}

// ---------------------------------------------------------------------------------------
// Power loss and restart

// The process dies with the disk: the heap state, open files and work in flight are gone,
// and what the disk keeps of its pending operations is chosen (SimulatedFileSystem).
void BackendSimulation::power_loss(const Action& a) {
  trace("writer " + writer_text(a));
  if (disk_ == nullptr) {
    invalid(*tasks_[0],
            "power_loss needs the simulated disk; this run's checkpoints are on a real file "
            "system (COWSTATE_SIM_TMPDIR)");
  }
  for (const auto& r : checkpoints_) {
    if (!r->finished) {
      invalid(*tasks_[0], "power_loss while checkpoint " + r->name +
                              " is in flight: let it finish or fail first");
    }
  }
  const std::uint64_t now_op = disk_->operations();
  const std::optional<std::uint64_t> back = crash_point_back_of(a.x);
  const std::uint64_t op =
      std::clamp(back ? now_op - std::min(*back, now_op) : static_cast<std::uint64_t>(a.x),
                 disk_base_, now_op);
  SeededDiskChoices choices(a.extras.get().salt);
  const std::vector<std::string> decided = disk_->power_loss_after(op, choices);
  result_.crash_ops.push_back(op);
  disk_base_ = disk_->operations();
  probe("fault.power_loss");
  if (!decided.empty()) probe("fault.crash_state");
  trace("power loss after disk operation " + std::to_string(op) + " of " + std::to_string(now_op) +
        ": " + std::to_string(decided.size()) + " pending operations decided");
  for (const std::string& line : decided) trace("  " + line);
  for (auto& r : checkpoints_) {  // finished: their map snapshots are released (C2)
    r->writer.reset();
    r->pending.reset();
    r->snapshot.reset();
  }
  storage_.reset();
  primary_.reset();
  fs_ = std::make_unique<FaultInjectionFileSystem>(*disk_);  // no injected error armed
  armed_at_ = 0;
  armed_ops_.clear();
  yields_enabled_ = false;  // a power loss has no yield point: the restart runs whole
  restart(a, op);
  yields_enabled_ = true;
}

// Arms read fault `a.budget` at position `a.entry.first` (taken modulo the file's size in
// its unit) for the next `times` reads of `path`, whose bytes are `clean`.
void arm_read_fault(SimulatedFileSystem& disk, const Action& a, const std::string& path,
                    std::size_t size, int times) {
  const std::uint64_t n = a.entry.first;
  const std::uint64_t bytes = std::max<std::uint64_t>(size, 1);
  const std::uint64_t sectors =
      (bytes + SimulatedFileSystem::kSectorBytes - 1) / SimulatedFileSystem::kSectorBytes;
  for (int i = 0; i < times; ++i) {
    switch (read_fault_of(a.budget)) {
      case ReadFault::flip:
      case ReadFault::manifest:  // a flip in the manifest
        disk.flip_bit_on_read(path, (n % (bytes * 8)) / 8, static_cast<unsigned>(n % 8));
        break;
      case ReadFault::zero:
        disk.zero_sector_on_read(path, n % sectors);
        break;
      case ReadFault::misdirect: {
        const std::uint64_t s = n % sectors;
        const std::uint64_t from =
            sectors < 2 ? s + 1 : (s + 1 + (n / sectors) % (sectors - 1)) % sectors;
        disk.misdirect_read(path, s, from);
        break;
      }
      case ReadFault::short_read:
        disk.short_read(path, n % bytes);
        break;
      case ReadFault::none:
        return;
    }
  }
}

void BackendSimulation::restart(const Action& a, std::uint64_t crash_op) {
  Recovered r = recover(*fs_, a, crash_op, "after the power loss", true);
  storage_ = std::move(r.storage);
  if (r.fell_back) {
    // The rollback past a damaged manifest was for this restore only: from here on the
    // storage reports damage as it always does.
    storage_.reset();
    auto storage = open_storage(*fs_);
    expect(
        storage.ok(), "C8",
        "reopening the checkpoint storage after the restart: " + scrub(storage.status().message()));
    storage_ = std::move(*storage);
  }
  if (r.id != 0) {
    CheckpointRecord& rec = *checkpoints_.at(r.id - 1);
    // One that failed may be durable all the same (its manifest's removal lost).
    if (!rec.committed && ttl_ && ttl_->full_snapshot_cleanup) {
      rec.expected = full_snapshot_expected(rec, r.image);
    }
  }
  primary_ = std::move(r.backend);
  // Complete now is what the disk holds: the restored one (durable even if its commit
  // failed, its manifest's removal lost), older ones the crash brought back from pruning,
  // and newer ones passed over for a damaged data file. An intact one that was complete and
  // is gone never reached the medium.
  auto found = storage_->scan();
  expect(found.ok(), "storage",
         "listing the checkpoint directory after the restart: " + scrub(found.status().message()));
  newest_committed_ = r.id == 0 ? std::nullopt : std::optional<std::uint64_t>(r.id);
  for (auto& rec : checkpoints_) {
    const bool there =
        std::find(found->complete.begin(), found->complete.end(), rec->id) != found->complete.end();
    expect(rec->id != r.id || there, "C8", rec->name + " restored but is not complete in storage");
    if (!there && rec->complete && !rec->damaged() && rec->id > r.id) rec->lost = true;
    rec->complete = there;
    rec->pruned = rec->pruned && !there;
    if (there && rec->id > r.id) {
      expect(r.passed_over.count(rec->id) != 0, "C8",
             rec->name + " is complete in storage, newer than " +
                 (r.id == 0 ? std::string("none") : checkpoints_.at(r.id - 1)->name) +
                 ", and was neither restored nor reported damaged");
      newest_committed_ = rec->id;
    }
  }
  model_.backend() = Store::restored(model_.backend().kinds(), r.image);
  dirty_ = true;
}

BackendSimulation::Recovered BackendSimulation::recover(FileSystem& fs, const Action& a,
                                                        std::uint64_t crash_op,
                                                        const std::string& after, bool narrate) {
  Recovered out;
  auto storage = open_storage(fs);
  expect(storage.ok(), "C8",
         "reopening the checkpoint storage " + after + ": " + scrub(storage.status().message()));
  out.storage = std::move(*storage);
  // C11: whatever the crash point, no manifest lost a chain member, and none is damaged but
  // by a write fault: manifests reach their final names whole, a delta's only once its
  // parent's is durable, and pruning removes them newest first, each durably.
  const CheckpointScan found = scan_expecting_faulted_damage(*out.storage, "C11", after + ": ");
  // C8: every checkpoint whose commit returned before the crash point survives, unless a
  // write fault damaged it.
  const CheckpointRecord* floor = nullptr;
  for (const auto& r : checkpoints_) {
    if (r->complete && !r->damaged() && r->committed_op <= crash_op) floor = r.get();
  }
  const bool manifest_fault = read_fault_of(a.budget) == ReadFault::manifest;
  if (manifest_fault) {  // on the newest manifest in place, complete or damaged
    const std::uint64_t id = std::max(found.complete.empty() ? 0 : found.complete.back(),
                                      found.damaged.empty() ? 0 : found.damaged.back().id);
    if (id == 0) {
      trace("restart: no manifest to fault");
    } else {
      const std::string path = out.storage->manifest_path(id);
      const std::string newest = std::filesystem::path(path).filename().string();
      arm_read_fault(*disk_, a, path, CheckpointStorage::kManifestSize, 1);
      probe("fault.read_manifest");
      auto latest = out.storage->latest();
      trace("restart: a flipped bit in " + newest + ": " +
            (latest.ok() ? std::string("latest() passed") : scrub(latest.status().message())));
      expect(!latest.ok() && latest.status().message().find(newest) != std::string::npos, "C9",
             "a bit flipped in " + newest + " " + after + " went unreported: latest() " +
                 (latest.ok() ? std::string("succeeded")
                              : "said " + scrub(latest.status().message())));
    }
  }
  out.id = latest_intact(out, fs, after);
  const std::string got_name =
      out.id == 0 ? std::string("none") : checkpoints_.at(out.id - 1)->name;
  expect(floor == nullptr || out.id >= floor->id, "C8",
         after + " (disk operation " + std::to_string(crash_op) + ") the latest checkpoint is " +
             got_name + ", but " + (floor ? floor->name : std::string()) +
             " had committed by disk operation " + std::to_string(floor ? floor->committed_op : 0));
  if (narrate) trace("restart: latest checkpoint " + got_name);
  if (out.id == 0) {
    out.backend =
        std::make_unique<SimBackend>(range_, max_parallelism_, map_options_, false, &clock_, ttl_,
                                     spill_options(true), incremental_options());
    return out;
  }
  const CheckpointRecord& rec = *checkpoints_.at(out.id - 1);
  auto bytes = a.budget != 0 && !manifest_fault ? read_through_fault(a, out.id, *out.storage)
                                                : std::optional<std::vector<std::byte>>();
  if (!bytes) {
    auto read = out.storage->read(out.id);
    expect(read.ok(), "C8",
           rec.name + " does not read back " + after + ": " + scrub(read.status().message()));
    bytes = std::move(*read);
  }
  StoredCheckpoint stored;
  stored.data = std::move(*bytes);
  const Status chained = read_chain_into(*out.storage, out.id, stored);
  expect(chained.ok(), "C8",
         rec.name + "'s chain does not read back " + after + ": " + scrub(chained.message()));
  out.backend = restored({stored.input(rec.name, rec.id)}, range_, false,
                         rec.name + " restored " + after, true);
  out.image = contents(*out.backend, rec.name + " restored " + after);
  const bool settled = rec.committed || !(ttl_ && ttl_->full_snapshot_cleanup);
  compare(settled ? rec.expected : full_snapshot_expected(rec, out.image), out.image, "C8",
          rec.name + " restored " + after);
  return out;
}

std::uint64_t BackendSimulation::latest_intact(Recovered& r, FileSystem& fs,
                                               const std::string& after) {
  auto latest = r.storage->latest();
  if (!latest.ok()) {
    // D1: a damaged newest checkpoint stops the restart, named; the rollback is asked for.
    auto found = r.storage->scan();
    expect(found.ok(), "storage",
           "listing the checkpoint directory: " + scrub(found.status().message()));
    const std::uint64_t newest = found->damaged.empty() ? 0 : found->damaged.back().id;
    expect(newest != 0 && newest <= checkpoints_.size() &&
               checkpoints_.at(newest - 1)->damaged_manifest,
           "C8",
           "finding the latest checkpoint " + after + ": " + scrub(latest.status().message()));
    expect_damage_reported(*checkpoints_.at(newest - 1), *r.storage, fs);
    auto fallback = open_storage(fs, true);
    expect(fallback.ok(), "C8",
           "reopening the checkpoint storage with fall_back_past_damaged " + after + ": " +
               scrub(fallback.status().message()));
    r.storage = std::move(*fallback);
    r.fell_back = true;
    latest = r.storage->latest();
    expect(latest.ok(), "C8",
           "finding the latest checkpoint past a damaged one " + after + ": " +
               scrub(latest.status().message()));
  }
  std::uint64_t id = latest->value_or(0);
  expect(id <= checkpoints_.size(), "C8",
         after + " the latest checkpoint is " + std::to_string(id) + ", which never began");
  // A data file a write fault damaged is refused on reading; the user then restores an
  // older one by hand: the newest complete one below it.
  while (id != 0 && checkpoints_.at(id - 1)->damaged_data) {
    expect_damage_reported(*checkpoints_.at(id - 1), *r.storage, fs);
    r.passed_over.insert(id);
    auto found = r.storage->scan();
    expect(found.ok(), "storage",
           "listing the checkpoint directory: " + scrub(found.status().message()));
    const std::uint64_t below = id;
    id = 0;
    for (std::uint64_t c : found->complete) id = c < below ? c : id;
  }
  return id;
}

void BackendSimulation::after_run() {
  if (config_.crash_states_max != 0) explore_crash_states();
}

// Every crash state of the disk's history since the last power loss, at most
// crash_states_max (SimulatedFileSystem::for_each_crash_state: every prefix of the history
// times every allowed subset of its pending operations, without tears): a restart on a disk
// holding exactly that state must find at least the newest checkpoint committed by the end
// of the prefix and restore it exactly (C8), as after a real power loss.
void BackendSimulation::explore_crash_states() {
  if (disk_ == nullptr) {
    throw ScenarioInvalid{0,
                          "crash states need the simulated disk; this run's checkpoints are "
                          "on a real file system (COWSTATE_SIM_TMPDIR)"};
  }
  const std::vector<SimulatedFileSystem::Operation>& history = disk_->history();
  yields_enabled_ = false;
  std::uint64_t states = 0;
  disk_->for_each_crash_state(config_.crash_states_max, [&](const CrashState& c) {
    const std::uint64_t op = c.prefix_len == 0 ? disk_base_ : history[c.prefix_len - 1].number;
    const std::string after = "after a power loss at crash state " + std::to_string(states + 1) +
                              " (disk operation " + std::to_string(op) + ")";
    SimulatedFileSystem disk(c.image);
    (void)recover(disk, Action{}, op, after, false);
    probe("fault.crash_state");
    ++states;
  });
  yields_enabled_ = true;
  result_.stats.crash_states = states;
  result_.stats.crash_points = history.size() + 1;
  trace("crash states: " + std::to_string(states) + " restarts checked from " +
        std::to_string(history.size() + 1) + " crash points");
}

// Reads checkpoint `id`'s data file through read fault `a` twice, raw and through the
// storage: a copy that differs from the file must be refused by both, naming the file,
// and restore nothing (C9); one that does not must restore exactly. Returns the clean bytes.
std::optional<std::vector<std::byte>> BackendSimulation::read_through_fault(
    const Action& a, std::uint64_t id, CheckpointStorage& storage) {
  const CheckpointRecord& rec = *checkpoints_.at(id - 1);
  const std::string path = storage.data_path(id);
  const std::string file = std::filesystem::path(path).filename().string();
  auto clean = fs_->read_file(path);
  expect(clean.ok(), "C8",
         rec.name + "'s data file does not read: " + scrub(clean.status().message()));
  arm_read_fault(*disk_, a, path, clean->size(), 2);
  probe(std::string("fault.read_") + kReadFaultNames[a.budget]);
  auto raw = fs_->read_file(path);
  auto stored = storage.read(id);
  const bool changed = !raw.ok() || *raw != *clean;
  trace(std::string("restart: read fault ") + kReadFaultNames[a.budget] + " on " + file + ": " +
        (changed ? "the copy differs" : "the copy is unchanged"));
  if (changed) {
    expect(!stored.ok() && stored.status().message().find(file) != std::string::npos, "C9",
           "the storage read a damaged copy of " + file + ": " +
               (stored.ok() ? std::string("accepted") : scrub(stored.status().message())));
    if (raw.ok()) expect_restore_refused(file, *raw, id);
  } else {
    expect(
        stored.ok(), "C8",
        "the storage refused an intact copy of " + file + ": " + scrub(stored.status().message()));
    SimBackend sb(range_, max_parallelism_, map_options_, false, &clock_, ttl_);
    const CheckpointInput in{file, *raw, id};
    const Status st = sb.backend->restore({&in, 1});
    expect(st.ok(), "C8", "an intact copy of " + file + " did not restore: " + st.message());
  }
  return std::move(*clean);
}

void BackendSimulation::expect_restore_refused(const std::string& file,
                                               const std::vector<std::byte>& bytes,
                                               std::uint64_t id) {
  SimBackend sb(range_, max_parallelism_, map_options_, false, &clock_, ttl_);
  const CheckpointInput in{file, bytes, id};
  const Status st = sb.backend->restore({&in, 1});
  expect(!st.ok() && st.message().rfind(file + ": ", 0) == 0, "C9",
         "a damaged copy of " + file + " restored" +
             (st.ok() ? std::string() : ", and its error does not name the file: " + st.message()));
  expect(contents(sb, "the backend of a refused restore") ==
             Store::with_states(model_.backend().kinds(), {}),
         "C4", "a refused restore of " + file + " left state behind");
}

// ---------------------------------------------------------------------------------------
// Write faults

void BackendSimulation::arm_write_fault(CheckpointRecord& rec, const Action& a, const Task& self) {
  if (disk_ == nullptr) {
    invalid(self, std::string(action_name(a)) +
                      " needs the simulated disk; this run's checkpoints are on a real file "
                      "system (COWSTATE_SIM_TMPDIR)");
  }
  const bool manifest = a.budget == 0;
  const std::string path = CheckpointStorage::temporary_path(
      manifest ? storage_->manifest_path(rec.id) : storage_->data_path(rec.id));
  const std::uint64_t skip = manifest ? 0 : a.budget - 1;
  if (a.x == 0) {
    disk_->lose_write(path, skip);
    probe("fault.lost_write");
  } else {
    disk_->misdirect_write(path, static_cast<std::uint64_t>(a.x - 1), skip);
    probe("fault.misdirected_write");
  }
  trace(self.name + " " + action_name(a) +
        (manifest ? std::string(" manifest") : " write " + std::to_string(a.budget)) +
        (a.x == 0 ? std::string() : " to " + std::to_string(a.x - 1)) + " (" +
        std::filesystem::path(path).filename().string() + ")");
}

void BackendSimulation::settle_write_faults(CheckpointRecord& rec) {
  if (disk_ == nullptr) return;
  // What `final_path` was given (the appends to its temporary file) against what it holds.
  auto damaged = [this](const std::string& final_path) {
    const std::string tmp = CheckpointStorage::temporary_path(final_path);
    std::vector<std::byte> given;
    bool faulted = false;
    for (const SimulatedFileSystem::Operation& op : disk_->history()) {
      if (op.kind != SimulatedFileSystem::Operation::Kind::append || op.path != tmp) continue;
      given.insert(given.end(), op.bytes.begin(), op.bytes.end());
      faulted = faulted || op.lost || op.misdirected >= 0;
    }
    if (!faulted) return false;
    const DiskImage image = disk_->image();
    const auto it = image.files.find(final_path);
    return it == image.files.end() || it->second != given;
  };
  rec.damaged_data = damaged(storage_->data_path(rec.id));
  rec.damaged_manifest = damaged(storage_->manifest_path(rec.id));
  if (rec.damaged()) {
    trace(rec.name + " committed, but a write fault damaged its " +
          (rec.damaged_data ? "data file" : "manifest"));
  }
}

CheckpointScan BackendSimulation::scan_expecting_faulted_damage(CheckpointStorage& storage,
                                                                const char* check,
                                                                const std::string& prefix) {
  auto found = storage.scan();
  expect(found.ok(), "storage",
         "listing the checkpoint directory: " + scrub(found.status().message()));
  for (const DamagedCheckpoint& d : found->damaged) {
    expect(d.id <= checkpoints_.size() && checkpoints_.at(d.id - 1)->damaged_manifest, check,
           prefix + "checkpoint " + std::to_string(d.id) +
               " is damaged, with no write fault to explain it: " + scrub(d.reason));
  }
  return std::move(*found);
}

void BackendSimulation::expect_damage_reported(const CheckpointRecord& rec,
                                               CheckpointStorage& storage, FileSystem& fs) {
  auto found = storage.scan();
  expect(found.ok(), "storage",
         "listing the checkpoint directory: " + scrub(found.status().message()));
  if (rec.damaged_manifest) {
    const std::string manifest =
        std::filesystem::path(storage.manifest_path(rec.id)).filename().string();
    bool listed = false;
    for (const DamagedCheckpoint& d : found->damaged) {
      listed = listed || (d.id == rec.id && d.reason.find(manifest) != std::string::npos);
    }
    // Pruning removes a damaged checkpoint older than the oldest complete one it retains
    // (C9): the oldest of the newest kRetain, although older complete ones may stay as
    // chain members of retained deltas.
    const std::vector<std::uint64_t>& complete = found->complete;
    const bool pruned =
        !complete.empty() &&
        complete[complete.size() > kRetain ? complete.size() - kRetain : 0] > rec.id;
    expect(listed || pruned, "C9",
           rec.name + "'s manifest was damaged by a write fault and scan() does not report it");
    if (!listed) return;
    const bool newest = found->complete.empty() || found->complete.back() < rec.id;
    if (!newest) return;  // a newer complete one: latest() rightly passes over it
    // latest() fails naming the newest damaged checkpoint, rec or a newer one.
    const std::string newest_damaged =
        std::filesystem::path(storage.manifest_path(found->damaged.back().id)).filename().string();
    auto latest = storage.latest();
    expect(!latest.ok() && latest.status().message().find(newest_damaged) != std::string::npos,
           "C9",
           "latest() " + (latest.ok() ? std::string("passed over") : "did not name") +
               " the damaged manifest " + newest_damaged + ", newer than every complete one" +
               (latest.ok() ? std::string() : ": " + scrub(latest.status().message())));
    return;
  }
  const std::string path = storage.data_path(rec.id);
  const std::string file = std::filesystem::path(path).filename().string();
  auto stored = storage.read(rec.id);
  expect(!stored.ok() && stored.status().message().find(file) != std::string::npos, "C9",
         "the storage read " + rec.name + "'s data file, which a write fault damaged: " +
             (stored.ok() ? std::string("accepted") : scrub(stored.status().message())));
  if (auto raw = fs.read_file(path); raw.ok()) expect_restore_refused(file, *raw, rec.id);
}

// ---------------------------------------------------------------------------------------
// The releaser

// The releaser's steps: each decides whether a checkpoint is cancelled or kept. Generated
// runs: once per checkpoint, runnable only while a decision is pending; scenario runs: what
// its lines say, each when its checkpoint has started.
void BackendSimulation::releaser_body(Task& self) {
  for (;;) {
    while (!is_runnable(self)) Fiber::yield();  // not runnable until its checkpoint starts
    const std::optional<Action> a =
        next_action(self, [this](Prng& rng) { return draw_decision(rng); });
    if (!a) return;
    CheckpointRecord& rec = *named(a->snapshot);
    begin_action(self, *a);
    if (!rec.decided) {
      rec.decided = true;
      --undecided_;
    }
    if (a->kind == ActionKind::cancel) cancel(rec, "releaser");
    end_unit(self);
    Fiber::yield();
  }
}

// Generated runs: a decision on a checkpoint not decided on yet; nullopt once there is
// none (the writer is done then, see is_runnable).
std::optional<Action> BackendSimulation::draw_decision(Prng& rng) const {
  std::vector<CheckpointRecord*> pending;
  for (const auto& r : checkpoints_) {
    if (!r->finished && !r->decided) pending.push_back(r.get());
  }
  if (pending.empty()) return std::nullopt;
  Action a;
  a.snapshot = pending[rng.below(pending.size())]->name;
  a.kind = rng.below(100) < opts_.cancel_percent ? ActionKind::cancel : ActionKind::keep;
  return a;
}

// ---------------------------------------------------------------------------------------
// The clock

// The clock's steps: each moves logical time forward. An operation reads the clock more
// than once (cleanup, then the new timestamp); the model applies it at one instant, so time
// moves between writer operations only. A serializer may be anywhere in a step (its write
// times are recorded per slice). Generated runs: until the writer is done and no
// checkpoint is in flight.
void BackendSimulation::clock_body(Task& self) {
  auto draw = [this](Prng& rng) -> std::optional<Action> {
    if (writer_done_ && in_flight() == 0) return std::nullopt;
    Action a;
    a.kind = ActionKind::advance;
    a.x = pick_advance(rng);
    return a;
  };
  while (const std::optional<Action> a = next_action(self, draw)) {
    if (writer_in_op_) {
      invalid(self,
              "the clock moves between writer operations, not while the writer is paused "
              "inside one");
    }
    begin_action(self, *a);
    const std::int64_t max = std::numeric_limits<std::int64_t>::max();
    const std::int64_t to = a->x > max - now() ? max : now() + a->x;
    clock_.set(to);
    trace("clock advance " + std::to_string(a->x) + " -> time " + std::to_string(to) +
          (at_expiry_instant() ? " (an expiry instant)" : ""));
    end_unit(self);
    Fiber::yield();
  }
}

// ---------------------------------------------------------------------------------------
// The io task

// With async_io the data files' buffers queue in the ManualIo; each io step lands the
// oldest buffer of one file (generated runs: a file drawn among those waiting, so files
// land in any order while each file's land in order), as an I/O thread would have written
// it just then. A writer with no buffer left lands its own (async_file.h).
void BackendSimulation::io_body(Task& self) {
  auto draw = [this](Prng& rng) -> std::optional<Action> {
    if (manual_io_.waiting() == 0) return std::nullopt;  // the run is over (is_runnable)
    const std::string& label = manual_io_.label(rng.below(manual_io_.waiting()));
    Action a;
    a.kind = ActionKind::land;
    for (const auto& r : checkpoints_) {
      if (CheckpointStorage::temporary_path(storage_->data_path(r->id)) == label)
        a.snapshot = r->name;
    }
    return a;
  };
  while (const std::optional<Action> a = next_action(self, draw)) {
    begin_action(self, *a);
    const std::optional<std::size_t> i = queued_file(a->snapshot);
    if (!i) invalid(self, a->snapshot + " has no queued write to land");
    const std::uint64_t before = fs_->operations();
    manual_io_.land(*i);
    trace("io land " + a->snapshot + " (operation " + std::to_string(before + 1) + ")");
    end_unit(self);
    Fiber::yield();
  }
}

std::optional<std::size_t> BackendSimulation::queued_file(const std::string& name) const {
  const CheckpointRecord* rec = named(name);
  if (rec == nullptr || storage_ == nullptr) return std::nullopt;
  const std::string label = CheckpointStorage::temporary_path(storage_->data_path(rec->id));
  for (std::size_t i = 0; i < manual_io_.waiting(); ++i) {
    if (manual_io_.label(i) == label) return i;
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------
// Checks

void BackendSimulation::after_step_checks() {
  if (!dirty_ || writer_in_op_) return;
  dirty_ = false;
  if (in_flight() == 0) {
    // C2 at the maps themselves: nothing pins a version, nothing stays retired.
    primary_->each([&](const char* name, auto& handle) {
      SimBackend::with_table(handle, [&](auto& table) {
        expect(table.release_retired_maps() == 0, "C2",
               std::string("no checkpoint is in flight, yet a spilled map of state ") + name +
                   " is still retired for a snapshot");
        for (std::int32_t g = table.range().start(); g <= table.range().end(); ++g) {
          if (table.heap_map(g) == nullptr) continue;  // spilled
          auto& m = table.map(g);
          expect(m.highest_required_version() == 0 && m.retired_count() == 0, "C2",
                 std::string("no checkpoint is in flight, yet the map of state ") + name +
                     " in key group " + std::to_string(g) + " has highest required version " +
                     std::to_string(m.highest_required_version()) + " and " +
                     std::to_string(m.retired_count()) + " retired items");
        }
      });
    });
  }
  if (opts_.deep_check_every == 0 || ++dirty_steps_ % opts_.deep_check_every != 0) return;
  ++result_.stats.deep_checks;
  std::string why;
  const bool sound = primary_->backend->check_invariants(&why);
  expect(sound, why.substr(0, why.find(':')), why);
  expect(model_.backend().check_invariants(), "model", "the backend model broke an invariant");
  const BackendImage live = contents(*primary_, "the live backend");
  compare(model_.backend().live(), live, "live", "the live backend");
  for (const auto& [name, image] : live) result_.stats.entries_checked += image.size();
  if (budgeted()) check_accounting(*primary_, "the live backend");
}

void BackendSimulation::check_expectation(const Expectation& e) {
  auto fail = [&](const std::string& message, Difference d) {
    expectation_failed(e, message, std::move(d));
  };
  if (e.kind == ExpectKind::failure) return;  // judged on the outcome of the whole run
  if (e.kind == ExpectKind::latest) {
    check_latest(e);
    return;
  }
  COWSTATE_ASSERT(e.kind == ExpectKind::image && !e.state.empty(), "REQUIRES",
                  "the parser refuses map expectations in backend files");
  const Image want(e.image.begin(), e.image.end());
  const bool sequences = has_sequence_values(e.state);
  auto image_text = [sequences](const Image& image) { return print_image(image, sequences); };
  auto differs = [&want](const Image& got, const char* who) {
    Difference d = image_difference(want, got);
    d.shape = who;
    return d;
  };
  if (e.target == "live") {
    const BackendImage live = contents(*primary_, "the live backend");
    const Image& got = live.at(e.state);
    if (got != want) {
      fail("live " + e.state + " is " + image_text(got) + ", expected " + image_text(want),
           differs(got, "in production"));
    }
    return;
  }
  const CheckpointRecord* rec = named(e.target);
  if (rec == nullptr) fail(e.target + " has not started", Difference::of("not started"));
  COWSTATE_ASSERT(e.into.empty() || e.into.last < max_parallelism_, "REQUIRES",
                  "the parser refuses key groups beyond max parallelism");
  const KeyGroupRange range = e.into.empty() ? range_ : KeyGroupRange(e.into.first, e.into.last);
  const std::string where = e.target + (e.into.empty() ? "" : " into " + range_text(e.into));
  const Image by_model = restricted(rec->committed ? rec->expected : rec->image, range).at(e.state);
  if (by_model != want) {
    fail(where + " " + e.state + " is " + image_text(by_model) + " by the model, expected " +
             image_text(want),
         differs(by_model, "by the model"));
  }
  // Failed, unfinished or damaged: the model's word is all there is.
  if (!rec->complete || rec->damaged()) return;
  auto bytes = storage_->read(rec->id);
  if (!bytes.ok()) {
    fail(e.target + " does not read back: " + scrub(bytes.status().message()),
         Difference::of("unreadable"));
  }
  StoredCheckpoint stored;
  stored.data = std::move(*bytes);
  if (const Status chained = read_chain_into(*storage_, rec->id, stored); !chained.ok()) {
    fail(e.target + "'s chain does not read back: " + scrub(chained.message()),
         Difference::of("unreadable"));
  }
  const CheckpointInput in = stored.input(rec->name, rec->id);
  const auto sb = restored({in}, range, false, where);
  const Image got = contents(*sb, where).at(e.state);
  if (got != want) {
    fail(where + " " + e.state + " restored to " + image_text(got) + ", expected " +
             image_text(want),
         differs(got, "in production"));
  }
}

// `expect latest NAME|none`. The difference says where the newest complete checkpoint is
// against the expected one: none, older or newer.
void BackendSimulation::check_latest(const Expectation& e) {
  auto latest = storage_->latest();
  if (!latest.ok()) {
    expectation_failed(e, "finding the latest checkpoint: " + scrub(latest.status().message()),
                       Difference::of("storage error"));
  }
  const CheckpointRecord* want = e.target == "none" ? nullptr : named(e.target);
  if (e.target != "none" && want == nullptr) {
    expectation_failed(e, e.target + " has not started", Difference::of("not started"));
  }
  const std::uint64_t want_id = want != nullptr ? want->id : 0;  // ids start at 1
  const std::uint64_t got_id = latest->value_or(0);
  if (got_id == want_id) return;
  const std::string shape = got_id == 0        ? "latest none"
                            : want_id == 0     ? "latest unexpected"
                            : got_id < want_id ? "latest older"
                                               : "latest newer";
  expectation_failed(e,
                     "the latest complete checkpoint is " +
                         (*latest ? checkpoints_.at(**latest - 1)->name : std::string("none")) +
                         ", expected " + e.target,
                     Difference::of(shape));
}

std::uint64_t BackendSimulation::digest() const {
  Digest d;
  for (const auto& [name, image] : model_.backend().live()) {
    d.add(name.size());
    for (const auto& [key, value] : image) {
      d.add(key.first);
      d.add(static_cast<std::uint64_t>(key.second));
      d.add(value.size());
      for (auto x : value) d.add(static_cast<std::uint64_t>(x));
    }
  }
  digest_tasks(d);
  for (const auto& r : checkpoints_) {
    d.add(r->id);
    d.add(static_cast<std::uint64_t>(r->finished) | (std::uint64_t{r->complete} << 1) |
          (std::uint64_t{r->in_step} << 2) | (std::uint64_t{accepted_cancel(*r)} << 3) |
          (std::uint64_t{r->decided} << 4) | (std::uint64_t{r->lost} << 5));
    d.add(r->writer != nullptr ? r->writer->bytes_written() : 0);
  }
  d.add(fs_ != nullptr ? fs_->operations() : 0);
  d.add(armed_at_);
  d.add(writer_done_);
  d.add(writer_in_op_);
  d.add(static_cast<std::uint64_t>(now()));
  d.add(clock_armed_);
  return d.h;
}

// What `cowstate explain` shows after a step: every map of the primary backend, every
// checkpoint's map snapshots and the image a restore of it must give.
BackendLayout BackendSimulation::layout() const {
  BackendLayout out;
  out.max_parallelism = max_parallelism_;
  out.first_key_group = range_.start();
  out.last_key_group = range_.end();
  out.ttl = ttl_.has_value();
  out.ttl_ms = ttl_ ? ttl_->ttl_ms : 0;
  out.now = now();
  for (const BackendStateInfo& info : backend_states()) {
    out.states.emplace_back(info.name);
    if (out.ttl && is_ttl_state(info.name)) out.ttl_stride[info.name] = stride(info.name);
  }
  if (primary_ != nullptr) {
    primary_->each([&out](const std::string& name, auto& handle) {
      SimBackend::with_table(handle, [&](const auto& table) {
        add_map_views(out, name, table, [](const auto& state) { return canonical(state); });
      });
    });
  }
  for (const auto& r : checkpoints_) {
    CheckpointView c;
    c.name = r->name;
    c.id = r->id;
    const BackendSnapshot* snapshot = r->snapshot ? r->snapshot.get()
                                      : r->writer ? r->writer->snapshot()
                                                  : nullptr;
    // A restart takes the writers and snapshots; what they did stays in the record.
    if (snapshot != nullptr) add_map_snapshots(c, *snapshot);
    else c.taken = r->taken;
    c.bytes_written = r->writer ? r->writer->bytes_written() : r->bytes;
    c.storage = r->lost               ? "lost at a power loss"
                : r->pruned           ? "pruned"
                : r->damaged_data     ? "data file damaged"
                : r->damaged_manifest ? "manifest damaged"
                                      : "";
    c.finished = r->finished;
    c.complete = r->complete;
    c.cancelled = r->cancelled == CancelResult::accepted;
    if (r->writer && r->writer->failed()) c.error = scrub(r->writer->status().message());
    for (const auto& [state, image] : r->finished ? r->expected : r->image) {
      for (const auto& [kn, v] : image) {
        c.image.push_back({state, kn.first, kn.second, key_group_of(kn.first), v});
      }
    }
    out.checkpoints.push_back(std::move(c));
  }
  return out;
}

}  // namespace

std::unique_ptr<SimCore> make_backend_simulation(const RunConfig& config, Strategy& strategy) {
  return std::make_unique<BackendSimulation>(config, strategy);
}

}  // namespace cowstate::sim::detail
