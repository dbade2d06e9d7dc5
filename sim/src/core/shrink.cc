// Recorded runs to scenarios, and the scenario shrinker; see shrink.h.
#include "cowstate/sim/shrink.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <map>
#include <set>

#include "cowstate/assert.h"
#include "cowstate/sim/campaign.h"

namespace cowstate::sim {

RunResult run_scenario(const Scenario& scenario, bool keep_trace,
                       std::function<void(const StepView&)> on_step,
                       std::uint64_t crash_states_max) {
  RunConfig config;
  config.crash_states_max = crash_states_max;
  config.seed = scenario.config.seed;
  config.scenario = &scenario;
  config.keep_trace = keep_trace;
  config.on_step = std::move(on_step);
  std::unique_ptr<Strategy> strategy =
      make_strategy(scenario.config.strategy, scenario.config.pct_depth,
                    static_cast<std::uint32_t>(scenario.step_count()));
  COWSTATE_ASSERT(strategy != nullptr, "REQUIRES", "the parser accepts known strategies only");
  return run_once(config, *strategy);
}

std::optional<Scenario> to_scenario(const RunConfig& config, const RunResult& recorded) {
  if (recorded.tasks.empty()) return std::nullopt;  // setup failed before the first task
  Scenario s;
  if (config.scenario != nullptr) {
    s.config = config.scenario->config;
    s.kills = config.scenario->kills;
  } else {
    config.workload->write_config(*config.options, &s.config);
  }
  s.config.fixed_schedule = true;
  for (const StepRecord& step : recorded.steps) {
    const TaskRecord& task = recorded.tasks.at(step.task);
    std::vector<StepLine> lines;
    if (step.resumed) {
      StepLine l;
      l.task = task.name;
      l.action.kind = ActionKind::resume;
      lines.push_back(l);
    }
    for (std::uint32_t a = step.first_action; a < step.end_action; ++a) {
      StepLine l;
      l.task = task.name;
      l.action = task.actions.at(a);
      lines.push_back(l);
    }
    if (lines.empty()) continue;  // a task ending, or an idle releaser: nothing to say
    lines.back().pause = step.paused_at;
    for (StepLine& l : lines) s.items.emplace_back(std::move(l));
  }
  // Expectations that the original scenario states are kept, at the end (they are about
  // the whole run; a fixed copy checks them after its last step).
  if (config.scenario != nullptr) {
    for (const ScenarioItem& item : config.scenario->items) {
      const auto* e = expectation_of(item);
      if (e != nullptr && e->kind != ExpectKind::copied) s.items.emplace_back(*e);
    }
  }
  return s;
}

namespace {

using Clock = std::chrono::steady_clock;

// What the workload says of a step line's writer action; nothing for other tasks' lines.
Workload::WriterActionTraits traits_of(const Workload& w, const StepLine& l) {
  if (l.task != "writer" || l.action.kind == ActionKind::resume) return {};
  return w.writer_action_traits(l.action);
}

// Lines that start a task named after their action's `snapshot` (a serializer).
bool starts_task(const Workload& w, const StepLine& l) {
  return traits_of(w, l).starts_task != nullptr;
}

// A step line with the `continue` lines that finish it: the unit the shrinker deletes.
struct Group {
  std::vector<std::size_t> items;  // indices into Scenario::items
};

std::vector<Group> groups_of(const Scenario& s) {
  std::vector<Group> out;
  std::map<std::string, std::size_t> open;  // paused task -> its group
  for (std::size_t i = 0; i < s.items.size(); ++i) {
    const auto* line = std::get_if<StepLine>(&s.items[i]);
    if (line == nullptr) continue;
    if (line->action.kind == ActionKind::resume) {
      auto it = open.find(line->task);
      if (it != open.end()) out[it->second].items.push_back(i);
      if (line->pause.empty() && it != open.end()) open.erase(it);
      continue;
    }
    out.push_back(Group{{i}});
    if (!line->pause.empty()) open[line->task] = out.size() - 1;
  }
  return out;
}

Scenario without(const Scenario& s, const std::set<std::size_t>& drop) {
  Scenario out;
  out.config = s.config;
  out.kills = s.kills;
  out.file = s.file;
  for (std::size_t i = 0; i < s.items.size(); ++i) {
    if (!drop.count(i)) out.items.push_back(s.items[i]);
  }
  return out;
}

// The rules the parser enforces, for candidates the shrinker builds: at least one step,
// names used after their snapshot starts, `continue` exactly after a paused step of the same
// task.
bool well_formed(const Scenario& s) {
  if (s.step_count() == 0) return false;
  const Workload& w = workload_of(s);
  std::set<std::string> started;
  std::map<std::string, bool> paused;
  for (const ScenarioItem& item : s.items) {
    if (const auto* e = expectation_of(item)) {
      if (e->kind == ExpectKind::image && e->target != "live" && !started.count(e->target)) {
        return false;
      }
      continue;
    }
    const StepLine& l = std::get<StepLine>(item);
    if (l.task != "writer" && l.task != "releaser" && l.task != "clock" && l.task != "io" &&
        !started.count(l.task)) {
      return false;
    }
    const ActionKind k = l.action.kind;
    if ((k == ActionKind::cancel || k == ActionKind::keep || k == ActionKind::release ||
         k == ActionKind::land || traits_of(w, l).names_task) &&
        !started.count(l.action.snapshot)) {
      return false;
    }
    if ((k == ActionKind::resume) != paused[l.task]) return false;
    paused[l.task] = !l.pause.empty();
    if (starts_task(w, l)) {
      if (started.count(l.action.snapshot)) return false;
      started.insert(l.action.snapshot);
    }
  }
  return true;
}

// How big a scenario is, for accepting only candidates that are smaller (so passes cannot
// cycle): steps first, then preemptions, then data.
std::uint64_t cost(const Scenario& s) {
  auto mag = [](std::int64_t v) {
    return v < 0 ? static_cast<std::uint64_t>(-(v + 1)) + 1 : static_cast<std::uint64_t>(v);
  };
  const Workload& w = workload_of(s);
  std::uint64_t steps = 0, pauses = 0, data = 0, expectations = 0;
  for (const ScenarioItem& item : s.items) {
    const auto* l = std::get_if<StepLine>(&item);
    if (l == nullptr) {
      ++expectations;
      continue;
    }
    ++steps;
    pauses += l->pause.empty() ? 0U : 1U;
    const Action& a = l->action;
    data += 64 * a.value.size() + mag(a.x) + a.entry.first + mag(a.entry.second) + a.budget +
            a.extras.get().salt + static_cast<std::uint64_t>(a.mutation) + traits_of(w, *l).weight;
    for (std::int64_t v : a.value) data += mag(v);
  }
  // A smaller table, the default hash or a backend feature fewer is simpler (config weighs
  // less than a step).
  const ScenarioConfig& c = s.config;
  const ScenarioConfig plain;
  const std::uint64_t backend_features =
      (c.ttl_ms != plain.ttl_ms ? 1U : 0U) + (c.ttl_read_refresh ? 1U : 0U) +
      (c.ttl_return_expired ? 1U : 0U) + (c.ttl_cleanup != plain.ttl_cleanup ? 1U : 0U) +
      (c.ttl_key_switch ? 1U : 0U) + (c.ttl_full_snapshot ? 1U : 0U) + (c.async_io ? 1U : 0U) +
      (c.io_buffer_bytes != plain.io_buffer_bytes ? 1U : 0U) + (c.budget_bytes != 0 ? 1U : 0U) +
      (c.spill_check != plain.spill_check ? 1U : 0U) +
      (c.cold_cache_percent != plain.cold_cache_percent ? 1U : 0U) +
      (c.incremental != plain.incremental ? 1U : 0U);
  const std::uint64_t config = std::bit_width(c.max_capacity) + std::bit_width(c.initial_capacity) +
                               std::bit_width(c.min_capacity) + (c.identity_hash ? 1U : 0U) +
                               (c.track_changes ? 1U : 0U) +
                               backend_features;
  // A smaller memory budget is smaller data: the manager spills after fewer writes, which
  // the other passes may then drop.
  data += static_cast<std::uint64_t>(std::bit_width(c.budget_bytes) + std::bit_width(c.spill_check));
  return (steps << 40) + (std::min<std::uint64_t>(expectations, 15) << 36) + (pauses << 32) +
         (config << 26) + std::min<std::uint64_t>(data, (std::uint64_t{1} << 26) - 1);
}

// The same scenario with its snapshots named s1, s2, ... (checkpoints c1, c2, ...) in
// start order.
Scenario renamed_snapshots(const Scenario& s) {
  const Workload& w = workload_of(s);
  std::map<std::string, std::string> names;
  for (const ScenarioItem& item : s.items) {
    const auto* l = std::get_if<StepLine>(&item);
    const char* prefix = l != nullptr ? traits_of(w, *l).starts_task : nullptr;
    if (prefix != nullptr) {
      names.emplace(l->action.snapshot, prefix + std::to_string(names.size() + 1));
    }
  }
  Scenario out = s;
  auto rename = [&names](Name& name) {
    auto it = names.find(name);
    if (it != names.end()) name = it->second;
  };
  for (ScenarioItem& item : out.items) {
    if (auto* l = std::get_if<StepLine>(&item)) {
      rename(l->task);
      rename(l->action.snapshot);
    } else {
      rename(expectation_of(item)->target);
    }
  }
  return out;
}

class Shrinker {
 public:
  Shrinker(FailureSignature failure, const ShrinkOptions& options)
      : failure_(std::move(failure)), options_(options), start_(Clock::now()) {}

