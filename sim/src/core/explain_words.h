// Words of the explain renderers, shared by every workload's narrator: step lines taken
// apart, lists joined, paragraphs wrapped.
#pragma once

#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace cowstate::sim::explain_words {

inline std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string s;
  for (std::size_t i = 0; i < parts.size(); ++i) s += (i ? sep : "") + parts[i];
  return s;
}

// The first word of a step line ("put", "step", "continue", ...).
inline std::string verb_of(const std::string& action) { return action.substr(0, action.find(' ')); }

// The value of `name=` in a step line, if it has one.
inline std::optional<std::string> field_of(const std::string& action, const std::string& name) {
  std::istringstream words(action);
  for (std::string w; words >> w;) {
    if (w.rfind(name + "=", 0) == 0) return w.substr(name.size() + 1);
  }
  return std::nullopt;
}

// Wraps a paragraph to `width` columns, each line indented.
inline std::string wrap(const std::string& text, const std::string& indent,
                        std::size_t width = 96) {
  std::istringstream words(text);
  std::string word, line, out;
  while (words >> word) {
    if (!line.empty() && indent.size() + line.size() + 1 + word.size() > width) {
      out += indent + line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  if (!line.empty()) out += indent + line + "\n";
  return out;
}

}  // namespace cowstate::sim::explain_words
