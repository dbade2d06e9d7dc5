// `key=value key=value ...` lines, as the workloads' options print and case files carry
// them: the splitting and the number parsing every workload's parse_options() shares.
#pragma once

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>

namespace cowstate::sim::detail {

inline bool parse_u32(std::string_view text, std::uint32_t* out) {
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && p == text.data() + text.size();
}

// Splits `key=value key=value ...`; `assign(key, value, &ok)` returns whether it knows the
// key and clears ok for a bad value. False (with *error naming the column) on a problem.
template <class Assign>
bool parse_items(std::string_view line, std::string* error, Assign&& assign) {
  std::size_t pos = 0;
  while (pos < line.size()) {
    while (pos < line.size() && line[pos] == ' ') ++pos;
    if (pos >= line.size()) break;
    std::size_t end = line.find(' ', pos);
    if (end == std::string_view::npos) end = line.size();
    const std::string_view item = line.substr(pos, end - pos);
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      *error = "column " + std::to_string(pos + 1) + ": expected key=value, found '" +
               std::string(item) + "'";
      return false;
    }
    const std::string_view key = item.substr(0, eq), value = item.substr(eq + 1);
    bool ok = true;
    if (!assign(key, value, &ok)) {
      *error = "column " + std::to_string(pos + 1) + ": unknown option '" + std::string(key) + "'";
      return false;
    }
    if (!ok) {
      *error = "column " + std::to_string(pos + eq + 2) + ": bad value for '" + std::string(key) +
               "': '" + std::string(value) + "'";
      return false;
    }
    pos = end;
  }
  return true;
}

}  // namespace cowstate::sim::detail
