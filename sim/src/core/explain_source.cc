// Comments of a scenario file placed beside its steps; see cowstate/sim/explain_source.h.
#include "cowstate/sim/explain_source.h"

#include <fstream>
#include <sstream>

#include "cowstate/assert.h"

namespace cowstate::sim {

namespace {

enum class LineKind { blank, comment, setting, expectation, step };

std::string trim(const std::string& s) {
  const std::size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const std::size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

LineKind kind_of(const std::string& line) {
  const std::string t = trim(line);
  if (t.empty()) return LineKind::blank;
  if (t[0] == '#') return LineKind::comment;
  const std::string word = t.substr(0, t.find_first_of(" \t"));
  if (word == "config" || word == "kills") return LineKind::setting;
  if (word == "expect") return LineKind::expectation;
  return LineKind::step;
}

// A comment line without its '#' and the one space after it.
std::string comment_text(const std::string& line) {
  std::string t = trim(line);
  COWSTATE_ASSERT(!t.empty() && t[0] == '#', "REQUIRES", "a comment line");
  t.erase(0, 1);
  if (!t.empty() && t[0] == ' ') t.erase(0, 1);
  return t;
}

void append(std::vector<std::string>& to, std::vector<std::string>& block) {
  while (!block.empty() && block.back().empty()) block.pop_back();
  to.insert(to.end(), block.begin(), block.end());
  block.clear();
}

// Reads the file line by line; see the rules in the header.
class NoteReader {
 public:
  void line(const std::string& text, int number) {
    const LineKind k = kind_of(text);
    if (k == LineKind::comment) {
      if (pending_.empty()) pending_after_ = last_step_ > 0 && follows_step_;
      pending_.push_back(comment_text(text));
    } else if (k == LineKind::blank) {
      if (!pending_.empty() && pending_after_) {
        append(out_.lines[last_step_].after, pending_);
      } else if (!pending_.empty() && !pending_.back().empty()) {
        pending_.emplace_back();
      }
    } else if (k == LineKind::setting) {
      append(out_.intro, pending_);
    } else if (k == LineKind::expectation) {
      if (last_step_ == 0) {
        append(out_.closing, pending_);
        out_.closing.push_back(code_part(text));
      } else {
        append(out_.lines[last_step_].after, pending_);
        out_.lines[last_step_].after.push_back(code_part(text));
      }
    } else {
      LineNotes& notes = out_.lines[number];
      append(notes.above, pending_);
      if (const std::size_t hash = text.find('#'); hash != std::string::npos) {
        notes.trailing = trim(text.substr(hash + 1));
      }
      last_step_ = number;
    }
    follows_step_ = k == LineKind::step || k == LineKind::expectation ||
                    (k == LineKind::comment && follows_step_);
  }

  ScenarioNotes finish() {
    if (last_step_ > 0) {
      append(out_.lines[last_step_].after, pending_);
    } else {
      append(out_.intro, pending_);
    }
    return std::move(out_);
  }

 private:
  static std::string code_part(const std::string& text) {
    return trim(text.substr(0, text.find('#')));
  }

  ScenarioNotes out_;
  std::vector<std::string> pending_;
  bool pending_after_ = false;  // the pending block began right below a step or expectation
  bool follows_step_ = false;   // the lines since the last blank one began at a step
  int last_step_ = 0;
};

}  // namespace

ScenarioNotes scenario_notes(const std::string& text) {
  NoteReader reader;
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) reader.line(line, number);
  return reader.finish();
}

ScenarioNotes scenario_notes_of_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::ostringstream text;
  text << in.rdbuf();
  return scenario_notes(text.str());
}

}  // namespace cowstate::sim
