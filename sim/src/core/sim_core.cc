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

void SimCore::run_strategy() {
  std::uint32_t last = kNoTask;
  std::vector<TaskView> runnable;
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
    resume(t);
    last = id;
  }
}

// A fixed schedule: each step line runs its task until the step ends or, with `pause at`,
// until the task reaches that yield point; yields at other points pass through.
void SimCore::run_fixed() {
  for (const ScenarioItem& item : scenario_->items) {
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
    const std::uint64_t units = t->units_done;
    for (;;) {
      if (result_.stats.steps >= step_bound_) {
        throw CheckFailed{
            "steps", "step bound " + std::to_string(step_bound_) + " hit", line.line, {}, {}};
      }
      resume(*t);
      const bool ended = t->fiber->finished() || t->units_done != units;
      if (ended) {
        if (!line.pause.empty()) {
          throw ScenarioInvalid{
              line.line, line.task + "'s step ended without reaching yield point " + line.pause};
        }
        break;
      }
      if (!line.pause.empty() && line.pause == t->point) break;
    }
  }
}

void SimCore::finish_tasks() {
  for (;;) {
    Task* next = nullptr;
    for (auto& t : tasks_) {
      if (is_runnable(*t)) {
        next = t.get();
        break;
      }
    }
    if (next == nullptr) break;
    if (result_.stats.steps >= step_bound_) {
      throw CheckFailed{"steps", "step bound " + std::to_string(step_bound_) + " hit", 0, {}, {}};
    }
    resume(*next);
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
  if (scenario_ != nullptr && scenario_->config.fixed_schedule) {
    run_fixed();
    finish_tasks();
  } else {
    run_strategy();
  }
  if (scenario_ == nullptr || result_.outcome != Outcome::pass || result_.abandoned) return;
  after_step_checks();
  if (!scenario_->config.fixed_schedule) {
    for (const ScenarioItem& item : scenario_->items) {
      if (const auto* e = expectation_of(item)) check_expectation(*e);
    }
  }
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
      result_.expectation = print_expectation(*e);
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
  if (scenario != nullptr) {
    const Workload* w = find_workload(scenario->config.workload.str());
    COWSTATE_ASSERT(w != nullptr, "REQUIRES", "a scenario names a registered workload");
    return *w;
  }
  COWSTATE_ASSERT(workload != nullptr && options != nullptr, "REQUIRES",
                  "a generated run has a workload and its options");
  return *workload;
}

RunResult run_once(const RunConfig& config, Strategy& strategy) {
  return detail::run_simulation(config.which().make_simulation(config, strategy));
}

}  // namespace cowstate::sim
