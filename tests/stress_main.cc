// Catch2 main for cowstate_stress_tests (real-thread stress tests; run under TSan by
// scripts/test). CTest registers each test case as "stress/<test case name>".
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
