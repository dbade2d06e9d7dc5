// Command-line options shared by `cowstate` and `cowstate-isolation`: numbers that are
// checked, never wrapped or rounded, and the --version flag.
//
// CLI11 converts "-1" into an unsigned option by wrapping it (18446744073709551615), clamps
// "99999999999999999999999", accepts "nan" for a double and prints a bound of DBL_MAX as a
// 309-digit number. These options read the text themselves: an unsigned option takes plain
// decimal digits within [min, max]; a seconds option takes a finite decimal number within
// [min, max]. Anything else is refused with a message naming the option, the range and what
// was found, and the tool exits with 2 (bad input).
#pragma once

#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include "core/build_info.h"

namespace cowstate::cli {

// Plain decimal digits within [min, max]; nullopt for signs, spaces, hex, exponents or
// values out of range.
inline std::optional<std::uint64_t> parse_unsigned(std::string_view text, std::uint64_t min,
                                                   std::uint64_t max) {
  if (text.empty() || text.size() > 20) return std::nullopt;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  std::uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < min || v > max) {
    return std::nullopt;
  }
  return v;
}

// A finite decimal number ("20", "0.5") within [min, max]; nullopt for nan, inf, hex floats,
// exponents and anything out of range.
inline std::optional<double> parse_decimal(std::string_view text, double min, double max) {
  if (text.empty() || text.size() > 32) return std::nullopt;
  std::size_t dots = 0;
  for (char c : text) {
    if (c == '.') {
      ++dots;
    } else if (c < '0' || c > '9') {
      return std::nullopt;
    }
  }
  if (dots > 1 || text == ".") return std::nullopt;
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v) || v < min ||
      v > max) {
    return std::nullopt;
  }
  return v;
}

// A bound as a person writes it: 1000000 stays 1000000, 0.5 stays 0.5.
inline std::string bound_text(double v) {
  std::string s = std::to_string(v);
  s.erase(s.find_last_not_of('0') + 1);
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

// --NAME UINT in [min, max] into `out`; the help shows `out`'s value as the default.
template <class T>
CLI::Option* unsigned_option(CLI::App* app, const std::string& name, T& out, std::uint64_t min,
                             std::uint64_t max, const std::string& description) {
  CLI::Option* o = app->add_option_function<std::string>(
      name,
      [&out, name, min, max](const std::string& text) {
        const auto v = parse_unsigned(text, min, max);
        if (!v) {
          throw CLI::ValidationError(name, "expected an unsigned integer in [" +
                                               std::to_string(min) + ", " + std::to_string(max) +
                                               "], found '" + text + "'");
        }
        out = static_cast<T>(*v);
      },
      description);
  o->type_name("UINT")->default_str(std::to_string(out));
  return o;
}

// --NAME SECONDS, a finite decimal number in [min, max], into `out`.
inline CLI::Option* seconds_option(CLI::App* app, const std::string& name, double& out, double min,
                                   double max, const std::string& description) {
  CLI::Option* o = app->add_option_function<std::string>(
      name,
      [&out, name, min, max](const std::string& text) {
        const auto v = parse_decimal(text, min, max);
        if (!v) {
          throw CLI::ValidationError(name, "expected a number of seconds in [" + bound_text(min) +
                                               ", " + bound_text(max) + "], found '" + text + "'");
        }
        out = *v;
      },
      description);
  o->type_name("SECONDS")->default_str(bound_text(out));
  return o;
}

// --version: "TOOL 0.2.0 (git 543b0b1c8d2e)".
inline void add_version_flag(CLI::App& app, const std::string& tool) {
  app.set_version_flag("--version", tool + " " + sim::version_line(),
                       "print the version and the git commit of this build, then exit");
}

}  // namespace cowstate::cli
