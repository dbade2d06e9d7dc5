// The scheduling half of a simulation, shared by the map simulation (map/simulation.cc) and the
// backend simulation (backend/simulation.cc). Internal to sim/src.
//
// A simulation is a set of tasks (fibers) on one thread. SimCore owns them and runs them,
// one scheduler step at a time (resume). It keeps the trace (every line
// hashed with FNV-1a; the whole trace or only its tail kept), records what each task did
// for to_scenario, and turns the three ways a run stops early into an Outcome:
//   CheckFailed      a checker saw a wrong result        -> failure (exit 1)
//   AssertionCaught  a production assertion fired         -> assertion (exit 3)
//   ScenarioInvalid  a scenario line cannot run as written -> invalid (exit 2)
// The workload half (a subclass) spawns the tasks, runs the checks after each step, judges
// expectations and hashes its state for exploration.
//
// The choice source: every choice of a run comes from one of two places, so that each task
// body is written once. Which task takes the next step: the strategy (drawn_pick), or a
// fixed schedule's lines (scripted_pick). What a task does in its step (keys, values,
// budgets, faults, decisions): the workload's draw from the task's own stream, or the
// task's next scenario line (next_action, follow_up). A free schedule mixes the two: the
// strategy picks, the lines decide.
//
// Thread safety: one thread; current_sim() names the simulation whose fibers are running,
// so the production yield hook can reach it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "cowstate/assert.h"
#include "cowstate/hooks.h"
#include "cowstate/sim/coverage.h"
#include "cowstate/sim/fiber.h"
#include "cowstate/sim/random.h"
#include "cowstate/sim/run.h"
#include "cowstate/sim/scenario.h"
#include "cowstate/sim/strategy.h"

namespace cowstate::sim::detail {

// A check failed: thrown inside a task, caught by the scheduler.
struct CheckFailed {
  std::string check;
  std::string message;
  int line = 0;             // scenario line of a failed expectation
  std::string expectation;  // a failed expectation as written
  Difference difference;    // how it was not met
};
// A scenario step that cannot run as written.
struct ScenarioInvalid {
  int line;
  std::string message;
};
// A production assertion fired (throw_assertion turns it into this exception).
struct AssertionCaught {
  std::string invariant;
  std::string message;
};

[[noreturn]] inline void throw_assertion(const char* expr, const char* invariant,
                                         const char* message, const char* file, int line) {
  throw AssertionCaught{invariant, std::string(message) + " (" + expr + " at " + file + ":" +
                                       std::to_string(line) + ")"};
}

inline void expect(bool ok, std::string check, const std::string& message) {
  if (!ok) throw CheckFailed{std::move(check), message, 0, {}, {}};
}

constexpr std::uint32_t kNoTask = 0xffffffffu;

// A serializer step of `budget` entries; 0 writes all that are left.
inline Action step_action(std::uint64_t budget) {
  Action a;
  a.kind = ActionKind::step;
  a.budget = static_cast<std::uint32_t>(budget);
  return a;
}

// The shape of a difference in numbers: "NAME higher" or "NAME lower" for each pair that
// differs, comma-separated.
inline std::string directions(
    std::initializer_list<std::tuple<const char*, std::uint64_t, std::uint64_t>> pairs) {
  std::string out;
  for (const auto& [name, got, want] : pairs) {
    if (got == want) continue;
    out += (out.empty() ? "" : ", ") + std::string(name) + (got > want ? " higher" : " lower");
  }
  return out;
}

enum class TaskKind : std::uint8_t { writer, serializer, releaser, clock, io };

struct Task {
  std::uint32_t id = 0;
  std::string name;         // in the trace: writer, ser1, releaser
  std::string script_name;  // in scenarios: writer, s1, releaser
  TaskKind kind = TaskKind::writer;
  std::uint32_t weight = 1;
  Prng rng{0};
  std::unique_ptr<Fiber> fiber;
  // Where the task is: steps it finished and yields taken inside the current one.
  std::uint64_t units_done = 0;
  std::uint64_t inner_yields = 0;
  const char* point = "";  // the yield point it stopped at, while inner_yields > 0
  // Scenario runs: the task's step lines (`continue` lines excluded) and the next one.
  std::vector<const StepLine*> program;
  std::size_t next_line = 0;
  const StepLine* current_line = nullptr;  // the line its current step runs
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

inline Task* find_task(const std::vector<std::unique_ptr<Task>>& tasks, const std::string& name) {
  for (const auto& t : tasks) {
    if (t->script_name == name) return t.get();
  }
  return nullptr;
}

// The options of a scenario run (WorkloadOptions or BackendWorkloadOptions) on top of `o`:
// the scenario's capacities, a deep check after every step, as many writer operations as
// it has writer lines, and a releaser task when a line names it.
template <class Options>
Options scenario_options(const Scenario& scenario, Options o) {
  const ScenarioConfig& c = scenario.config;
  o.initial_capacity = c.initial_capacity;
  o.min_capacity = c.min_capacity;
  o.max_capacity = c.max_capacity;
  o.deep_check_every = 1;
  o.ops_max = 0;
  o.cancel_percent = 0;
  for (const ScenarioItem& item : scenario.items) {
    const auto* s = std::get_if<StepLine>(&item);
    if (s == nullptr || s->action.kind == ActionKind::resume) continue;
    if (s->task == "writer") ++o.ops_max;
    if (s->task == "releaser") o.cancel_percent = 1;  // the releaser task exists
  }
  return o;
}

class SimCore {
 public:
  SimCore(const RunConfig& config, Strategy& strategy)
      : config_(config), strategy_(strategy), scenario_(config.scenario) {}
  virtual ~SimCore() = default;
  SimCore(const SimCore&) = delete;
  SimCore& operator=(const SimCore&) = delete;

