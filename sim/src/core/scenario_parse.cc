// The scenario parser: one statement per line, errors at file:line:col saying what was
// expected and what was found. Grammar in docs/scenario-format.md.
#include <algorithm>
#include <bit>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <istream>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

#include "cowstate/hooks.h"
#include "cowstate/sim/scenario.h"
#include "cowstate/sim/text.h"
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
    case ActionKind::advance:
      return "advance";
    case ActionKind::cleanup:
      return "cleanup";
  }
  return "?";
}

const char* op_word(OpKind kind) noexcept {
  return kind == OpKind::snapshot_start ? "snapshot" : to_text(kind);
}

const char* action_name(const Action& a) noexcept {
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

const std::vector<BackendStateInfo>& backend_states() {
  static const std::vector<BackendStateInfo> states = {{ActionKind::value_state, "count"},
                                                       {ActionKind::list_state, "events"},
                                                       {ActionKind::map_state, "attrs"},
                                                       {ActionKind::reducing_state, "sum"},
                                                       {ActionKind::aggregating_state, "avg"}};
  return states;
}

const std::vector<std::string>& ttl_states() {
  static const std::vector<std::string> names = {"count", "events", "attrs"};
  return names;
}

bool is_ttl_state(const std::string& name) {
  const auto& names = ttl_states();
  return std::find(names.begin(), names.end(), name) != names.end();
}

bool has_sequence_values(const std::string& name) {
  for (const BackendStateInfo& info : backend_states()) {
    if (info.name == name) {
      return info.kind == ActionKind::list_state || info.kind == ActionKind::map_state ||
             info.kind == ActionKind::aggregating_state;
    }
  }
  return false;
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
  static const std::vector<std::string> points = {
      "map.copy_chain_prefix", "map.insert_new",          "map.rehash_move",
      "snapshot_writer.entry", "checkpoint_writer.entry", "checkpoint.commit"};
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

enum class Tok : std::uint8_t { end, word, number, punct };

struct Token {
  Tok kind = Tok::end;
  std::string text;
  int column = 0;  // 1-based
};

// Thrown inside the parser, turned into ParseError at the top.
struct Failure {
  int column;
  std::string message;
};

bool is_word_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_word_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.';
}

// Splits one line (comment already cut) into tokens.
std::vector<Token> tokenize(std::string_view line) {
  std::vector<Token> out;
  std::size_t i = 0;
  while (i < line.size()) {
    const char c = line[i];
    if (c == ' ' || c == '\t' || c == '\r') {
      ++i;
      continue;
    }
    Token t;
    t.column = static_cast<int>(i) + 1;
    if (is_word_start(c)) {
      const std::size_t start = i;
      while (i < line.size() && is_word_char(line[i])) ++i;
      t.kind = Tok::word;
      t.text = std::string(line.substr(start, i - start));
    } else if (std::isdigit(static_cast<unsigned char>(c)) ||
               (c == '-' && i + 1 < line.size() &&
                std::isdigit(static_cast<unsigned char>(line[i + 1])))) {
      const std::size_t start = i;
      ++i;
      while (i < line.size() && std::isalnum(static_cast<unsigned char>(line[i]))) ++i;
      t.kind = Tok::number;
      t.text = std::string(line.substr(start, i - start));
    } else if (std::string_view(":;={}[](),").find(c) != std::string_view::npos) {
      t.kind = Tok::punct;
      t.text = std::string(1, c);
      ++i;
    } else {
      throw Failure{t.column, "unexpected character '" + printable(std::string_view(&c, 1)) + "'"};
    }
    out.push_back(std::move(t));
  }
  Token end;
  end.column = static_cast<int>(line.size()) + 1;
  out.push_back(end);
  return out;
}

std::string describe(const Token& t) {
  switch (t.kind) {
    case Tok::end:
      return "end of line";
    case Tok::number:
      return "number " + t.text;
    case Tok::word:
      return "'" + t.text + "'";
    case Tok::punct:
      return "'" + t.text + "'";
  }
  return "?";
}

struct TaskState {
  bool paused = false;  // fixed schedule: its last line stopped at a yield point
  int paused_line = 0;
};

class Parser {
 public:
  // `items_max` bounds the items the text can make (lines and `;` parts), so the item array
  // is allocated once instead of doubling.
  Parser(std::string file, std::size_t items_max) : file_(std::move(file)) {
    scenario_.file = file_;
    scenario_.items.reserve(items_max);
  }

  // Parses one source line into the scenario.
  void line(std::string_view text, int line_no) {
    line_no_ = line_no;
    const std::size_t hash = text.find('#');
    toks_ = tokenize(hash == std::string_view::npos ? text : text.substr(0, hash));
    pos_ = 0;
    if (peek().kind == Tok::end) return;
    const Token first = peek();
    if (first.kind != Tok::word) fail(first, "a statement (config, kills, expect or TASK:)");
    if (first.text == "config" && !is_task_line()) {
      next();
      config();
    } else if (first.text == "kills" && !is_task_line()) {
      next();
      const Token name = want_word("a mutant name");
      if (!scenario_.kills.empty()) fail(name, "one `kills` per scenario", "a second one");
      if (mutants::mutant_named(name.text) == mutants::Mutant::none) {
        std::string names;
        for (const char* m : mutants::kMutantNames)
          names += (names.empty() ? "" : ", ") + std::string(m);
        fail(name, "a mutant of the catalog (" + names + ")");
      }
      scenario_.kills = name.text;
    } else if (first.text == "expect" && !is_task_line()) {
      next();
      expectation(first);
    } else {
      steps();
    }
    want_end();
  }

  Scenario finish() { return std::move(scenario_); }

  [[noreturn]] void fail(const Token& t, const std::string& expected) {
    throw Failure{t.column, "expected " + expected + ", found " + describe(t)};
  }
  [[noreturn]] void fail(const Token& t, const std::string& expected, const std::string& found) {
    throw Failure{t.column, "expected " + expected + ", found " + found};
  }
  int line_no() const { return line_no_; }

 private:
  const Token& peek(std::size_t ahead = 0) const {
    return toks_[std::min(pos_ + ahead, toks_.size() - 1)];
  }
  Token next() {
    Token t = peek();
    if (pos_ < toks_.size() - 1) ++pos_;
    return t;
  }
  bool is_task_line() const { return peek(1).kind == Tok::punct && peek(1).text == ":"; }
  bool at_punct(const char* p) const { return peek().kind == Tok::punct && peek().text == p; }
  Token want_punct(const char* p) {
    if (!at_punct(p)) fail(peek(), std::string("'") + p + "'");
    return next();
  }
  Token want_word(const std::string& what) {
    if (peek().kind != Tok::word) fail(peek(), what);
    return next();
  }
  void want_keyword(const char* word) {
    if (peek().kind != Tok::word || peek().text != word)
      fail(peek(), std::string("'") + word + "'");
    next();
  }
  void want_end() {
    if (peek().kind != Tok::end) fail(peek(), "end of line");
  }

  template <class T>
  T number(const std::string& what) {
    const Token t = peek();
    if (t.kind != Tok::number) fail(t, what);
    T v{};
    const char* b = t.text.data();
    const char* e = b + t.text.size();
    auto [p, ec] = std::from_chars(b, e, v);
    if (ec == std::errc::result_out_of_range) {
      fail(t, what + " in range [" + std::to_string(std::numeric_limits<T>::min()) + ", " +
                  std::to_string(std::numeric_limits<T>::max()) + "]");
    }
    if (ec != std::errc() || p != e) fail(t, what);
    next();
    return v;
  }

  // key=VALUE, returning the value token position for messages.
  Token assignment(const char* key) {
    const Token k = peek();
    if (k.kind != Tok::word || k.text != key) fail(k, std::string("'") + key + "='");
    next();
    want_punct("=");
    return peek();
  }

  void config() {
    // Steps and expectations are read under the configuration (the workload decides which
    // actions and expectations exist), so it cannot change once one of them is read.
    if (seen_statement_) {
      fail(toks_[0], "config before the first step or expectation",
           "'config' after " + std::string(seen_statement_));
    }
    if (peek().kind == Tok::end) fail(peek(), "a setting (capacity=, hash=, schedule=, ...)");
    ScenarioConfig& c = scenario_.config;
    while (peek().kind != Tok::end) {
      const Token key = want_word("a setting (capacity=, hash=, schedule=, ...)");
      want_punct("=");
      if (!schedule_setting(key.text, c) && !map_setting(key.text, c) &&
          !backend_setting(key.text, c)) {
        fail(key,
             "a setting (capacity, min_capacity, max_capacity, hash, schedule, seed, strategy, "
             "pct_depth, workload, max_parallelism, key_groups, ttl, ttl_update, "
             "ttl_visibility, ttl_cleanup, ttl_key_switch, ttl_full_snapshot)");
      }
    }
    check_config(c);
  }

  // The value of a `schedule`, `seed`, `strategy`, `pct_depth` or `workload` setting; false
  // for another key.
  bool schedule_setting(const std::string& key, ScenarioConfig& c) {
    if (key == "schedule") {
      const Token v = want_word("'fixed' or 'free'");
      if (v.text != "fixed" && v.text != "free") fail(v, "'fixed' or 'free'");
      c.fixed_schedule = v.text == "fixed";
    } else if (key == "seed") {
      c.seed = number<std::uint64_t>("a seed (a number)");
    } else if (key == "strategy") {
      const Token v = want_word("'random' or 'pct'");
      if (v.text != "random" && v.text != "pct") fail(v, "'random' or 'pct'");
      c.strategy = v.text;
    } else if (key == "pct_depth") {
      c.pct_depth = positive("a PCT depth (a positive number)", 64);
    } else if (key == "workload") {
      const Token v = want_word("a workload (" + workload_names() + ")");
      const Workload* w = find_workload(v.text);
      if (w == nullptr) fail(v, "a workload (" + workload_names() + ")");
      language_ = w->scenario_language();
      c.workload = v.text;
    } else {
      return false;
    }
    return true;
  }

  // The value of a map's capacity or hash setting; false for another key.
  bool map_setting(const std::string& key, ScenarioConfig& c) {
    if (key == "capacity" || key == "initial_capacity") {
      c.initial_capacity = positive("a capacity (a positive number)", kAllocatedMax);
    } else if (key == "min_capacity") {
      c.min_capacity = positive("a capacity (a positive number)", kAllocatedMax);
    } else if (key == "max_capacity") {
      c.max_capacity = positive("a capacity (a positive number)", 1u << 30);
    } else if (key == "hash") {
      const Token v = want_word("'default' or 'identity'");
      if (v.text != "default" && v.text != "identity") fail(v, "'default' or 'identity'");
      c.identity_hash = v.text == "identity";
    } else {
      return false;
    }
    return true;
  }

  // The value of a backend setting (key groups, TTL); false for another key.
  bool backend_setting(const std::string& key, ScenarioConfig& c) {
    if (key == "max_parallelism") {
      c.max_parallelism = static_cast<std::int32_t>(
          positive("a max parallelism (a positive number)", kMaxParallelism));
    } else if (key == "key_groups") {
      c.key_groups = group_range("a key-group range FIRST-LAST");
    } else if (key == "ttl") {
      c.ttl_ms = bounded("a TTL in ms", 1, kMaxTtl);
    } else if (key == "ttl_update") {
      c.ttl_read_refresh = choice("'write' or 'read'", "write", "read");
    } else if (key == "ttl_visibility") {
      c.ttl_return_expired = choice("'never' or 'expired'", "never", "expired");
    } else if (key == "ttl_cleanup") {
      if (peek().kind == Tok::word && peek().text == "none") {
        next();
        c.ttl_cleanup = 0;
      } else {
        c.ttl_cleanup = positive("an incremental cleanup size or 'none'", kAllocatedMax);
      }
    } else if (key == "ttl_key_switch") {
      c.ttl_key_switch = choice("'off' or 'on'", "off", "on");
    } else if (key == "ttl_full_snapshot") {
      c.ttl_full_snapshot = choice("'off' or 'on'", "off", "on");
    } else {
      return false;
    }
    return true;
  }

  // The rules between settings of one config line.
  void check_config(const ScenarioConfig& c) {
    const ScenarioConfig d;
    const bool ttl_set = c.ttl_read_refresh != d.ttl_read_refresh ||
                         c.ttl_return_expired != d.ttl_return_expired ||
                         c.ttl_cleanup != d.ttl_cleanup || c.ttl_key_switch != d.ttl_key_switch ||
                         c.ttl_full_snapshot != d.ttl_full_snapshot;
    if ((c.ttl_ms != 0 || ttl_set) && !language_.keyed_states) {
      const std::string keyed =
          workload_names([](const Workload& w) { return w.scenario_language().keyed_states; });
      fail(toks_[0],
           "TTL settings in a workload of keyed state (" + keyed +
               "; TTL is a property of keyed state)",
           "a TTL setting in a " + c.workload.str() + " scenario");
    }
    if (ttl_set && c.ttl_ms == 0) {
      fail(toks_[0], "ttl=MS with the other TTL settings", "TTL settings without a ttl");
    }
    if (c.ttl_key_switch && c.ttl_cleanup == 0) {
      fail(toks_[0], "an incremental cleanup size with ttl_key_switch=on", "ttl_cleanup=none");
    }
    if (c.key_groups.last >= c.max_parallelism) {
      fail(toks_[0],
           "key_groups within [0, max_parallelism " + std::to_string(c.max_parallelism) + ")",
           std::to_string(c.key_groups.first) + "-" + std::to_string(c.key_groups.last));
    }
  }

  // Backends a scenario creates are bounded so bad input cannot exhaust memory.
  static constexpr std::uint32_t kMaxParallelism = 1024;
  // A TTL (and a clock step) fits in int64 ms with room to add them without overflow.
  static constexpr std::uint64_t kMaxTtl = std::uint64_t{1} << 62;

  // One of two words; true for the second.
  bool choice(const std::string& what, const char* first, const char* second) {
    const Token v = want_word(what);
    if (v.text != first && v.text != second) fail(v, what);
    return v.text == second;
  }

  // FIRST-LAST (the tokenizer reads "-LAST" as a negative number).
  GroupRange group_range(const std::string& what) {
    const Token at = peek();
    GroupRange r;
    r.first = static_cast<std::int32_t>(number<std::uint32_t>(what + " (a number, then -LAST)"));
    const Token last = peek();
    if (last.kind != Tok::number || last.text[0] != '-') fail(last, "'-' and the last key group");
    r.last = -number<std::int32_t>("'-' and the last key group");
    if (r.first > r.last || r.last >= static_cast<std::int32_t>(kMaxParallelism)) {
      fail(at, what + " with FIRST <= LAST < " + std::to_string(kMaxParallelism),
           std::to_string(r.first) + "-" + std::to_string(r.last));
    }
    return r;
  }

  // A range a checkpoint is restored into, within the scenario's max parallelism.
  GroupRange target_range(const std::string& what) {
    const Token at = peek();
    const GroupRange r = group_range(what);
    if (r.last >= scenario_.config.max_parallelism) {
      fail(at, what + " below max_parallelism " + std::to_string(scenario_.config.max_parallelism),
           "'" + std::to_string(r.first) + "-" + std::to_string(r.last) + "'");
    }
    return r;
  }

  // Capacities a scenario allocates up front are bounded so bad input cannot exhaust memory.
  static constexpr std::uint32_t kAllocatedMax = 1u << 20;

  std::uint32_t positive(const std::string& what, std::uint32_t max) {
    const Token t = peek();
    const auto v = number<std::uint32_t>(what);
    if (v == 0 || v > max) fail(t, what + " in [1, " + std::to_string(max) + "]", t.text);
    return v;
  }

  std::uint64_t bounded(const std::string& what, std::uint64_t min, std::uint64_t max) {
    const Token t = peek();
    const auto v = number<std::uint64_t>(what + " (a number)");
    if (v < min || v > max) {
      fail(t, what + " in [" + std::to_string(min) + ", " + std::to_string(max) + "]", t.text);
    }
    return v;
  }

  EntryKey key_ref() {
    if (at_punct("(")) {
      next();
      const auto k = number<std::uint64_t>("a key (a number)");
      want_punct(",");
      const auto n = number<std::int32_t>("a namespace (a number)");
      want_punct(")");
      return {k, n};
    }
    return {number<std::uint64_t>("a key: a number, or (key,namespace)"), 0};
  }

  StateValue value() {
    StateValue v;
    if (at_punct("[")) {
      next();
      if (!at_punct("]")) {
        v.push_back(number<std::int64_t>("a number"));
        while (at_punct(",")) {
          next();
          v.push_back(number<std::int64_t>("a number"));
        }
      }
      want_punct("]");
      return v;
    }
    v.push_back(number<std::int64_t>("a value: a number or [n, ...]"));
    return v;
  }

  ScenarioImage image() {
    ScenarioImage out;
    want_punct("{");
    if (!at_punct("}")) {
      for (;;) {
        const Token at = peek();
        const EntryKey k = key_ref();
        want_punct(":");
        if (!out.emplace(k, value()).second) fail(at, "each entry once", "a repeated entry");
        if (!at_punct(",")) break;
        next();
      }
    }
    want_punct("}");
    return out;
  }

  std::set<EntryKey> key_set() {
    std::set<EntryKey> out;
    want_punct("{");
    if (!at_punct("}")) {
      for (;;) {
        const Token at = peek();
        if (!out.insert(key_ref()).second) fail(at, "each entry once", "a repeated entry");
        if (!at_punct(",")) break;
        next();
      }
    }
    want_punct("}");
    return out;
  }

  void expectation(const Token& start) {
    if (seen_statement_ == nullptr) seen_statement_ = "an expectation";
    Expectation e;
    e.line = line_no_;
    e.column = start.column;
    const Token what = want_word(
        "a snapshot name, 'live', 'copied', 'versions', 'retired', 'failure' or 'latest'");
    if (what.text == "latest") {
      if (!language_.checkpoints) fail(what, expectation_of_workload(), "'latest'");
      e.kind = ExpectKind::latest;
      const Token name = want_word("a checkpoint name or 'none'");
      if (name.text != "none" && !snapshots_.count(name.text)) {
        fail(name, "'none' or a checkpoint started above (" + known_snapshots() + ")");
      }
      e.target = name.text;
    } else if (what.text == "copied") {
      copied_expectation(what, e);
    } else if (what.text == "versions") {
      if (!language_.map_internals) fail(what, expectation_of_workload(), "'versions'");
      e.kind = ExpectKind::versions;
      assignment("map");
      e.a = number<std::uint32_t>("a map version");
      assignment("h");
      e.b = number<std::uint32_t>("a highest required version");
    } else if (what.text == "retired") {
      if (!language_.map_internals) fail(what, expectation_of_workload(), "'retired'");
      e.kind = ExpectKind::retired;
      assignment("entries");
      e.a = number<std::uint32_t>("a count of retired entries");
      assignment("states");
      e.b = number<std::uint32_t>("a count of retired states");
    } else if (what.text == "failure") {
      e.kind = ExpectKind::failure;
      const Token check = peek();
      if (check.kind != Tok::word) fail(check, "a check id (result, image, I3, ...)");
      next();
      e.target = check.text;
    } else {
      image_expectation(what, e);
    }
    scenario_.items.emplace_back(std::move(e));
  }

  // `expect copied entries={...} states={...}` or `expect copied nothing`, after `copied`.
  void copied_expectation(const Token& what, Expectation& e) {
    if (!language_.map_internals) fail(what, expectation_of_workload(), "'copied'");
    if (!scenario_.config.fixed_schedule) {
      fail(what, "an expectation that holds in any interleaving",
           "'copied' in a free schedule (it needs schedule=fixed)");
    }
    e.kind = ExpectKind::copied;
    if (peek().kind == Tok::word && peek().text == "nothing") {
      next();
      return;
    }
    assignment("entries");
    e.copied_entries = key_set();
    assignment("states");
    e.copied_states = key_set();
  }

  // `expect NAME|live [into RANGE] [s=STATE] = {...}`, after the name.
  void image_expectation(const Token& what, Expectation& e) {
    e.kind = ExpectKind::image;
    if (what.text != "live" && !snapshots_.count(what.text)) {
      fail(what, "'live' or a snapshot started above (" + known_snapshots() + ")");
    }
    e.target = what.text;
    if (language_.keyed_states) {
      if (peek().kind == Tok::word && peek().text == "into") {
        if (what.text == "live") fail(peek(), "'s='", "'into' after 'live'");
        next();
        e.into = target_range("a key-group range FIRST-LAST");
      }
      assignment("s");
      e.state = state_name(nullptr);
    }
    want_punct("=");
    e.image = image();
  }

  std::string expectation_of_workload() const {
    return "an expectation of the " + scenario_.config.workload.str() + " workload";
  }

  std::string known_snapshots() const {
    if (snapshots_.empty()) return "none yet";
    std::string out;
    for (const auto& [name, line] : snapshots_) out += (out.empty() ? "" : ", ") + name;
    return out;
  }

  void steps() {
    const Token task = want_word("a task (writer, releaser or a snapshot name)");
    want_punct(":");
    const bool writer = task.text == "writer";
    const bool releaser = task.text == "releaser";
    const bool clock = task.text == "clock" && scenario_.config.ttl_ms != 0;
    if (task.text == "clock" && !clock) {
      fail(task, "a task: writer, releaser or a snapshot (a clock task needs config ttl=MS)");
    }
    if (!writer && !releaser && !clock && !snapshots_.count(task.text)) {
      fail(task, std::string("a task: writer, releaser, ") +
                     (scenario_.config.ttl_ms != 0 ? "clock, " : "") +
                     "or a snapshot started above (" + known_snapshots() + ")");
    }
    if (seen_statement_ == nullptr) seen_statement_ = "a step";
    for (;;) {
      StepLine s;
      s.task = task.text;
      s.line = line_no_;
      s.column = peek().column;
      action(s, writer, releaser);
      if (peek().kind == Tok::word && peek().text == "pause") {
        const Token p = next();
        if (!scenario_.config.fixed_schedule) {
          fail(p, "no `pause at` in a free schedule (the strategy chooses where tasks pause)",
               "'pause'");
        }
        const ActionKind k = s.action.kind;
        if (s.action.is(OpKind::snapshot_start) || k == ActionKind::cancel ||
            k == ActionKind::keep || k == ActionKind::release || k == ActionKind::checkpoint ||
            k == ActionKind::restore || k == ActionKind::fail || k == ActionKind::advance) {
          fail(p, "end of line (`" + std::string(action_name(s.action)) + "` has no yield point)",
               "'pause'");
        }
        want_keyword("at");
        const Token point = peek();
        if (point.kind != Tok::word) fail(point, "a yield point");
        bool known = false;
        std::string list;
        for (const std::string& y : yield_points()) {
          known = known || y == point.text;
          list += (list.empty() ? "" : ", ") + y;
        }
        if (!known) fail(point, "a yield point (" + list + ")");
        next();
        s.pause = point.text;
      }
      track_pause(s, task);
      scenario_.items.emplace_back(std::move(s));
      if (!at_punct(";")) break;
      next();
    }
  }

  // Fixed schedules: a paused task's next line must be `continue`, and only then.
  void track_pause(const StepLine& s, const Token& task) {
    if (!scenario_.config.fixed_schedule) return;
    TaskState& st = tasks_[s.task];
    if (s.action.kind == ActionKind::resume && !st.paused) {
      fail(task, "'continue' only after a step that paused", s.task + " is not paused");
    }
    if (s.action.kind != ActionKind::resume && st.paused) {
      throw Failure{s.column, "expected 'continue' (" + s.task + " paused at line " +
                                  std::to_string(st.paused_line) + "), found '" +
                                  action_name(s.action) + "'"};
    }
    st.paused = !s.pause.empty();
    st.paused_line = line_no_;
  }

  void action(StepLine& s, bool writer, bool releaser) {
    const Token verb = want_word("an action");
    Action& a = s.action;
    const std::string& v = verb.text;
    if (v == "continue") {
      a.kind = ActionKind::resume;
      if (!scenario_.config.fixed_schedule) {
        fail(verb, "an action ('continue' belongs to fixed schedules)", "'continue'");
      }
      return;
    }
    if (s.task == "clock" && !writer && !releaser && !snapshots_.count(s.task)) {
      if (v != "advance") fail(verb, "a clock action (advance MS)");
      a.kind = ActionKind::advance;
      a.x = static_cast<std::int64_t>(bounded("a time in ms", 0, kMaxTtl));
    } else if (writer && language_.keyed_states) {
      backend_writer_action(verb, a);
    } else if (writer) {
      writer_action(verb, a);
    } else if (releaser) {
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
      const Token name = want_word("a snapshot name");
      if (!snapshots_.count(name.text)) {
        fail(name, "a snapshot started above (" + known_snapshots() + ")");
      }
      a.snapshot = name.text;
    } else if (v == "fail" && language_.storage_faults) {
      a.kind = ActionKind::fail;
      want_keyword("at");
      want_keyword("write");
      const Token t = peek();
      a.budget = number<std::uint32_t>("a file operation number N >= 1");
      if (a.budget == 0) fail(t, "a file operation number N >= 1", "0");
    } else {
      if (v != "step") {
        fail(verb, language_.storage_faults
                       ? "a serializer action (step N, step all, fail at write N or continue)"
                       : "a serializer action (step N, step all or continue)");
      }
      a.kind = ActionKind::step;
      if (peek().kind == Tok::word && peek().text == "all") {
        next();
        a.budget = 0;
      } else {
        const Token t = peek();
        a.budget = number<std::uint32_t>("a number of entries or 'all'");
        if (a.budget == 0) fail(t, "a number of entries >= 1 or 'all'", "0");
      }
    }
  }

  // s=NAME: one of the backend's states; of kind `kind` unless that is null.
  std::string state_name(const ActionKind* kind) {
    const Token t = want_word("a state name");
    std::string names;
    for (const BackendStateInfo& info : backend_states()) {
      if (t.text == info.name && (kind == nullptr || *kind == info.kind)) return t.text;
      if (kind == nullptr || *kind == info.kind) {
        names += (names.empty() ? "" : ", ") + std::string(info.name);
      }
    }
    fail(t, kind == nullptr ? "a state name (" + names + ")"
                            : "the " + std::string(action_name(*kind)) + " state (" + names + ")");
  }

  std::vector<std::int32_t> namespace_list() {
    std::vector<std::int32_t> out;
    want_punct("[");
    if (!at_punct("]")) {
      out.push_back(number<std::int32_t>("a namespace (a number)"));
      while (at_punct(",")) {
        next();
        out.push_back(number<std::int32_t>("a namespace (a number)"));
      }
    }
    want_punct("]");
    return out;
  }

  // A writer line of the backend workload (grammar in docs/scenario-format.md).
  void backend_writer_action(const Token& verb, Action& a) {
    static const std::map<std::string, ActionKind> kWriter = {
        {"value", ActionKind::value_state},
        {"list", ActionKind::list_state},
        {"map", ActionKind::map_state},
        {"reducing", ActionKind::reducing_state},
        {"aggregating", ActionKind::aggregating_state},
        {"checkpoint", ActionKind::checkpoint},
        {"restore", ActionKind::restore}};
    const bool ttl = scenario_.config.ttl_ms != 0;
    if (ttl && verb.text == "cleanup") return cleanup_action(a);
    auto it = kWriter.find(verb.text);
    if (it == kWriter.end()) {
      fail(verb, std::string("a writer action of the backend workload (value, list, map, "
                             "reducing, aggregating, checkpoint, restore, ") +
                     (ttl ? "cleanup, " : "") + "or continue)");
    }
    a.kind = it->second;
    if (a.kind == ActionKind::checkpoint) {
      const Token name = want_word("a checkpoint name");
      new_task_name(name, "a checkpoint name", "a new checkpoint name");
      a.snapshot = name.text;
      return;
    }
    if (a.kind == ActionKind::restore) return restore_action(a);
    assignment("s");
    a.state = state_name(&a.kind);
    keyed(a);
    a.op = state_op(a.kind);
    state_operands(a);
  }

  // `cleanup s=STATE n=N|all`.
  void cleanup_action(Action& a) {
    a.kind = ActionKind::cleanup;
    assignment("s");
    const Token t = peek();
    a.state = state_name(nullptr);
    if (!is_ttl_state(a.state)) fail(t, "a state with TTL (count, events or attrs)");
    assignment("n");
    if (peek().kind == Tok::word && peek().text == "all") {
      next();
      a.budget = 0;  // every entry, then nothing expired may remain
    } else {
      a.budget = positive("a number of entries to visit or 'all'", kAllocatedMax);
    }
  }

  // `restore NAME into RANGE [and RANGE [then merge]]`, after the verb.
  void restore_action(Action& a) {
    const Token name = want_word("a checkpoint name");
    if (!snapshots_.count(name.text)) {
      fail(name, "a checkpoint started above (" + known_snapshots() + ")");
    }
    a.snapshot = name.text;
    want_keyword("into");
    a.extras.set().into = target_range("a key-group range FIRST-LAST");
    if (peek().kind != Tok::word || peek().text != "and") return;
    next();
    const Token second = peek();
    ActionExtras& ranges = a.extras.set();
    ranges.also = target_range("a second key-group range FIRST-LAST");
    const GroupRange& into = ranges.into;
    const GroupRange& also = ranges.also;
    if (also.first <= into.last && into.first <= also.last) {
      fail(second,
           "a second range apart from the first (" + std::to_string(into.first) + "-" +
               std::to_string(into.last) + "): the two backends of a split own distinct key groups",
           "'" + std::to_string(also.first) + "-" + std::to_string(also.last) + "'");
    }
    if (peek().kind == Tok::word && peek().text == "then") {
      next();
      want_keyword("merge");
      ranges.merge_back = true;
    }
  }

  // The operation word of a state action: one the state's kind has.
  StateOp state_op(ActionKind kind) {
    const Token op = want_word("an operation");
    const std::vector<StateOp> ops = [&]() -> std::vector<StateOp> {
      switch (kind) {
        case ActionKind::value_state:
          return {StateOp::update, StateOp::get, StateOp::clear};
        case ActionKind::list_state:
          return {StateOp::add, StateOp::add_all, StateOp::update,
                  StateOp::get, StateOp::clear,   StateOp::merge};
        case ActionKind::map_state:
          return {StateOp::put, StateOp::remove, StateOp::get, StateOp::clear};
        default:
          return {StateOp::add, StateOp::get, StateOp::clear, StateOp::merge};
      }
    }();
    std::string names;
    for (StateOp o : ops) {
      if (op.text == state_op_name(o)) return o;
      names += (names.empty() ? "" : ", ") + std::string(state_op_name(o));
    }
    fail(op, "an operation of a " + std::string(action_name(kind)) + " state (" + names + ")");
  }

  // What follows a state action's operation word: its number, values or sources.
  void state_operands(Action& a) {
    switch (a.op) {
      case StateOp::update:
        if (a.kind == ActionKind::list_state) {
          a.value = value();
        } else {
          a.x = number<std::int64_t>("a number");
        }
        return;
      case StateOp::add:
        a.x = number<std::int64_t>("a number");
        return;
      case StateOp::add_all:
        a.value = value();
        return;
      case StateOp::put:
        a.x = number<std::int64_t>("a user key (a number)");
        a.value = {number<std::int64_t>("a user value (a number)")};
        return;
      case StateOp::remove:
        a.x = number<std::int64_t>("a user key (a number)");
        return;
      case StateOp::get:
        if (a.kind == ActionKind::map_state) a.x = number<std::int64_t>("a user key (a number)");
        return;
      case StateOp::merge:
        a.extras.set().sources = namespace_list();
        return;
      case StateOp::clear:
        return;
    }
  }

  // A name for a new serializer task (snapshot or checkpoint).
  void new_task_name(const Token& name, const std::string& what, const std::string& fresh) {
    if (name.text == "writer" || name.text == "releaser" || name.text == "clock" ||
        name.text == "live" || name.text == "config" || name.text == "expect" ||
        name.text == "kills" || name.text == "latest" || name.text == "none") {
      fail(name, what, "the reserved word '" + name.text + "'");
    }
    if (snapshots_.count(name.text)) {
      fail(name, fresh,
           "'" + name.text + "', started at line " + std::to_string(snapshots_[name.text]));
    }
    snapshots_[name.text] = line_no_;
  }

  void keyed(Action& a) {
    assignment("k");
    a.entry.first = number<std::uint64_t>("a key (a number)");
    if (peek().kind == Tok::word && peek().text == "ns") {
      assignment("ns");
      a.entry.second = number<std::int32_t>("a namespace (a number)");
    }
  }

  void writer_action(const Token& verb, Action& a) {
    const auto it = std::find_if(kWriterOps.begin(), kWriterOps.end(),
                                 [&verb](OpKind k) { return verb.text == op_word(k); });
    if (it == kWriterOps.end()) {
      std::string words;
      for (const OpKind k : kWriterOps) words += std::string(op_word(k)) + ", ";
      words.resize(words.size() - 2);
      fail(verb, "a writer action (" + words + " or continue)");
    }
    a.kind = ActionKind::map_op;
    a.map_op = *it;
    switch (a.map_op) {
      case OpKind::put:
      case OpKind::put_and_get_old:
        keyed(a);
        assignment("v");
        a.value = value();
        return;
      case OpKind::remove:
      case OpKind::remove_and_get_old:
      case OpKind::get:
      case OpKind::contains:
        keyed(a);
        return;
      case OpKind::get_mutable: {
        keyed(a);
        want_keyword("then");
        const Token m = want_word("'append', 'overwrite' or 'pop'");
        if (m.text == "append") {
          a.mutation = Mutation::append;
        } else if (m.text == "overwrite") {
          a.mutation = Mutation::overwrite;
        } else if (m.text == "pop") {
          a.mutation = Mutation::pop;
        } else {
          fail(m, "'append', 'overwrite' or 'pop'");
        }
        a.x = number<std::int64_t>("a number");
        return;
      }
      case OpKind::transform:
        keyed(a);
        want_keyword("append");
        a.x = number<std::int64_t>("a number");
        return;
      case OpKind::snapshot_start: {
        const Token name = want_word("a snapshot name");
        new_task_name(name, "a snapshot name", "a new snapshot name");
        a.snapshot = name.text;
        return;
      }
      case OpKind::visit:
        assignment("budget");
        a.budget = number<std::uint32_t>("a number of buckets");
        assignment("salt");
        a.extras.set().salt = number<std::uint64_t>("a number");
        return;
      case OpKind::snapshot_release:
        return;  // not a writer operation: kWriterOps has no snapshot_release
    }
  }

  std::string file_;
  Scenario scenario_;
  ScenarioLanguage language_ = default_workload().scenario_language();
  std::vector<Token> toks_;
  std::size_t pos_ = 0;
  int line_no_ = 0;
  const char* seen_statement_ = nullptr;  // what first closed the configuration
  std::map<std::string, int> snapshots_;  // name -> line of its start
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
        throw Failure{static_cast<int>(nul) + 1, "expected text, found a NUL byte"};
      }
      parser.line(line, line_no);
    }
  } catch (const Failure& f) {
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