  bool out_of_budget() const { return !limit_reached().empty(); }

  // The ShrinkOptions limit reached, "runs" or "seconds"; "" while neither is.
  std::string limit_reached() const {
    if (runs_ >= options_.max_runs) return "runs";
    if (std::chrono::duration<double>(Clock::now() - start_).count() >= options_.max_seconds)
      return "seconds";
    return "";
  }

  // Runs the candidate; true (and it becomes the best) when it fails the same way, with the
  // difference `renamed` when the candidate renamed keys (the current one otherwise).
  bool try_candidate(const Scenario& candidate, const Difference* renamed = nullptr) {
    if (cost(candidate) >= cost(best_)) return false;
    return keep_if_same_failure(candidate, renamed != nullptr ? *renamed : failure_.difference);
  }

  // Runs the candidate, simpler or not; true (and it becomes the best) when it fails the
  // same way, with difference `want`.
  bool keep_if_same_failure(const Scenario& candidate, const Difference& want) {
    if (out_of_budget() || !well_formed(candidate)) return false;
    ++runs_;
    RunResult r = run_scenario(candidate);
    if (!same_failure(r, want)) return false;
    best_ = candidate;
    best_result_ = std::move(r);
    failure_.difference = want;
    return true;
  }

  bool drop_snapshots() {
    bool progress = false;
    for (bool again = true; again && !out_of_budget();) {
      again = false;
      std::vector<std::string> names;
      for (const ScenarioItem& item : best_.items) {
        const auto* l = std::get_if<StepLine>(&item);
        if (l != nullptr && starts_task(*workload_, *l)) names.push_back(l->action.snapshot);
      }
      for (const std::string& name : names) {
        std::set<std::size_t> drop;
        for (std::size_t i = 0; i < best_.items.size(); ++i) {
          const ScenarioItem& item = best_.items[i];
          if (const auto* l = std::get_if<StepLine>(&item)) {
            if (l->task == name || l->action.snapshot == name) drop.insert(i);
          } else if (expectation_of(item)->target == name) {
            drop.insert(i);
          }
        }
        if (try_candidate(without(best_, drop))) {
          progress = again = true;
          break;
        }
      }
    }
    return progress;
  }

