// What a workload's scenario grammar is written with: a reader over the tokens of one
// scenario line, and the notation every workload prints its data in.
//
// The scenario parser (sim/src/core/scenario_parse.cc) reads configuration, expectations and
// the lines of the releaser, serializer and clock tasks itself; a writer line's action it
// hands to the workload the file's config line names (Workload::parse_writer_action), with a
// ScenarioReader positioned after the action's word. Whatever the workload reads goes through
// the reader, so every workload's errors say file:line:col, "expected X, found Y", alike.
//
//   void parse_writer_action(ScenarioReader& in, const ScenarioToken& verb, Action* a) {
//     if (verb.text != "put") in.fail(verb, "a writer action (put or continue)");
//     a->entry = in.keyed();      // k=K [ns=N]
//     in.assignment("v");
//     a->value = in.value();      // N or [N, ...]
//   }
//
// Thread safety: a reader belongs to one parse.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "cowstate/sim/scenario.h"

namespace cowstate::sim {

enum class TokenKind : std::uint8_t { end, word, number, punct };

struct ScenarioToken {
  TokenKind kind = TokenKind::end;
  std::string text;
  int column = 0;  // 1-based
};

// Thrown by ScenarioReader::fail; the parser turns it into a ParseError at the line it reads.
struct ScenarioSyntaxError {
  int column;
  std::string message;
};

class ScenarioReader {
 public:
  // `config` is the scenario's configuration as read so far (it outlives the reader).
  explicit ScenarioReader(const ScenarioConfig& config) : config_(&config) {}

  // Splits one line (its comment already cut) into tokens and reads from its start.
  void start_line(std::string_view text, int line_no);
  int line_no() const { return line_no_; }
  const ScenarioConfig& config() const { return *config_; }

  // --- tokens ---
  const ScenarioToken& peek(std::size_t ahead = 0) const {
    return toks_[std::min(pos_ + ahead, toks_.size() - 1)];
  }
  ScenarioToken next();
  const ScenarioToken& first() const { return toks_[0]; }
  bool at_end() const { return peek().kind == TokenKind::end; }
  bool at_word(std::string_view w) const {
    return peek().kind == TokenKind::word && peek().text == w;
  }
  bool at_punct(const char* p) const { return peek().kind == TokenKind::punct && peek().text == p; }
  ScenarioToken want_punct(const char* p);
  ScenarioToken want_word(const std::string& what);
  void want_keyword(const char* word);
  void want_end();
  // `key=`: what follows is its value.
  void assignment(const char* key);
  // One of two words; true for the second.
  bool choice(const std::string& what, const char* first, const char* second);

  // --- numbers ---
  template <class T>
  T number(const std::string& what);
  // A number in [1, max].
  std::uint32_t positive(const std::string& what, std::uint32_t max);
  // A number in [min, max].
  std::uint64_t bounded(const std::string& what, std::uint64_t min, std::uint64_t max);

  // --- the data every workload writes alike ---
  // `k=K [ns=N]`.
  EntryKey keyed();
  // `K` or `(K,N)`.
  EntryKey key_ref();
  // `N` or `[N, ...]`.
  StateValue value();
  // `{KEY:VALUE, ...}`, each key once.
  ScenarioImage image();
  // `{KEY, ...}`, each key once.
  std::set<EntryKey> key_set();
  // `[N, ...]` of namespaces.
  std::vector<std::int32_t> namespace_list();
  // FIRST-LAST, FIRST <= LAST < kMaxParallelism.
  GroupRange group_range(const std::string& what);
  // A group range below the scenario's max parallelism: where a checkpoint is restored.
  GroupRange target_range(const std::string& what);

  // --- task names ---
  // `name` starts a new serializer task (a snapshot or a checkpoint): not a reserved word,
  // not started before. `what` is the expected thing, `fresh` the same when it is taken.
  void new_task_name(const ScenarioToken& name, const std::string& what, const std::string& fresh);
  bool started(const std::string& name) const { return started_.count(name) != 0; }
  // The tasks started so far, for messages ("s1, s2" or "none yet").
  std::string started_list() const;
  // A word naming a task started above; `what` says which kind ("a checkpoint").
  ScenarioToken started_task(const std::string& what);

  // --- errors ---
  [[noreturn]] void fail(const ScenarioToken& t, const std::string& expected) const;
  [[noreturn]] void fail(const ScenarioToken& t, const std::string& expected,
                         const std::string& found) const;

  // Bounds that keep bad input from exhausting memory: capacities a scenario allocates up
  // front, and the key groups of the backends it creates.
  static constexpr std::uint32_t kAllocatedMax = 1u << 20;
  static constexpr std::uint32_t kMaxParallelism = 1024;
  // A TTL (and a clock step) fits in int64 ms with room to add them without overflow.
  static constexpr std::uint64_t kMaxTtl = std::uint64_t{1} << 62;

 private:
  const ScenarioConfig* config_;
  std::vector<ScenarioToken> toks_;
  std::size_t pos_ = 0;
  int line_no_ = 0;
  std::map<std::string, int> started_;  // task name -> the line that started it
};

template <class T>
T ScenarioReader::number(const std::string& what) {
  const ScenarioToken& t = peek();
  if (t.kind != TokenKind::number) fail(t, what);
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

// The notation of the data, as the reader reads it back.
std::string key_text(const EntryKey& k);                             // 3 or (3,1)
std::string value_text(const StateValue& v, bool sequence = false);  // 7 or [7,8]
std::string keyed_text(const EntryKey& k);                           // k=3 ns=1
std::string range_text(const GroupRange& r);                         // 0-3
std::string namespaces_text(const std::vector<std::int32_t>& ns);    // [1,2]
std::string key_set_text(const std::set<EntryKey>& keys);            // {1, (2,1)}

}  // namespace cowstate::sim
