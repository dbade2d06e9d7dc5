// Catch2 main for cowstate_probe_tests: registers the probe workload (and its planted-bug
// twin) before any run, then runs the tests.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "probe_workload.h"

int main(int argc, char* argv[]) {
  cowstate::sim::register_workload(cowstate::sim::probe::probe_workload(false));
  cowstate::sim::register_workload(cowstate::sim::probe::probe_workload(true));
  return Catch::Session().run(argc, argv);
}
