// The scenario parser: one statement per line, errors at file:line:col saying what was
// expected and what was found. Grammar in docs/scenario-format.md.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <istream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "cowstate/hooks.h"
#include "cowstate/sim/coverage.h"
#include "cowstate/sim/scenario.h"
#include "cowstate/sim/scenario_reader.h"
#include "cowstate/sim/workload.h"

namespace cowstate::sim {

const char* action_name(ActionKind kind) noexcept {
  switch (kind) {
    case ActionKind::map_op:
      return "a map operation";
    case ActionKind::step:
      return "step";
    case ActionKind::cancel:
      return "cancel";
    case ActionKind::keep:
      return "keep";
    case ActionKind::release:
      return "release";
    case ActionKind::resume:
      return "continue";
    case ActionKind::value_state:
      return "value";
    case ActionKind::list_state:
      return "list";
    case ActionKind::map_state:
      return "map";
    case ActionKind::reducing_state:
      return "reducing";
    case ActionKind::aggregating_state:
      return "aggregating";
    case ActionKind::checkpoint:
      return "checkpoint";
    case ActionKind::restore:
      return "restore";
    case ActionKind::fail:
      return "fail";
    case ActionKind::write_fault:
      return "lose";
    case ActionKind::advance:
      return "advance";
    case ActionKind::land:
      return "land";
    case ActionKind::cleanup:
      return "cleanup";
    case ActionKind::power_loss:
      return "power_loss";
    case ActionKind::spill:
      return "spill";
    case ActionKind::load:
      return "load";
  }
  return "?";
}

const char* op_word(OpKind kind) noexcept {
  return kind == OpKind::snapshot_start ? "snapshot" : to_text(kind);
}

const char* action_name(const Action& a) noexcept {
  if (a.kind == ActionKind::write_fault && a.x != 0) return "misdirect";
  return a.kind == ActionKind::map_op ? op_word(a.map_op) : action_name(a.kind);
}

const char* state_op_name(StateOp op) noexcept {
  switch (op) {
    case StateOp::get:
      return "get";
    case StateOp::update:
      return "update";
    case StateOp::clear:
      return "clear";
    case StateOp::add:
      return "add";
    case StateOp::add_all:
      return "add_all";
    case StateOp::put:
      return "put";
    case StateOp::remove:
      return "remove";
    case StateOp::merge:
      return "merge";
  }
  return "?";
}

namespace detail {
std::atomic<const std::string*> name_chunks[kNameChunks];
}  // namespace detail

namespace {

// The interning side of Name: the chunks' owner and the index from text to id. Id 0, the
// empty name, is the first entry of chunk 0.
class NamePool {
 public:
  NamePool() { add(std::string_view()); }

  std::uint32_t intern(std::string_view s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = ids_.find(s); it != ids_.end()) return it->second;
    return add(s);
  }

 private:
  std::uint32_t add(std::string_view s) {
    const std::uint32_t id = count_;
    const detail::NameSlot at = detail::name_slot(id);
    const int c = at.chunk;
    if (c >= detail::kNameChunks) {
      std::fprintf(stderr, "cowstate: more than %u distinct names\n", id);
      std::abort();
    }
    if (at.index == 0) {
      chunks_[c] = std::make_unique<std::string[]>(std::size_t{64} << c);
      detail::name_chunks[c].store(chunks_[c].get(), std::memory_order_release);
    }
    std::string& text = chunks_[c][at.index];
    text = s;
    ids_.emplace(std::string_view(text), id);
    ++count_;
    return id;
  }

  std::mutex mu_;
  std::unique_ptr<std::string[]> chunks_[detail::kNameChunks];
  std::unordered_map<std::string_view, std::uint32_t> ids_;
  std::uint32_t count_ = 0;
};

NamePool& name_pool() {
  static NamePool* pool = new NamePool();  // never destroyed: names outlive static objects
  return *pool;
}

}  // namespace

Name::Name(std::string_view s) : id_(s.empty() ? 0 : name_pool().intern(s)) {}

const std::vector<std::string>& yield_points() {
  static const std::vector<std::string> points = [] {
    std::vector<std::string> out;
    for (const CoverageProbe& p : kCoverageProbes) {
      if (p.kind == CoverageKind::yield) out.emplace_back(p.name);
    }
    return out;
  }();
  return points;
}

