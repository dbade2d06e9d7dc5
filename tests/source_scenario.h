// A scenario file of the source tree, parsed (tests of explain and of coverage run the
// repository's tours and smoke scenarios). REQUIRES: COWSTATE_SOURCE_DIR, a Catch2 test.
#pragma once

#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>
#include <string>

#include "cowstate/sim/scenario.h"

namespace cowstate::sim {

inline Scenario load_source_scenario(const std::string& relative) {
  const std::string path = std::string(COWSTATE_SOURCE_DIR) + "/" + relative;
  std::ifstream in(path);
  REQUIRE(in);
  std::stringstream text;
  text << in.rdbuf();
  ParseError error;
  auto s = parse_scenario(text.str(), path, &error);
  INFO(error.to_string());
  REQUIRE(s);
  return *s;
}

}  // namespace cowstate::sim
