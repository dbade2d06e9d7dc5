#include <catch2/catch.hpp>
#include <string_view>

#include "cowstate/version.h"

TEST_CASE("the library reports the project version 0.2.0", "[smoke]") {
  REQUIRE(std::string_view(cowstate::version_string()) == "0.2.0");
}