  bool drop_groups() {
    bool progress = false;
    std::size_t chunk = std::max<std::size_t>(1, groups_of(best_).size() / 2);
    while (!out_of_budget()) {
      std::vector<Group> groups = groups_of(best_);
      bool removed = false;
      // From the end: later steps depend on earlier ones more often than the reverse. A
      // removal leaves the groups before it where they were, so the sweep goes on from it.
      for (std::size_t end = groups.size(); end > 0 && !out_of_budget();) {
        const std::size_t begin = end >= chunk ? end - chunk : 0;
        std::set<std::size_t> drop;
        for (std::size_t g = begin; g < end; ++g)
          drop.insert(groups[g].items.begin(), groups[g].items.end());
        if (try_candidate(without(best_, drop))) {
          removed = progress = true;
          groups = groups_of(best_);  // the `continue` lines of earlier groups moved up
        }
        end = begin;
      }
      if (removed) continue;  // another sweep at the same chunk size
      if (chunk == 1) break;
      chunk /= 2;
    }
    return progress;
  }

  // The lines of task `task` after line `i`.
  std::set<std::size_t> later_lines(std::size_t i, const Name& task) const {
    std::set<std::size_t> out;
    for (std::size_t j = i + 1; j < best_.items.size(); ++j) {
      const auto* later = std::get_if<StepLine>(&best_.items[j]);
      if (later != nullptr && later->task == task) out.insert(j);
    }
    return out;
  }

