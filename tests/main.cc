// Catch2 main for cowstate_tests. Test files only #include <catch2/catch.hpp> (and
// <rapidcheck/catch.h> for properties).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