  // Runs the simulation to its end.
  RunResult run();

  // Counts a hit of coverage probe `name` (COWSTATE_PROBE, a workload's own events, a yield
  // point taken). Traces nothing and draws nothing. REQUIRES: a name of the catalog (T4).
  void probe(std::string_view name) {
    const std::optional<std::size_t> i = coverage_index(name);
    COWSTATE_ASSERT(i.has_value(), "T4", "a coverage probe missing from the catalog");
    ++result_.stats.coverage.hits[*i];
  }

  // Called at every COWSTATE_YIELD point inside production code (all in headers, compiled
  // into the simulator's own code, so a seed's trace is the same in every build) and at the
  // workloads' own points.
  void on_yield(const char* point) {
    if (!Fiber::in_fiber() || running_ == nullptr || !yields_enabled_) return;
    probe(point);
    ++result_.stats.yields;
    ++running_->inner_yields;
    running_->point = point;
    trace(running_->name + " yield " + point);
    Fiber::yield();
  }

 protected:
  // --- the workload's part ---
  // Traces the header line, calls strategy_.begin_run and spawns the first tasks.
  virtual void start() = 0;
  virtual bool is_runnable(const Task& t) const = 0;
  // After every scheduler step (and once more after a scenario's last one).
  virtual void after_step_checks() = 0;
  // After a step of t: the checks, and what observers see.
  virtual void after_resume(Task& t, const StepRecord& rec) = 0;
  virtual void check_expectation(const Expectation& e) = 0;
  // Everything that decides the rest of the run, hashed (for exploration dedup).
  virtual std::uint64_t digest() const = 0;
  // A production assertion fired: the structures it guarded may be broken.
  virtual void on_assertion() {}
  // After a run whose steps all passed (expectations included): checks that need the whole
  // run, such as RunConfig::crash_states_max.
  virtual void after_run() {}