  // Step line `i` of a task made a step of all that is left, in place of the task's
  // remaining lines (dropping one of a task's steps alone leaves its last stepping a
  // finished task).
  bool finish_task_at(std::size_t i) {
    const auto& l = std::get<StepLine>(best_.items[i]);
    Scenario c = best_;
    auto& first = std::get<StepLine>(c.items[i]);
    first.action.budget = 0;
    first.pause = Name();
    return try_candidate(without(c, later_lines(i, l.task)));
  }

  static bool partial_step(const ScenarioItem& item) {
    const auto* l = std::get_if<StepLine>(&item);
    return l != nullptr && l->action.kind == ActionKind::step && l->action.budget != 0;
  }

  // Each task's first step made one of all it has to do: one run per task.
  bool finish_tasks() {
    bool progress = false;
    std::set<Name> tried;
    for (std::size_t i = 0; i < best_.items.size() && !out_of_budget(); ++i) {
      if (!partial_step(best_.items[i])) continue;
      if (!tried.insert(std::get<StepLine>(best_.items[i]).task).second) continue;
      progress = finish_task_at(i) || progress;
    }
    return progress;
  }

  // Fewer, larger steps of a task: at each of its steps, all that is left, or one step of
  // two in place of the step and the task's next. A run or two per step line.
  bool merge_task_steps() {
    bool progress = false;
    for (std::size_t i = 0; i < best_.items.size() && !out_of_budget(); ++i) {
      while (partial_step(best_.items[i]) && !out_of_budget() && merge_at(i)) progress = true;
    }
    return progress;
  }

  // merge_task_steps at step line `i`: true when a candidate was kept.
  bool merge_at(std::size_t i) {
    if (finish_task_at(i)) return true;
    const auto& l = std::get<StepLine>(best_.items[i]);
    const std::set<std::size_t> rest = later_lines(i, l.task);
    if (rest.empty() || !l.pause.empty()) return false;
    const auto& next = std::get<StepLine>(best_.items[*rest.begin()]);
    if (next.action.kind != ActionKind::step || next.action.budget == 0) return false;
    Scenario c = best_;
    auto& merged = std::get<StepLine>(c.items[i]);
    merged.action.budget += next.action.budget;
    merged.pause = next.pause;
    return try_candidate(without(c, {*rest.begin()}));
  }

  // A power loss counts its crash point back from the last disk operation (`after=now-K`),
  // so dropping a step after the crash point moves it; tries each group shortly before a
  // power loss dropped with the crash point moved back by 1 to K operations.
  bool drop_before_crash() {
    constexpr std::size_t kGroupsBack = 8;
    constexpr std::uint64_t kMaxMove = 64;
    bool progress = false;
    for (bool again = true; again && !out_of_budget();) {
      again = false;
      const std::vector<Group> groups = groups_of(best_);
      for (std::size_t p = 0; p < groups.size() && !again; ++p) {
        const std::size_t line = groups[p].items[0];
        const Action& loss = std::get<StepLine>(best_.items[line]).action;
        const std::optional<std::uint64_t> back = crash_point_back_of(loss.x);
        if (loss.kind != ActionKind::power_loss || back.value_or(0) == 0) continue;
        for (std::size_t g = p; g-- > 0 && p - g <= kGroupsBack && !again && !out_of_budget();) {
          const std::set<std::size_t> drop(groups[g].items.begin(), groups[g].items.end());
          for (std::uint64_t d = 1; d <= std::min(*back, kMaxMove) && !out_of_budget(); ++d) {
            Scenario c = best_;
            std::get<StepLine>(c.items[line]).action.x = crash_point_back(*back - d);
            if (try_candidate(without(c, drop))) {
              progress = again = true;
              break;
            }
          }
        }
      }
    }
    return progress;
  }