std::size_t Scenario::step_count() const {
  std::size_t n = 0;
  for (const ScenarioItem& item : items) n += std::holds_alternative<StepLine>(item) ? 1U : 0U;
  return n;
}

std::string ParseError::to_string() const {
  return file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + message;
}

namespace {

struct TaskState {
  bool paused = false;  // fixed schedule: its last line stopped at a yield point
  int paused_line = 0;
};

// Reads configuration, expectations and the releaser's, serializers' and clock's lines; a
// writer line's action goes to the workload the config line names.
class Parser {
 public:
  // `items_max` bounds the items the text can make (lines and `;` parts), so the item array
  // is allocated once instead of doubling.
  Parser(std::string file, std::size_t items_max) : in_(scenario_.config) {
    scenario_.file = std::move(file);
    scenario_.items.reserve(items_max);
  }

  // Parses one source line into the scenario.
  void line(std::string_view text, int line_no) {
    const std::size_t hash = text.find('#');
    in_.start_line(hash == std::string_view::npos ? text : text.substr(0, hash), line_no);
    if (in_.at_end()) return;
    const ScenarioToken first = in_.peek();
    if (first.kind != TokenKind::word) fail(first, "a statement (config, kills, expect or TASK:)");
    if (first.text == "config" && !is_task_line()) {
      in_.next();
      config();
    } else if (first.text == "kills" && !is_task_line()) {
      in_.next();
      kills();
    } else if (first.text == "expect" && !is_task_line()) {
      in_.next();
      expectation(first);
    } else {
      steps();
    }
    in_.want_end();
  }

  Scenario finish() { return std::move(scenario_); }

 private:
  [[noreturn]] void fail(const ScenarioToken& t, const std::string& expected) const {
    in_.fail(t, expected);
  }
  [[noreturn]] void fail(const ScenarioToken& t, const std::string& expected,
                         const std::string& found) const {
    in_.fail(t, expected, found);
  }
  bool is_task_line() const {
    return in_.peek(1).kind == TokenKind::punct && in_.peek(1).text == ":";
  }

  void kills() {
    const ScenarioToken name = in_.want_word("a mutant name");
    if (!scenario_.kills.empty()) fail(name, "one `kills` per scenario", "a second one");
    if (mutants::mutant_named(name.text) == mutants::Mutant::none) {
      std::string names;
      for (const char* m : mutants::kMutantNames)
        names += (names.empty() ? "" : ", ") + std::string(m);
      fail(name, "a mutant of the catalog (" + names + ")");
    }
    scenario_.kills = name.text;
    if (in_.at_end()) return;
    const ScenarioToken key = in_.want_word("shrunk_at_most=STEPS or the end of the line");
    if (key.text != "shrunk_at_most") fail(key, "shrunk_at_most=STEPS or the end of the line");
    in_.want_punct("=");
    scenario_.shrunk_at_most = in_.positive("a number of steps (a positive number)", 100000);
  }

  void config() {
    // Steps and expectations are read under the configuration (the workload decides which
    // actions and expectations exist), so it cannot change once one of them is read.
    if (seen_statement_) {
      fail(in_.first(), "config before the first step or expectation",
           "'config' after " + std::string(seen_statement_));
    }
    if (in_.at_end()) fail(in_.peek(), "a setting (capacity=, hash=, schedule=, ...)");
    ScenarioConfig& c = scenario_.config;
    while (!in_.at_end()) {
      const ScenarioToken key = in_.want_word("a setting (capacity=, hash=, schedule=, ...)");
      in_.want_punct("=");
      if (!schedule_setting(key.text, c) && !map_setting(key.text, c) &&
          !backend_setting(key.text, c)) {
        fail(key,
             "a setting (capacity, min_capacity, max_capacity, hash, changes, schedule, seed, "
             "strategy, "
             "pct_depth, workload, max_parallelism, key_groups, ttl, ttl_update, "
             "ttl_visibility, ttl_cleanup, ttl_key_switch, ttl_full_snapshot, async_io, io_buffer, "
             "budget, spill_check, cold_cache, incremental)");
      }
    }
    check_config(c);
  }