  // --- tasks ---
  Task& spawn(std::string name, std::string script_name, TaskKind kind, std::uint32_t weight,
              std::function<void()> body) {
    auto t = std::make_unique<Task>();
    t->id = static_cast<std::uint32_t>(tasks_.size());
    t->name = std::move(name);
    t->script_name = std::move(script_name);
    t->kind = kind;
    t->weight = weight;
    t->rng = Prng(derive_seed(config_.seed, 1000 + t->id));
    t->fiber = std::make_unique<Fiber>(std::move(body));
    if (scenario_ != nullptr) {
      for (const ScenarioItem& item : scenario_->items) {
        const auto* s = std::get_if<StepLine>(&item);
        if (s != nullptr && s->task == t->script_name && s->action.kind != ActionKind::resume) {
          t->program.push_back(s);
        }
      }
    }
    if (config_.record) result_.tasks.push_back(TaskRecord{t->script_name, {}});
    tasks_.push_back(std::move(t));
    return *tasks_.back();
  }
  // The task's next scenario line (nullptr past its last one, or in generated runs).
  const StepLine* take_line(Task& t) {
    if (scenario_ == nullptr || t.next_line >= t.program.size()) return nullptr;
    t.current_line = t.program[t.next_line++];
    return t.current_line;
  }
  // The one source of a task's next action, so that every task body is written once for
  // both kinds of run. A scenario run reads it: the task's next line, nullopt past its
  // last. A generated run draws it: draw(t.rng), which returns nullopt when the task has
  // nothing left to do. Every key, value, budget, fault and decision comes through here.
  template <class Draw>
  std::optional<Action> next_action(Task& t, Draw&& draw) {
    if (scenario_ != nullptr) {
      const StepLine* line = take_line(t);
      if (line == nullptr) return std::nullopt;
      return line->action;
    }
    return draw(t.rng);
  }
  // A second action a generated step may take after its first, from draw(t.rng); none in a
  // scenario run, where every action is a line (and a step) of its own.
  template <class Draw>
  std::optional<Action> follow_up(Task& t, Draw&& draw) {
    if (scenario_ != nullptr) return std::nullopt;
    return draw(t.rng);
  }
  void begin_action(Task& t, const Action& a) {
    if (config_.record) result_.tasks[t.id].actions.push_back(a);
  }
  // Ends the task's current step (before its Fiber::yield).
  static void end_unit(Task& t) {
    ++t.units_done;
    t.inner_yields = 0;
    t.point = "";
  }
  // Expectation `e` is not met: `message` says what was found, `d` how it differs.
  [[noreturn]] void expectation_failed(const Expectation& e, const std::string& message,
                                       Difference d) const {
    throw CheckFailed{"expect", scenario_->file + ":" + std::to_string(e.line) + ": " + message,
                      e.line, print_expectation(e, config_.which()), std::move(d)};
  }
  [[noreturn]] void invalid(const Task& t, const std::string& message) {
    throw ScenarioInvalid{t.current_line != nullptr ? t.current_line->line : 0, message};
  }

