// The scenario reader: the tokens of one line and the data notation every workload's
// grammar reads (cowstate/sim/scenario_reader.h).
#include "cowstate/sim/scenario_reader.h"

#include <cctype>

#include "cowstate/sim/text.h"

namespace cowstate::sim {

namespace {

bool is_word_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_word_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.';
}

// Splits one line (comment already cut) into tokens, the last one `end`.
std::vector<ScenarioToken> tokenize(std::string_view line) {
  std::vector<ScenarioToken> out;
  std::size_t i = 0;
  while (i < line.size()) {
    const char c = line[i];
    if (c == ' ' || c == '\t' || c == '\r') {
      ++i;
      continue;
    }
    ScenarioToken t;
    t.column = static_cast<int>(i) + 1;
    if (is_word_start(c)) {
      const std::size_t start = i;
      while (i < line.size() && is_word_char(line[i])) ++i;
      t.kind = TokenKind::word;
      t.text = std::string(line.substr(start, i - start));
    } else if (std::isdigit(static_cast<unsigned char>(c)) ||
               (c == '-' && i + 1 < line.size() &&
                std::isdigit(static_cast<unsigned char>(line[i + 1])))) {
      const std::size_t start = i;
      ++i;
      while (i < line.size() && std::isalnum(static_cast<unsigned char>(line[i]))) ++i;
      t.kind = TokenKind::number;
      t.text = std::string(line.substr(start, i - start));
    } else if (std::string_view(":;={}[](),").find(c) != std::string_view::npos) {
      t.kind = TokenKind::punct;
      t.text = std::string(1, c);
      ++i;
    } else {
      throw ScenarioSyntaxError{
          t.column, "unexpected character '" + printable(std::string_view(&c, 1)) + "'"};
    }
    out.push_back(std::move(t));
  }
  ScenarioToken end;
  end.column = static_cast<int>(line.size()) + 1;
  out.push_back(end);
  return out;
}

// The comma-separated items of `open ... close`, each read by `item`.
template <class Item>
void bracketed(ScenarioReader& in, const char* open, const char* close, Item&& item) {
  in.want_punct(open);
  if (!in.at_punct(close)) {
    for (;;) {
      item();
      if (!in.at_punct(",")) break;
      in.next();
    }
  }
  in.want_punct(close);
}

// "number 7", "'put'", "end of line": a token as messages name it.
std::string describe(const ScenarioToken& t) {
  switch (t.kind) {
    case TokenKind::end:
      return "end of line";
    case TokenKind::number:
      return "number " + t.text;
    case TokenKind::word:
    case TokenKind::punct:
      return "'" + t.text + "'";
  }
  return "?";
}

}  // namespace

void ScenarioReader::start_line(std::string_view text, int line_no) {
  line_no_ = line_no;
  toks_ = tokenize(text);
  pos_ = 0;
}

ScenarioToken ScenarioReader::next() {
  ScenarioToken t = peek();
  if (pos_ < toks_.size() - 1) ++pos_;
  return t;
}

ScenarioToken ScenarioReader::want_punct(const char* p) {
  if (!at_punct(p)) fail(peek(), std::string("'") + p + "'");
  return next();
}

ScenarioToken ScenarioReader::want_word(const std::string& what) {
  if (peek().kind != TokenKind::word) fail(peek(), what);
  return next();
}

void ScenarioReader::want_keyword(const char* word) {
  if (!at_word(word)) fail(peek(), std::string("'") + word + "'");
  next();
}

void ScenarioReader::want_end() {
  if (!at_end()) fail(peek(), "end of line");
}

void ScenarioReader::assignment(const char* key) {
  if (!at_word(key)) fail(peek(), std::string("'") + key + "='");
  next();
  want_punct("=");
}

bool ScenarioReader::choice(const std::string& what, const char* first, const char* second) {
  const ScenarioToken v = want_word(what);
  if (v.text != first && v.text != second) fail(v, what);
  return v.text == second;
}

std::uint32_t ScenarioReader::positive(const std::string& what, std::uint32_t max) {
  const ScenarioToken t = peek();
  const auto v = number<std::uint32_t>(what);
  if (v == 0 || v > max) fail(t, what + " in [1, " + std::to_string(max) + "]", t.text);
  return v;
}

std::uint64_t ScenarioReader::bounded(const std::string& what, std::uint64_t min,
                                      std::uint64_t max) {
  const ScenarioToken t = peek();
  const auto v = number<std::uint64_t>(what + " (a number)");
  if (v < min || v > max) {
    fail(t, what + " in [" + std::to_string(min) + ", " + std::to_string(max) + "]", t.text);
  }
  return v;
}

EntryKey ScenarioReader::keyed() {
  assignment("k");
  EntryKey out{number<std::uint64_t>("a key (a number)"), 0};
  if (at_word("ns")) {
    assignment("ns");
    out.second = number<std::int32_t>("a namespace (a number)");
  }
  return out;
}