  // The value of a `schedule`, `seed`, `strategy`, `pct_depth` or `workload` setting; false
  // for another key.
  bool schedule_setting(const std::string& key, ScenarioConfig& c) {
    if (key == "schedule") {
      c.fixed_schedule = !in_.choice("'fixed' or 'free'", "fixed", "free");
    } else if (key == "seed") {
      c.seed = in_.number<std::uint64_t>("a seed (a number)");
    } else if (key == "strategy") {
      c.strategy = in_.choice("'random' or 'pct'", "random", "pct") ? "pct" : "random";
    } else if (key == "pct_depth") {
      c.pct_depth = in_.positive("a PCT depth (a positive number)", 64);
    } else if (key == "workload") {
      const ScenarioToken v = in_.want_word("a workload (" + workload_names() + ")");
      const Workload* w = find_workload(v.text);
      if (w == nullptr) fail(v, "a workload (" + workload_names() + ")");
      workload_ = w;
      language_ = w->scenario_language();
      c.workload = v.text;
    } else {
      return false;
    }
    return true;
  }

  // The value of a map's capacity or hash setting; false for another key.
  bool map_setting(const std::string& key, ScenarioConfig& c) {
    constexpr std::uint32_t kAllocatedMax = ScenarioReader::kAllocatedMax;
    if (key == "capacity" || key == "initial_capacity") {
      c.initial_capacity = in_.positive("a capacity (a positive number)", kAllocatedMax);
    } else if (key == "min_capacity") {
      c.min_capacity = in_.positive("a capacity (a positive number)", kAllocatedMax);
    } else if (key == "max_capacity") {
      c.max_capacity = in_.positive("a capacity (a positive number)", 1u << 30);
    } else if (key == "hash") {
      c.identity_hash = in_.choice("'default' or 'identity'", "default", "identity");
    } else if (key == "changes") {
      c.track_changes = in_.choice("'untracked' or 'tracked'", "untracked", "tracked");
    } else {
      return false;
    }
    return true;
  }

  // The value of a backend setting (key groups, TTL); false for another key.
  bool backend_setting(const std::string& key, ScenarioConfig& c) {
    if (key == "max_parallelism") {
      c.max_parallelism = static_cast<std::int32_t>(
          in_.positive("a max parallelism (a positive number)", ScenarioReader::kMaxParallelism));
    } else if (key == "key_groups") {
      c.key_groups = in_.group_range("a key-group range FIRST-LAST");
    } else if (key == "ttl") {
      c.ttl_ms = in_.bounded("a TTL in ms", 1, ScenarioReader::kMaxTtl);
    } else if (key == "ttl_update") {
      c.ttl_read_refresh = in_.choice("'write' or 'read'", "write", "read");
    } else if (key == "ttl_visibility") {
      c.ttl_return_expired = in_.choice("'never' or 'expired'", "never", "expired");
    } else if (key == "ttl_cleanup") {
      if (in_.at_word("none")) {
        in_.next();
        c.ttl_cleanup = 0;
      } else {
        c.ttl_cleanup =
            in_.positive("an incremental cleanup size or 'none'", ScenarioReader::kAllocatedMax);
      }
    } else if (key == "ttl_key_switch") {
      c.ttl_key_switch = in_.choice("'off' or 'on'", "off", "on");
    } else if (key == "ttl_full_snapshot") {
      c.ttl_full_snapshot = in_.choice("'off' or 'on'", "off", "on");
    } else if (key == "async_io") {
      c.async_io = in_.choice("'off' or 'on'", "off", "on");
    } else if (key == "io_buffer") {
      c.io_buffer_bytes = in_.positive("an async file buffer size in bytes", 1u << 20);
    } else if (key == "budget") {
      c.budget_bytes = in_.positive("a memory budget in bytes", 1u << 30);
    } else if (key == "spill_check") {
      c.spill_check = static_cast<std::uint32_t>(
          in_.bounded("key switches between two checks of the manager (0: never)", 0, 1u << 30));
    } else if (key == "incremental") {
      c.incremental = static_cast<std::uint32_t>(
          in_.bounded("every how many checkpoints a chain has a full one (0: none)", 0, 1000));
    } else if (key == "cold_cache") {
      c.cold_cache_percent =
          static_cast<std::uint32_t>(in_.bounded("the cold cache's percent of the budget", 0, 80));
    } else {
      return false;
    }
    return true;
  }

