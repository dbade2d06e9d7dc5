// The files the `cowstate` CLI reads: scenario files and case files, checked before they
// are read so that bad input is refused with a message and exit 2, never read forever.
//
// A file must be a regular file (not a device, a pipe or a directory) within a size limit
// (kScenarioBytesMax for scenarios, kCaseBytesMax for case files; docs/scenario-format.md);
// a scenario must parse and have at least one step line (the parser's rule).
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "cowstate/sim/scenario.h"

namespace cowstate::cli {

inline constexpr std::size_t kScenarioBytesMax = std::size_t{16} << 20;
inline constexpr std::size_t kCaseBytesMax = std::size_t{1} << 20;

// The whole file, or nullopt after a message on stderr that starts with `who`.
std::optional<std::string> read_input_file(const std::string& path, const char* who,
                                           std::size_t max_bytes);
// A parsed scenario file, or nullopt after a message (file:line:col: what was expected).
std::optional<sim::Scenario> load_scenario(const std::string& path, const char* who);

}  // namespace cowstate::cli
