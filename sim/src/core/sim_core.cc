// The scheduling half of a simulation; see sim_core.h.
#include "core/sim_core.h"

#include "cowstate/sim/workload.h"

namespace cowstate::sim::detail {

void SimCore::resume(Task& t) {
  StepRecord rec;
  rec.task = t.id;
  rec.resumed = t.inner_yields > 0;
  if (config_.record)
    rec.first_action = static_cast<std::uint32_t>(result_.tasks[t.id].actions.size());
  result_.schedule.push_back(t.id);
  step_trace_.clear();
  running_ = &t;
  // The step is recorded even when a check inside it throws: a failing run's last step
  // belongs to the scenario that reproduces it.
  // A step that threw stopped at its check, not at a yield point: it records no pause.
  auto finish_record = [this, &t, &rec](bool threw) {
    running_ = nullptr;
    ++result_.stats.steps;
    if (t.inner_yields > 0 && !threw) rec.paused_at = t.point;
    if (config_.record) {
      rec.end_action = static_cast<std::uint32_t>(result_.tasks[t.id].actions.size());
      result_.steps.push_back(rec);
    }
  };
  try {
    t.fiber->resume();
  } catch (...) {
    finish_record(true);
    throw;
  }
  finish_record(false);
  after_resume(t, rec);
}

// The scheduler's loop: the choice source names the task of every step.
void SimCore::run_schedule() {
  std::uint32_t last = kNoTask;
  for (;;) {
    const std::uint32_t id = fixed_schedule() ? scripted_pick() : drawn_pick(last);
    if (id == kNoTask) return;
    resume(*tasks_.at(id));
    last = id;
  }
}

// Generated runs and free schedules: the strategy picks among the runnable tasks. kNoTask
// once every task has finished, or when the run stops early (stuck, step bound, a state
// already explored).
std::uint32_t SimCore::drawn_pick(std::uint32_t last) {
  std::vector<TaskView>& runnable = runnable_;
  runnable.clear();
  bool unfinished = false;
  for (auto& t : tasks_) {
    unfinished = unfinished || !t->fiber->finished();
    if (is_runnable(*t)) runnable.push_back(TaskView{t->id, t->weight});
  }
  if (runnable.empty()) {
    if (unfinished) {
      result_.outcome = Outcome::stuck;
      result_.check = "deadlock";
      result_.message = "unfinished tasks but none runnable";
    }
    return kNoTask;
  }
  if (result_.stats.steps >= step_bound_) {
    result_.outcome = Outcome::stuck;
    result_.check = "steps";
    result_.message = "step bound " + std::to_string(step_bound_) + " hit";
    return kNoTask;
  }
  if (strategy_.wants_digest() && !strategy_.on_state(digest())) {
    result_.abandoned = true;
    trace("abandoned: state already explored");
    return kNoTask;
  }
  const std::uint32_t id = strategy_.pick(runnable, last, result_.stats.steps);
  COWSTATE_ASSERT(!tasks_.at(id)->fiber->finished(), "T2", "strategy picked a finished task");
  return id;
}

// A fixed schedule: each step line runs its task until the step ends or, with `pause at`,
// until the task reaches that yield point; yields at other points pass through.
// Expectations are checked where they stand. Past the last line, every unfinished task runs
// to its end, lowest id first. kNoTask when all have finished.
std::uint32_t SimCore::scripted_pick() {
  if (line_ != nullptr) {
    const Task& t = *line_task_;
    const bool ended = t.fiber->finished() || t.units_done != line_units_;
    if (ended && !line_->pause.empty()) {
      throw ScenarioInvalid{
          line_->line, line_->task + "'s step ended without reaching yield point " + line_->pause};
    }
    if (!ended && (line_->pause.empty() || line_->pause != t.point)) {
      bound_check(line_->line);
      return t.id;
    }
    line_ = nullptr;
  }
  while (next_item_ < scenario_->items.size()) {
    const ScenarioItem& item = scenario_->items[next_item_++];
    if (const auto* e = expectation_of(item)) {
      check_expectation(*e);
      continue;
    }
    const StepLine& line = std::get<StepLine>(item);
    Task* t = find_task(tasks_, line.task);
    if (t == nullptr || t->fiber->finished()) {
      const bool serializer = line.task != "writer" && line.task != "releaser";
      throw ScenarioInvalid{line.line, line.task + (serializer ? "'s serializer" : "") +
                                           " has finished; it has no step left to run"};
    }
    const bool resuming = line.action.kind == ActionKind::resume;
    COWSTATE_ASSERT(resuming == (t->inner_yields > 0), "T2",
                    "the parser lets `continue` follow exactly the paused lines");
    line_ = &line;
    line_task_ = t;
    line_units_ = t->units_done;
    bound_check(line.line);
    return t->id;
  }
  for (auto& t : tasks_) {
    if (is_runnable(*t)) {
      bound_check(0);
      return t->id;
    }
  }
  for (auto& t : tasks_) {
    if (!t->fiber->finished()) {
      throw CheckFailed{"deadlock",
                        t->script_name +
                            " cannot finish: it waits for a snapshot "
                            "that never starts",
                        0,
                        {},
                        {}};
    }
  }
  return kNoTask;
}

void SimCore::bound_check(int line) const {
  if (result_.stats.steps >= step_bound_) {
    throw CheckFailed{"steps", "step bound " + std::to_string(step_bound_) + " hit", line, {}, {}};
  }
}

RunResult SimCore::run() {
  run_caught();
  running_ = nullptr;
  if (scenario_ != nullptr && !result_.abandoned && result_.outcome != Outcome::invalid) {
    apply_expected_failure();
  }
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

void SimCore::run_caught() {
  try {
    run_to_end();
  } catch (const CheckFailed& f) {
    result_.outcome = Outcome::failure;
    result_.check = f.check;
    result_.message = f.message;
    result_.failed_line = f.line;
    result_.expectation = f.expectation;
    result_.difference = f.difference;
  } catch (const AssertionCaught& a) {
    on_assertion();
    result_.outcome = Outcome::assertion;
    result_.check = a.invariant;
    result_.message = a.message;
  } catch (const ScenarioInvalid& s) {
    // A scenario that cannot run as written, or (generated runs) a setup that failed.
    result_.outcome = Outcome::invalid;
    if (scenario_ != nullptr) {
      result_.check = "scenario";
      result_.message = scenario_->file + ":" + std::to_string(s.line) + ": " + s.message;
    } else {
      result_.check = "setup";
      result_.message = s.message;
    }
    result_.failed_line = s.line;
  }
}

void SimCore::run_to_end() {
  start();
  run_schedule();
  if (result_.outcome != Outcome::pass || result_.abandoned) return;
  if (scenario_ != nullptr) {
    after_step_checks();
    if (!fixed_schedule()) {
      for (const ScenarioItem& item : scenario_->items) {
        if (const auto* e = expectation_of(item)) check_expectation(*e);
      }
    }
  }
  after_run();
}

void SimCore::apply_expected_failure() {
  // `expect failure CHECK`: the run passes exactly when it fails at CHECK.
  for (const ScenarioItem& item : scenario_->items) {
    const auto* e = expectation_of(item);
    if (e == nullptr || e->kind != ExpectKind::failure) continue;
    if (result_.outcome != Outcome::pass && result_.check == e->target) {
      trace("expected failure " + e->target + ": " + result_.message);
      result_.outcome = Outcome::pass;
      result_.check.clear();
      result_.message.clear();
      result_.expectation.clear();
      result_.difference = {};
      result_.failed_line = 0;
    } else if (result_.outcome == Outcome::pass) {
      result_.outcome = Outcome::failure;
      result_.check = "expect";
      result_.message = scenario_->file + ":" + std::to_string(e->line) +
                        ": expected the run to fail check " + e->target + ", it passed";
      result_.failed_line = e->line;
      result_.expectation = print_expectation(*e, config_.which());
      result_.difference.shape = "passed";
    }
    return;
  }
}

RunResult run_simulation(std::unique_ptr<SimCore> sim) {
  AssertHandler previous = set_assert_handler(&throw_assertion);
#if defined(COWSTATE_SIM_HOOKS) && COWSTATE_SIM_HOOKS
  hooks::yield_fn() = [](const char* point) {
    if (current_sim() != nullptr) current_sim()->on_yield(point);
  };
  hooks::probe_fn() = [](const char* name) {
    if (current_sim() != nullptr) current_sim()->probe(name);
  };
#endif
  current_sim() = sim.get();
  RunResult result = sim->run();
  current_sim() = nullptr;
  sim.reset();
  set_assert_handler(previous);
  return result;
}

}  // namespace cowstate::sim::detail

namespace cowstate::sim {

const Workload& RunConfig::which() const {
  if (scenario != nullptr) return workload_of(*scenario);
  COWSTATE_ASSERT(workload != nullptr && options != nullptr, "REQUIRES",
                  "a generated run has a workload and its options");
  return *workload;
}

RunResult run_once(const RunConfig& config, Strategy& strategy) {
  return detail::run_simulation(config.which().make_simulation(config, strategy));
}

}  // namespace cowstate::sim