  // Each power loss's crash point counted from the start (`after=OP`), where the last run
  // placed it, once the other passes are stuck: dropping a step whose disk operations come
  // after the crash point then leaves it where it was, where a point counted back from the
  // last operation would move into them (a kill's later checkpoints). Not first: a power
  // loss the failure does not need is dropped sooner as it came.
  bool pin_crash_points() {
    Scenario c = best_;
    std::size_t n = 0;
    bool changed = false;
    for (ScenarioItem& item : c.items) {
      auto* l = std::get_if<StepLine>(&item);
      if (l == nullptr || l->action.kind != ActionKind::power_loss) continue;
      if (n == best_result_.crash_ops.size()) return false;  // a loss the run did not reach
      const std::uint64_t op = best_result_.crash_ops[n++];
      if (crash_point_back_of(l->action.x).value_or(0) == 0) continue;
      l->action.x = static_cast<std::int64_t>(op);
      changed = true;
    }
    // Not a simpler scenario by cost() (OP may exceed K): kept past try_candidate's test.
    return changed && keep_if_same_failure(c, failure_.difference);
  }

  bool drop_pauses() {
    bool progress = false;
    for (bool again = true; again && !out_of_budget();) {
      again = false;
      for (const Group& g : groups_of(best_)) {
        if (g.items.size() < 1) continue;
        auto& first = std::get<StepLine>(best_.items[g.items[0]]);
        if (first.pause.empty()) continue;
        Scenario c = best_;
        std::get<StepLine>(c.items[g.items[0]]).pause = Name();
        std::set<std::size_t> drop(g.items.begin() + 1, g.items.end());
        if (try_candidate(without(c, drop))) {
          progress = again = true;
          break;
        }
      }
    }
    return progress;
  }

  // Tries each simpler variant of each action; keeps what still fails.
  bool simplify_data() {
    bool progress = false;
    for (std::size_t i = 0; i < best_.items.size() && !out_of_budget(); ++i) {
      auto* line = std::get_if<StepLine>(&best_.items[i]);
      if (line == nullptr) continue;
      for (const Action& a : simpler(*workload_, *line)) {
        Scenario c = best_;
        std::get<StepLine>(c.items[i]).action = a;
        if (try_candidate(c)) {
          progress = true;
          line = std::get_if<StepLine>(&best_.items[i]);
        }
      }
    }
    // Keys: rename every use of key K to a smaller one that no step and no expectation uses,
    // all lines at once (renaming to a used key would merge two keys into one).
    std::set<std::uint64_t> keys;
    for (const ScenarioItem& item : best_.items) {
      if (const auto* l = std::get_if<StepLine>(&item)) {
        if (names_entry(*workload_, *l)) keys.insert(l->action.entry.first);
      } else if (const Expectation* e = expectation_of(item)) {
        for (const auto& [k, v] : e->image) keys.insert(k.first);
        for (const EntryKey& k : e->copied_entries) keys.insert(k.first);
        for (const EntryKey& k : e->copied_states) keys.insert(k.first);
      }
    }
    for (std::uint64_t k : std::vector<std::uint64_t>(keys.rbegin(), keys.rend())) {
      for (std::uint64_t smaller = 0; smaller < k && !out_of_budget(); ++smaller) {
        if (keys.count(smaller)) continue;
        Scenario c = best_;
        rename_key(c, k, smaller);
        const Difference renamed = failure_.difference.with_key_renamed(k, smaller);
        if (try_candidate(c, &renamed)) {
          keys.erase(k);
          keys.insert(smaller);
          progress = true;
          break;
        }
      }
    }
    return progress;
  }