  void trace(const std::string& line) {
    const std::string full = std::to_string(result_.stats.steps) + " " + line;
    for (const char c : full) {
      hash_ ^= static_cast<std::uint8_t>(c);
      hash_ *= 0x100000001b3ULL;
    }
    hash_ ^= static_cast<unsigned char>('\n');
    hash_ *= 0x100000001b3ULL;
    if (config_.on_step) step_trace_.push_back(full);
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

  // A run stopped between two steps may have left the writer inside an operation: lets it
  // finish that operation (nothing else runs) so the structures it writes are whole again.
  void finish_writer_op() {
    if (!writer_in_op_ || tasks_.empty()) return;
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

  // The writer task's body: `ops` steps, each next_action() with generate(rng) as the draw,
  // run by execute(action) with writer_in_op_ set around it, then after().
  template <class Generate, class Execute, class After>
  void writer_loop(std::uint32_t ops, Generate&& generate, Execute&& execute, After&& after) {
    Task& self = *tasks_[0];
    for (std::uint32_t i = 0; i < ops; ++i) {
      const std::optional<Action> next =
          next_action(self, [&](Prng& rng) { return std::optional<Action>(generate(rng)); });
      COWSTATE_ASSERT(next.has_value(), "T2", "a scenario run's ops_max counts its writer lines");
      const Action& action = *next;
      begin_action(self, action);
      writer_in_op_ = true;
      try {
        execute(action);
      } catch (const CheckFailed&) {
        writer_in_op_ = false;  // checks run after the production call returned: it is whole
        throw;
      } catch (const ScenarioInvalid&) {
        writer_in_op_ = false;  // found before or after the production call, never inside
        throw;
      }
      writer_in_op_ = false;
      after();
      ++result_.stats.ops;
      end_unit(self);
      Fiber::yield();
    }
    writer_done_ = true;
  }

  // What observers see of the step of t that just ended (no map layout).
  StepView step_view(const Task& t, const StepRecord& rec) const {
    StepView v;
    v.step = result_.stats.steps;
    v.task = t.script_name;
    if (t.current_line != nullptr) v.source_line = t.current_line->line;
    if (rec.resumed) {
      v.action = "continue";
    } else if (t.current_line != nullptr) {
      v.action = print_action(*t.current_line, config_.which());
    }
    v.paused_at = rec.paused_at;
    v.trace = step_trace_;
    return v;
  }

  // Adds where every task is (and its random stream) to an exploration digest.
  void digest_tasks(Digest& d) const {
    for (const auto& t : tasks_) {
      d.add(t->fiber->finished());
      d.add(t->units_done);
      d.add(t->inner_yields);
      for (int w = 0; w < 4; ++w) d.add(t->rng.state()[w]);
    }
  }

  // --- scheduling ---
  void resume(Task& t);  // one scheduler step of t, with its bookkeeping and checks
  void run_caught();     // run_to_end(), a thrown check or assertion becoming the result
  void run_to_end();
  void apply_expected_failure();  // `expect failure CHECK`
  // The scheduler's picks, from the choice source: drawn (the strategy) or scripted (a
  // fixed schedule's lines); kNoTask ends the run.
  void run_schedule();
  std::uint32_t drawn_pick(std::uint32_t last);
  std::uint32_t scripted_pick();
  void bound_check(int line) const;  // throws CheckFailed at the step bound
  bool fixed_schedule() const { return scenario_ != nullptr && scenario_->config.fixed_schedule; }

  RunConfig config_;
  Strategy& strategy_;
  const Scenario* scenario_;
  std::vector<std::unique_ptr<Task>> tasks_;
  std::vector<TaskView> runnable_;  // drawn_pick's buffer
  // A fixed schedule's place: the next scenario item, the line being run and by whom.
  std::size_t next_item_ = 0;
  const StepLine* line_ = nullptr;
  const Task* line_task_ = nullptr;
  std::uint64_t line_units_ = 0;
  Task* running_ = nullptr;
  bool writer_done_ = false;
  bool writer_in_op_ = false;
  bool yields_enabled_ = true;  // off while a task runs a check that calls production code
  std::uint64_t step_bound_ = 0;
  std::uint64_t hash_ = 0xcbf29ce484222325ULL;
  std::vector<std::string> tail_;
  std::size_t tail_next_ = 0;
  std::vector<std::string> step_trace_;  // trace lines of the current step, for on_step
  RunResult result_;
};

// The simulation whose fibers are executing (one thread), for the yield hook.
inline SimCore*& current_sim() {
  static SimCore* sim = nullptr;
  return sim;
}

// While one lives, yield points and probes reach no simulation: for work a check does beside
// the schedule, which must neither yield nor count toward coverage.
class BesideSchedule {
 public:
  BesideSchedule() noexcept : saved_(std::exchange(current_sim(), nullptr)) {}
  ~BesideSchedule() { current_sim() = saved_; }
  BesideSchedule(const BesideSchedule&) = delete;
  BesideSchedule& operator=(const BesideSchedule&) = delete;

 private:
  SimCore* saved_;
};

// Runs `sim` with production assertions turned into AssertionCaught and the yield hook
// pointing at it; destroys it before restoring the previous assertion handler.
RunResult run_simulation(std::unique_ptr<SimCore> sim);

}  // namespace cowstate::sim::detail
