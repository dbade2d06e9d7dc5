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

// For options whose numbers are listed once by a `for_each_field(options, f)` that calls
// f(name, field) per std::uint32_t field: the `name=value` items it prints, and the
// assignment of one parsed item (whether the key is one of them; *ok cleared on a bad value).
template <class Options, class ForEachField>
std::string field_items(const Options& options, ForEachField&& for_each_field) {
  std::string out;
  Options copy = options;
  for_each_field(copy, [&out](const char* name, std::uint32_t& v) {
    if (!out.empty()) out += ' ';
    out += name;
    out += '=';
    out += std::to_string(v);
  });
  return out;
}

template <class Options, class ForEachField>
bool assign_field(Options& options, ForEachField&& for_each_field, std::string_view key,
                  std::string_view value, bool* ok) {
  bool known = false;
  for_each_field(options, [&](const char* name, std::uint32_t& field) {
    if (key != name) return;
    known = true;
    *ok = parse_u32(value, &field);
  });
  return known;
}

}  // namespace cowstate::sim::detail