  // Smaller tables and the default hash: fewer entries reach the same full or colliding
  // state (a capacity bound is often why a case needs many steps). Then each backend
  // feature back to its default.
  bool simplify_config() {
    bool progress = false;
    auto attempt = [this, &progress](auto&& change) {
      Scenario c = best_;
      change(c.config);
      if (!(c.config == best_.config) && try_candidate(c)) progress = true;
    };
    for (std::uint32_t cap = 1; cap < best_.config.max_capacity && cap <= (1u << 20); cap *= 2) {
      const std::uint32_t before = best_.config.max_capacity;
      attempt([cap](ScenarioConfig& c) {
        c.max_capacity = cap;
        c.min_capacity = std::min(c.min_capacity, cap);
        c.initial_capacity = std::min(c.initial_capacity, cap);
      });
      if (best_.config.max_capacity != before) break;
    }
    for (std::uint32_t cap = 1; cap < best_.config.initial_capacity; cap *= 2) {
      const std::uint32_t before = best_.config.initial_capacity;
      attempt([cap](ScenarioConfig& c) { c.initial_capacity = cap; });
      if (best_.config.initial_capacity != before) break;
    }
    attempt([](ScenarioConfig& c) { c.min_capacity = std::min<std::uint32_t>(c.min_capacity, 1); });
    attempt([](ScenarioConfig& c) { c.identity_hash = false; });
    attempt([](ScenarioConfig& c) { c.track_changes = false; });
    // The backend's features, each back to its default: a case that fails without TTL, async
    // files or a memory budget says so (a candidate whose steps need the feature is invalid).
    const ScenarioConfig plain;
    attempt([&plain](ScenarioConfig& c) { c.budget_bytes = plain.budget_bytes; });
    attempt([&plain](ScenarioConfig& c) { c.incremental = plain.incremental; });
    attempt([&plain](ScenarioConfig& c) {
      c.spill_check = plain.spill_check;
      c.cold_cache_percent = plain.cold_cache_percent;
    });
    attempt([&plain](ScenarioConfig& c) {
      c.async_io = plain.async_io;
      c.io_buffer_bytes = plain.io_buffer_bytes;
    });
    attempt([&plain](ScenarioConfig& c) { c.io_buffer_bytes = plain.io_buffer_bytes; });
    attempt([&plain](ScenarioConfig& c) {
      c.ttl_ms = plain.ttl_ms;
      c.ttl_read_refresh = plain.ttl_read_refresh;
      c.ttl_return_expired = plain.ttl_return_expired;
      c.ttl_cleanup = plain.ttl_cleanup;
      c.ttl_key_switch = plain.ttl_key_switch;
      c.ttl_full_snapshot = plain.ttl_full_snapshot;
    });
    attempt([&plain](ScenarioConfig& c) { c.ttl_key_switch = plain.ttl_key_switch; });
    attempt([&plain](ScenarioConfig& c) { c.ttl_full_snapshot = plain.ttl_full_snapshot; });
    attempt([&plain](ScenarioConfig& c) { c.ttl_read_refresh = plain.ttl_read_refresh; });
    attempt([&plain](ScenarioConfig& c) { c.ttl_return_expired = plain.ttl_return_expired; });
    attempt([&plain](ScenarioConfig& c) { c.ttl_cleanup = plain.ttl_cleanup; });
    return progress;
  }

  // A memory budget, then the manager's check interval, to the smallest power of two below
  // it that still fails: the manager then spills after fewer writes, which the other passes
  // may drop. Only once they are stuck: lowered first, the budget moves the spills and can
  // hold on to steps that they would have dropped.
  bool lower_spill_config() {
    bool progress = false;
    auto lower = [this, &progress](auto field) {
      const std::uint64_t now = best_.config.*field;
      for (std::uint64_t v = 1; v < now && !out_of_budget(); v *= 2) {
        Scenario c = best_;
        c.config.*field = static_cast<std::remove_reference_t<decltype(c.config.*field)>>(v);
        if (try_candidate(c)) {
          progress = true;
          break;
        }
      }
    };
    lower(&ScenarioConfig::budget_bytes);
    lower(&ScenarioConfig::spill_check);
    return progress;
  }

  ShrinkResult run(const Scenario& failing) {
    ShrinkResult out;
    out.steps_before = failing.step_count();
    best_ = failing;
    workload_ = &workload_of(failing);  // every candidate keeps the config's workload
    ++runs_;
    best_result_ = run_scenario(failing);
    expect_line_ = best_result_.failed_line;
    out.reproduced = best_result_.signature() == failure_;
    if (!out.reproduced) {
      out.not_reproduced = "it failed as " + best_result_.signature().to_string() + " instead of " +
                           failure_.to_string();
    }
    // An invalid scenario is bad input, not a bug: there is nothing to minimize.
    if (out.reproduced && failure_.outcome != Outcome::invalid) {
      // Expectations the failure does not need would only be read (and shrunk) in vain.
      if (failure_.check != "expect") {
        std::set<std::size_t> drop;
        for (std::size_t i = 0; i < best_.items.size(); ++i) {
          const auto* e = expectation_of(best_.items[i]);
          if (e != nullptr && e->kind != ExpectKind::failure) drop.insert(i);
        }
        if (!drop.empty()) try_candidate(without(best_, drop));
      }
      for (bool progress = true; progress && !out_of_budget();) {
        // A run per snapshot, per pause, per task before the sweeps of drop_groups: a pause
        // at a yield point that needs a snapshot, or a task stepped bit by bit, holds on to
        // the steps around it.
        progress = drop_snapshots();
        progress = drop_pauses() || progress;
        progress = finish_tasks() || progress;
        progress = drop_groups() || progress;
        progress = simplify_data() || progress;
        progress = simplify_config() || progress;
        // The passes that cost a run or more per line, once the cheap ones are done.
        if (!progress) progress = merge_task_steps();
        if (!progress) progress = lower_spill_config();
        if (!progress) progress = pin_crash_points();
        if (!progress) progress = drop_before_crash();
      }
      out.cut_by = limit_reached();
    }
    // Renaming cannot change the run (names only label tasks); checked all the same.
    const Scenario named = renamed_snapshots(best_);
    ++runs_;
    RunResult r = run_scenario(named);
    if (!out.reproduced || same_failure(r, failure_.difference)) {
      best_ = named;
      best_result_ = std::move(r);
    }
    out.scenario = best_;
    out.result = best_result_;
    out.signature = best_result_.signature();
    out.runs = runs_;
    out.steps_after = best_.step_count();
    return out;
  }

