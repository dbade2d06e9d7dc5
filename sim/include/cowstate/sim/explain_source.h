// What `cowstate explain` shows of a scenario file beside its steps: the comments that
// teach. Every workload's narrator uses it, so a tour's prose reaches the reader wherever
// the scenario's own lines put it.
//
// Where a comment block goes (a block: consecutive `#` lines, blank lines inside a block
// keep it open only until the next non-comment line decides where it belongs):
//   - before the first step line or expectation (the file's header, the `config` and
//     `kills` lines): the introduction;
//   - directly above a step line (no blank line between them): shown before that step;
//   - directly below a step line or one of its expectations, up to a blank line: shown
//     after that step (tours draw the map there: "#   old bucket 0: 12 -> 8 -> 4 -> 0");
//   - any other block: shown before the next step line, or at the end.
// Expectation lines are shown after the step they follow, as written. A comment at the end
// of a step line is shown with that step.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace cowstate::sim {

struct LineNotes {
  std::vector<std::string> above;  // comment lines, '#' and one space removed
  std::vector<std::string> after;  // comment lines and expectation lines ("expect ...")
  std::string trailing;            // the comment at the end of the line itself
};

struct ScenarioNotes {
  std::vector<std::string> intro;
  std::map<int, LineNotes> lines;    // by 1-based line number of a step line
  std::vector<std::string> closing;  // what no step line claims (a file of expectations only)
};

// The notes of scenario text `text`.
ScenarioNotes scenario_notes(const std::string& text);

// The notes of the scenario file at `path`; empty when it cannot be read.
ScenarioNotes scenario_notes_of_file(const std::string& path);

}  // namespace cowstate::sim