  // The rules between settings of one config line.
  void check_config(const ScenarioConfig& c) {
    const ScenarioConfig d;
    if (c.async_io && !language_.storage_faults) {
      fail(in_.first(), "async_io in a workload with checkpoint storage",
           "async_io in a " + c.workload.str() + " scenario");
    }
    if (c.io_buffer_bytes != d.io_buffer_bytes && !c.async_io) {
      fail(in_.first(), "async_io=on with io_buffer", "io_buffer without async_io");
    }
    if (c.track_changes && language_.keyed_states) {
      fail(in_.first(), "changes=tracked in a map scenario",
           "changes=tracked in a " + c.workload.str() + " scenario");
    }
    if (c.incremental != 0 && !language_.storage_faults) {
      fail(in_.first(), "incremental in a workload with checkpoint storage",
           "incremental in a " + c.workload.str() + " scenario");
    }
    if (c.budget_bytes != 0 && !language_.storage_faults) {
      fail(in_.first(), "budget in a workload of keyed state",
           "budget in a " + c.workload.str() + " scenario");
    }
    if ((c.spill_check != d.spill_check || c.cold_cache_percent != d.cold_cache_percent) &&
        c.budget_bytes == 0) {
      fail(in_.first(), "budget=BYTES with spill_check and cold_cache",
           "a spill setting without a budget");
    }
    const bool ttl_set = c.ttl_read_refresh != d.ttl_read_refresh ||
                         c.ttl_return_expired != d.ttl_return_expired ||
                         c.ttl_cleanup != d.ttl_cleanup || c.ttl_key_switch != d.ttl_key_switch ||
                         c.ttl_full_snapshot != d.ttl_full_snapshot;
    if ((c.ttl_ms != 0 || ttl_set) && !language_.keyed_states) {
      const std::string keyed =
          workload_names([](const Workload& w) { return w.scenario_language().keyed_states; });
      fail(in_.first(),
           "TTL settings in a workload of keyed state (" + keyed +
               "; TTL is a property of keyed state)",
           "a TTL setting in a " + c.workload.str() + " scenario");
    }
    if (ttl_set && c.ttl_ms == 0) {
      fail(in_.first(), "ttl=MS with the other TTL settings", "TTL settings without a ttl");
    }
    if (c.ttl_key_switch && c.ttl_cleanup == 0) {
      fail(in_.first(), "an incremental cleanup size with ttl_key_switch=on", "ttl_cleanup=none");
    }
    if (c.key_groups.last >= c.max_parallelism) {
      fail(in_.first(),
           "key_groups within [0, max_parallelism " + std::to_string(c.max_parallelism) + ")",
           range_text(c.key_groups));
    }
  }

  void expectation(const ScenarioToken& start) {
    if (seen_statement_ == nullptr) seen_statement_ = "an expectation";
    Expectation e;
    e.line = in_.line_no();
    e.column = start.column;
    const ScenarioToken what = in_.want_word(
        "a snapshot name, 'live', 'copied', 'versions', 'retired', 'failure' or 'latest'");
    if (what.text == "latest") {
      if (!language_.checkpoints) fail(what, expectation_of_workload(), "'latest'");
      e.kind = ExpectKind::latest;
      const ScenarioToken name = in_.want_word("a checkpoint name or 'none'");
      if (name.text != "none" && !in_.started(name.text)) {
        fail(name, "'none' or a checkpoint started above (" + in_.started_list() + ")");
      }
      e.target = name.text;
    } else if (what.text == "copied") {
      copied_expectation(what, e);
    } else if (what.text == "versions") {
      if (!language_.map_internals) fail(what, expectation_of_workload(), "'versions'");
      e.kind = ExpectKind::versions;
      in_.assignment("map");
      e.a = in_.number<std::uint32_t>("a map version");
      in_.assignment("h");
      e.b = in_.number<std::uint32_t>("a highest required version");
    } else if (what.text == "retired") {
      if (!language_.map_internals) fail(what, expectation_of_workload(), "'retired'");
      e.kind = ExpectKind::retired;
      in_.assignment("entries");
      e.a = in_.number<std::uint32_t>("a count of retired entries");
      in_.assignment("states");
      e.b = in_.number<std::uint32_t>("a count of retired states");
    } else if (what.text == "failure") {
      e.kind = ExpectKind::failure;
      e.target = in_.want_word("a check id (result, image, I3, ...)").text;
    } else {
      image_expectation(what, e);
    }
    scenario_.items.emplace_back(std::move(e));
  }