EntryKey ScenarioReader::key_ref() {
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

StateValue ScenarioReader::value() {
  StateValue v;
  if (!at_punct("[")) {
    v.push_back(number<std::int64_t>("a value: a number or [n, ...]"));
    return v;
  }
  bracketed(*this, "[", "]", [&] { v.push_back(number<std::int64_t>("a number")); });
  return v;
}

ScenarioImage ScenarioReader::image() {
  ScenarioImage out;
  bracketed(*this, "{", "}", [&] {
    const ScenarioToken at = peek();
    const EntryKey k = key_ref();
    want_punct(":");
    if (!out.emplace(k, value()).second) fail(at, "each entry once", "a repeated entry");
  });
  return out;
}

std::set<EntryKey> ScenarioReader::key_set() {
  std::set<EntryKey> out;
  bracketed(*this, "{", "}", [&] {
    const ScenarioToken at = peek();
    if (!out.insert(key_ref()).second) fail(at, "each entry once", "a repeated entry");
  });
  return out;
}

std::vector<std::int32_t> ScenarioReader::namespace_list() {
  std::vector<std::int32_t> out;
  bracketed(*this, "[", "]",
            [&] { out.push_back(number<std::int32_t>("a namespace (a number)")); });
  return out;
}

GroupRange ScenarioReader::group_range(const std::string& what) {
  // The tokenizer reads "-LAST" as a negative number.
  const ScenarioToken at = peek();
  GroupRange r;
  r.first = static_cast<std::int32_t>(number<std::uint32_t>(what + " (a number, then -LAST)"));
  const ScenarioToken& last = peek();
  if (last.kind != TokenKind::number || last.text[0] != '-') {
    fail(last, "'-' and the last key group");
  }
  r.last = -number<std::int32_t>("'-' and the last key group");
  if (r.first > r.last || r.last >= static_cast<std::int32_t>(kMaxParallelism)) {
    fail(at, what + " with FIRST <= LAST < " + std::to_string(kMaxParallelism),
         std::to_string(r.first) + "-" + std::to_string(r.last));
  }
  return r;
}

GroupRange ScenarioReader::target_range(const std::string& what) {
  const ScenarioToken at = peek();
  const GroupRange r = group_range(what);
  if (r.last >= config_->max_parallelism) {
    fail(at, what + " below max_parallelism " + std::to_string(config_->max_parallelism),
         "'" + range_text(r) + "'");
  }
  return r;
}

void ScenarioReader::new_task_name(const ScenarioToken& name, const std::string& what,
                                   const std::string& fresh) {
  for (const char* reserved :
       {"writer", "releaser", "clock", "live", "config", "expect", "kills", "latest", "none"}) {
    if (name.text == reserved) fail(name, what, "the reserved word '" + name.text + "'");
  }
  if (started(name.text)) {
    fail(name, fresh,
         "'" + name.text + "', started at line " + std::to_string(started_[name.text]));
  }
  started_[name.text] = line_no_;
}

std::string ScenarioReader::started_list() const {
  if (started_.empty()) return "none yet";
  std::string out;
  for (const auto& [name, line] : started_) out += (out.empty() ? "" : ", ") + name;
  return out;
}

ScenarioToken ScenarioReader::started_task(const std::string& what) {
  const ScenarioToken name = want_word(what + " name");
  if (!started(name.text)) fail(name, what + " started above (" + started_list() + ")");
  return name;
}

void ScenarioReader::fail(const ScenarioToken& t, const std::string& expected) const {
  throw ScenarioSyntaxError{t.column, "expected " + expected + ", found " + describe(t)};
}

void ScenarioReader::fail(const ScenarioToken& t, const std::string& expected,
                          const std::string& found) const {
  throw ScenarioSyntaxError{t.column, "expected " + expected + ", found " + found};
}

std::string key_text(const EntryKey& k) {
  if (k.second == 0) return std::to_string(k.first);
  return "(" + std::to_string(k.first) + "," + std::to_string(k.second) + ")";
}

std::string value_text(const StateValue& v, bool sequence) {
  if (v.size() == 1 && !sequence) return std::to_string(v[0]);
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + std::to_string(v[i]);
  return out + "]";
}

std::string keyed_text(const EntryKey& k) {
  std::string out = "k=" + std::to_string(k.first);
  if (k.second != 0) out += " ns=" + std::to_string(k.second);
  return out;
}

std::string range_text(const GroupRange& r) {
  return std::to_string(r.first) + "-" + std::to_string(r.last);
}

std::string namespaces_text(const std::vector<std::int32_t>& ns) {
  std::string out = "[";
  for (std::size_t i = 0; i < ns.size(); ++i) out += (i ? "," : "") + std::to_string(ns[i]);
  return out + "]";
}

std::string key_set_text(const std::set<EntryKey>& keys) {
  std::string out = "{";
  for (const EntryKey& k : keys) out += (out.size() > 1 ? ", " : "") + key_text(k);
  return out + "}";
}

}  // namespace cowstate::sim
