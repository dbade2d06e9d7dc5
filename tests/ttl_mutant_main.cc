// cowstate_ttl_mutant_tests: the [ttl] test cases of ttl_test.cc under one planted TTL bug.
//
//   cowstate_ttl_mutant_tests --mutant NAME [catch2 options]   run under mutant NAME
//   cowstate_ttl_mutant_tests --mutant none                    run without a mutant
//   cowstate_ttl_mutant_tests --list-mutants                   the TTL mutants, one a line
//
// Exit status: Catch2's (0 when every test passed). scripts/ttl-mutants expects a failure
// under every TTL mutant and a pass under none. Built only in the mutants build.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <vector>

#include "cowstate/hooks.h"
#include "cowstate/sim/mutants.h"

int main(int argc, char** argv) {
  namespace mu = cowstate::mutants;
  std::vector<char*> rest = {argv[0]};
  bool chosen = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--list-mutants") {
      for (const cowstate::sim::PlantedBug& m : cowstate::sim::kPlantedBugs) {
        if (m.ttl) std::printf("%s\n", m.name());
      }
      return 0;
    }
    if (arg == "--mutant" && i + 1 < argc) {
      const std::string_view name = argv[++i];
      chosen = true;
      if (name == "none") {
        mu::active() = mu::Mutant::none;
        continue;
      }
      const mu::Mutant m = mu::mutant_named(name);
      if (m == mu::Mutant::none || !cowstate::sim::planted_bug(m).ttl) {
        std::fprintf(stderr, "cowstate_ttl_mutant_tests: unknown TTL mutant \"%.*s\"\n",
                     static_cast<int>(name.size()), name.data());
        return 2;
      }
      mu::active() = m;
      continue;
    }
    rest.push_back(argv[i]);
  }
  if (!chosen) {
    std::fprintf(stderr, "usage: cowstate_ttl_mutant_tests --mutant NAME|none [catch2 options]\n");
    return 2;
  }
  static char tag[] = "[ttl]";
  rest.push_back(tag);
  return Catch::Session().run(static_cast<int>(rest.size()), rest.data());
}