  // `expect copied entries={...} states={...}` or `expect copied nothing`, after `copied`.
  void copied_expectation(const ScenarioToken& what, Expectation& e) {
    if (!language_.map_internals) fail(what, expectation_of_workload(), "'copied'");
    if (!scenario_.config.fixed_schedule) {
      fail(what, "an expectation that holds in any interleaving",
           "'copied' in a free schedule (it needs schedule=fixed)");
    }
    e.kind = ExpectKind::copied;
    if (in_.at_word("nothing")) {
      in_.next();
      return;
    }
    in_.assignment("entries");
    e.copied_entries = in_.key_set();
    in_.assignment("states");
    e.copied_states = in_.key_set();
  }

  // `expect NAME|live [into RANGE] [s=STATE] = {...}`, after the name.
  void image_expectation(const ScenarioToken& what, Expectation& e) {
    e.kind = ExpectKind::image;
    if (what.text != "live" && !in_.started(what.text)) {
      fail(what, "'live' or a snapshot started above (" + in_.started_list() + ")");
    }
    e.target = what.text;
    if (language_.keyed_states) {
      if (in_.at_word("into")) {
        if (what.text == "live") fail(in_.peek(), "'s='", "'into' after 'live'");
        in_.next();
        e.into = in_.target_range("a key-group range FIRST-LAST");
      }
      in_.assignment("s");
      e.state = workload_->parse_state_name(in_);
    }
    in_.want_punct("=");
    e.image = in_.image();
  }

  std::string expectation_of_workload() const {
    return "an expectation of the " + scenario_.config.workload.str() + " workload";
  }

  void steps() {
    const ScenarioToken task = in_.want_word("a task (writer, releaser or a snapshot name)");
    in_.want_punct(":");
    const bool clock = task.text == "clock" && scenario_.config.ttl_ms != 0;
    if (task.text == "clock" && !clock) {
      fail(task, "a task: writer, releaser or a snapshot (a clock task needs config ttl=MS)");
    }
    const bool io = task.text == "io" && scenario_.config.async_io;
    if (task.text == "io" && !io) {
      fail(task, "a task: writer, releaser or a snapshot (an io task needs config async_io=on)");
    }
    if (task.text != "writer" && task.text != "releaser" && !clock && !io &&
        !in_.started(task.text)) {
      fail(task, std::string("a task: writer, releaser, ") +
                     (scenario_.config.ttl_ms != 0 ? "clock, " : "") +
                     (scenario_.config.async_io ? "io, " : "") + "or a snapshot started above (" +
                     in_.started_list() + ")");
    }
    if (seen_statement_ == nullptr) seen_statement_ = "a step";
    for (;;) {
      StepLine s;
      s.task = task.text;
      s.line = in_.line_no();
      s.column = in_.peek().column;
      action(s);
      if (in_.at_word("pause")) s.pause = pause(s);
      track_pause(s, task);
      scenario_.items.emplace_back(std::move(s));
      if (!in_.at_punct(";")) break;
      in_.next();
    }
  }

  // `pause at POINT` of a fixed schedule, for an action with a yield point.
  Name pause(const StepLine& s) {
    const Action& a = s.action;
    const ScenarioToken p = in_.next();
    if (!scenario_.config.fixed_schedule) {
      fail(p, "no `pause at` in a free schedule (the strategy chooses where tasks pause)",
           "'pause'");
    }
    const ActionKind k = a.kind;
    const bool writer = s.task == "writer" && k != ActionKind::resume;
    if (writer ? !workload_->writer_action_traits(a).can_pause
               : k == ActionKind::cancel || k == ActionKind::keep || k == ActionKind::release ||
                     k == ActionKind::fail || k == ActionKind::write_fault ||
                     k == ActionKind::advance || k == ActionKind::land) {
      fail(p, "end of line (`" + std::string(action_name(a)) + "` has no yield point)", "'pause'");
    }
    in_.want_keyword("at");
    const ScenarioToken point = in_.peek();
    if (point.kind != TokenKind::word) fail(point, "a yield point");
    std::string list;
    for (const std::string& y : yield_points()) {
      if (y == point.text) return in_.next().text;
      list += (list.empty() ? "" : ", ") + y;
    }
    fail(point, "a yield point (" + list + ")");
  }

