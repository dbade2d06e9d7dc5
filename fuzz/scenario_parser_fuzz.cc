// libFuzzer target for the scenario parser. Any input must either parse or yield an error
// at a position inside the input; whatever parses must print to text that parses back to
// the same scenario (the printer's round-trip property, on inputs nobody wrote by hand).
// Seeds: every scenario file in scenarios/ (scripts/fuzz passes the folders).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "cowstate/sim/scenario.h"

namespace {

[[noreturn]] void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "scenario_parser_fuzz: %s\n%s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace cowstate::sim;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  ParseError error;
  auto parsed = parse_scenario(text, "input", &error);
  if (!parsed) {
    std::size_t lines = 1;
    for (char c : text) lines += c == '\n' ? 1 : 0;
    if (error.line < 1 || static_cast<std::size_t>(error.line) > lines || error.column < 1 ||
        error.message.empty()) {
      fail("an error outside the input or without a message", error.to_string());
    }
    return 0;
  }
  const std::string printed = print_scenario(*parsed, "round trip");
  ParseError again_error;
  auto again = parse_scenario(printed, "printed", &again_error);
  if (!again) fail("printed text does not parse", again_error.to_string() + "\n" + printed);
  if (!(*again == *parsed)) fail("printed text parses to another scenario", printed);
  return 0;
}