 private:
  // The same outcome at the same check; a failed expectation must be the same one (items
  // keep their source line through every edit) and fail with difference `want`.
  bool same_failure(const RunResult& r, const Difference& want) const {
    if (r.outcome != failure_.outcome || r.check != failure_.check) return false;
    return failure_.check != "expect" || (r.failed_line == expect_line_ && r.difference == want);
  }

  static void rename_key(Scenario& s, std::uint64_t from, std::uint64_t to) {
    const Workload& w = workload_of(s);
    for (ScenarioItem& item : s.items) {
      if (auto* l = std::get_if<StepLine>(&item)) {
        if (names_entry(w, *l) && l->action.entry.first == from) l->action.entry.first = to;
      } else {
        Expectation& e = *expectation_of(item);
        ScenarioImage image;
        for (auto& [k, v] : e.image) image[{k.first == from ? to : k.first, k.second}] = v;
        e.image = std::move(image);
        for (std::set<EntryKey>* keys : {&e.copied_entries, &e.copied_states}) {
          std::set<EntryKey> renamed;
          for (const EntryKey& k : *keys)
            renamed.insert({k.first == from ? to : k.first, k.second});
          *keys = std::move(renamed);
        }
      }
    }
  }

  // Whether a step line's entry names an entry of the workload's state.
  static bool names_entry(const Workload& w, const StepLine& l) {
    return traits_of(w, l).names_entry;
  }

  // The same step on simpler data: the workload's variants of a writer action, a clock
  // step of no time, a serializer step of all that is left.
  static std::vector<Action> simpler(const Workload& w, const StepLine& line) {
    const Action& a = line.action;
    if (line.task == "writer" && a.kind != ActionKind::resume) return w.simpler_writer_actions(a);
    ActionVariants v(a);
    if (a.x != 0) v.add([](Action& b) { b.x = 0; });
    if (a.kind == ActionKind::write_fault && a.budget > 1) v.add([](Action& b) { b.budget = 1; });
    if (a.kind == ActionKind::step && a.budget != 0) {
      v.add([](Action& b) { b.budget = 0; });
      if (a.budget > 1) v.add([](Action& b) { b.budget /= 2; });
      if (a.budget > 2) v.add([](Action& b) { b.budget -= 1; });
    }
    return v.take();
  }

  // The failure to keep: its difference follows the keys the shrinker renamed.
  FailureSignature failure_;
  const Workload* workload_ = nullptr;  // the failing scenario's
  ShrinkOptions options_;
  Clock::time_point start_;
  std::uint64_t runs_ = 0;
  Scenario best_;
  RunResult best_result_;
  int expect_line_ = 0;
};

}  // namespace

ShrinkResult shrink(const Scenario& failing, const FailureSignature& failure,
                    const ShrinkOptions& options) {
  return Shrinker(failure, options).run(failing);
}

ShrinkResult shrink_run(const RunConfig& config, Strategy& strategy, const ShrinkOptions& options) {
  RunConfig recording = config;
  recording.record = true;
  const RunResult recorded = run_once(recording, strategy);
  const std::optional<Scenario> scenario = to_scenario(recording, recorded);
  if (!scenario) {
    ShrinkResult out;
    out.result = recorded;
    out.signature = recorded.signature();
    out.not_reproduced = "the run failed before its first step (" + recorded.message +
                         "): there is no schedule to write down";
    return out;
  }
  return shrink(*scenario, recorded.signature(), options);
}

}  // namespace cowstate::sim