  // Fixed schedules: a paused task's next line must be `continue`, and only then.
  void track_pause(const StepLine& s, const ScenarioToken& task) {
    if (!scenario_.config.fixed_schedule) return;
    TaskState& st = tasks_[s.task];
    if (s.action.kind == ActionKind::resume && !st.paused) {
      fail(task, "'continue' only after a step that paused", s.task + " is not paused");
    }
    if (s.action.kind != ActionKind::resume && st.paused) {
      throw ScenarioSyntaxError{s.column, "expected 'continue' (" + s.task + " paused at line " +
                                              std::to_string(st.paused_line) + "), found '" +
                                              action_name(s.action) + "'"};
    }
    st.paused = !s.pause.empty();
    st.paused_line = in_.line_no();
  }

  void action(StepLine& s) {
    const ScenarioToken verb = in_.want_word("an action");
    Action& a = s.action;
    if (verb.text == "continue") {
      a.kind = ActionKind::resume;
      if (!scenario_.config.fixed_schedule) {
        fail(verb, "an action ('continue' belongs to fixed schedules)", "'continue'");
      }
    } else if (s.task == "writer") {
      workload_->parse_writer_action(in_, verb, &a);
    } else if (s.task == "releaser") {
      releaser_action(verb, a);
    } else if (s.task == "clock" && !in_.started(s.task)) {
      if (verb.text != "advance") fail(verb, "a clock action (advance MS)");
      a.kind = ActionKind::advance;
      a.x = static_cast<std::int64_t>(in_.bounded("a time in ms", 0, ScenarioReader::kMaxTtl));
    } else if (s.task == "io" && !in_.started(s.task)) {
      if (verb.text != "land") fail(verb, "an io action (land CHECKPOINT)");
      a.kind = ActionKind::land;
      a.snapshot = in_.started_task("a checkpoint").text;
    } else {
      serializer_action(verb, a);
    }
  }

  // `cancel|keep|release NAME`.
  void releaser_action(const ScenarioToken& verb, Action& a) {
    const std::string& v = verb.text;
    if (v == "cancel") {
      a.kind = ActionKind::cancel;
    } else if (v == "keep") {
      a.kind = ActionKind::keep;
    } else if (v == "release" && language_.checkpoints) {
      fail(verb, "'cancel' or 'keep' (a checkpoint is stopped by cancelling it)", "'release'");
    } else if (v == "release") {
      if (!scenario_.config.fixed_schedule) {
        fail(verb,
             "'cancel' (a free schedule may run a release while the serializer is inside "
             "a step)",
             "'release'");
      }
      a.kind = ActionKind::release;
    } else {
      fail(verb, "a releaser action (cancel, keep, release or continue)");
    }
    a.snapshot = in_.started_task("a snapshot").text;
  }

  // `step N|all`, or where storage faults exist `fail at write N`, `lose write N|manifest`,
  // `misdirect write N|manifest to OFFSET`.
  void serializer_action(const ScenarioToken& verb, Action& a) {
    if (verb.text == "fail" && language_.storage_faults) {
      a.kind = ActionKind::fail;
      in_.want_keyword("at");
      in_.want_keyword("write");
      const ScenarioToken t = in_.peek();
      a.budget = in_.number<std::uint32_t>("a file operation number N >= 1");
      if (a.budget == 0) fail(t, "a file operation number N >= 1", "0");
      return;
    }
    if ((verb.text == "lose" || verb.text == "misdirect") && language_.storage_faults) {
      return write_fault(verb, a);
    }
    if (verb.text != "step") {
      fail(verb, language_.storage_faults
                     ? "a serializer action (step N, step all, fail at write N, lose write N, "
                       "lose manifest, misdirect write N to OFFSET, misdirect manifest to "
                       "OFFSET or continue)"
                     : "a serializer action (step N, step all or continue)");
    }
    a.kind = ActionKind::step;
    if (in_.at_word("all")) {
      in_.next();
      a.budget = 0;
    } else {
      const ScenarioToken t = in_.peek();
      a.budget = in_.number<std::uint32_t>("a number of entries or 'all'");
      if (a.budget == 0) fail(t, "a number of entries >= 1 or 'all'", "0");
    }
  }

  // After `lose` or `misdirect`: which write, and for a misdirected one where it lands.
  void write_fault(const ScenarioToken& verb, Action& a) {
    a.kind = ActionKind::write_fault;
    const ScenarioToken what = in_.want_word("'write' or 'manifest'");
    if (what.text == "write") {
      const ScenarioToken t = in_.peek();
      a.budget = in_.number<std::uint32_t>("an append number N >= 1");
      if (a.budget == 0) fail(t, "an append number N >= 1", "0");
    } else if (what.text != "manifest") {
      fail(what, "'write' or 'manifest'");
    }
    if (verb.text == "misdirect") {
      in_.want_keyword("to");
      const ScenarioToken t = in_.peek();
      const auto offset = in_.number<std::uint64_t>("a byte offset");
      if (offset >= (std::uint64_t{1} << 40)) fail(t, "a byte offset below 2^40");
      a.x = static_cast<std::int64_t>(offset) + 1;
    }
  }

  Scenario scenario_;
  ScenarioReader in_;  // after scenario_: reads its config
  const Workload* workload_ = &default_workload();
  ScenarioLanguage language_ = default_workload().scenario_language();
  const char* seen_statement_ = nullptr;  // what first closed the configuration
  std::map<std::string, TaskState> tasks_;
};

}  // namespace

namespace {

// Parses the lines `next(line)` hands out (false: there are no more) into a scenario of at
// most `items_max` items.
template <class NextLine>
std::optional<Scenario> parse_lines(NextLine&& next, std::size_t items_max, const std::string& file,
                                    ParseError* error) {
  Parser parser(file, items_max);
  int line_no = 0;
  try {
    std::string_view line;
    while (next(line)) {
      ++line_no;
      if (const std::size_t nul = line.find('\0'); nul != std::string_view::npos) {
        throw ScenarioSyntaxError{static_cast<int>(nul) + 1, "expected text, found a NUL byte"};
      }
      parser.line(line, line_no);
    }
  } catch (const ScenarioSyntaxError& f) {
    if (error != nullptr) *error = ParseError{file, line_no, f.column, f.message};
    return std::nullopt;
  }
  Scenario s = parser.finish();
  if (s.step_count() == 0) {
    // Nothing would run: a PASS would claim what nothing checked.
    if (error != nullptr) {
      *error = ParseError{file, 1, 1, "expected at least one step line (TASK: ACTION), found none"};
    }
    return std::nullopt;
  }
  return s;
}

}  // namespace

std::size_t scenario_items_max(std::string_view text) {
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n') +
                                  std::count(text.begin(), text.end(), ';')) +
         1;
}

std::optional<Scenario> parse_scenario(std::string_view text, const std::string& file,
                                       ParseError* error) {
  std::size_t start = 0;
  auto next = [&](std::string_view& line) {
    if (start > text.size()) return false;
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    line = text.substr(start, end - start);
    start = end + 1;
    return true;
  };
  return parse_lines(next, scenario_items_max(text), file, error);
}

std::optional<Scenario> parse_scenario(std::istream& in, std::size_t items_max,
                                       const std::string& file, ParseError* error) {
  std::string buffer;
  bool more = true;
  auto next = [&](std::string_view& line) {
    if (!more) return false;
    if (std::getline(in, buffer)) {
      more = !in.eof();  // a last line without a newline ends the text
    } else {
      more = false;  // the empty line after the last newline, as the text form has it
      buffer.clear();
    }
    line = buffer;
    return true;
  };
  return parse_lines(next, items_max, file, error);
}

}  // namespace cowstate::sim
