// The planted bugs from the CLI's side: switching one on for a run (`--mutant`), and the
// kill matrix (`cowstate mutants`), which fuzzes every planted bug of the catalog
// (impl/include/cowstate/hooks.h) and reports whether, how fast and by which check the
// testbed killed it, and (with a build tree) whether the test suites kill it too. Only a mutants
// build can switch a bug on; elsewhere each entry point says so and the tool exits 2.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cowstate/sim/scenario.h"
#include "cowstate/sim/shrink.h"

namespace cowstate::cli {

// Switches on the planted bug `which` for one scenario: "" none, "kills" the one the
// scenario names, else by name. False (after a message) when this build cannot.
bool activate_mutant(const std::string& which, const sim::Scenario& s);
// Switches on the planted bug `name` ("" none). False (after a message) when this build
// cannot or the name is unknown.
bool activate_mutant_named(const std::string& name);
void deactivate_mutants();
// The planted bug switched on now ("" when none, or not a mutants build).
std::string active_mutant_name();

struct KillMatrixOptions {
  double seconds_per_mutant = 10;
  // Runs of fuzzing per mutant (0: as many as the seconds allow); with seconds to spare, the
  // matrix is the same on every machine.
  std::uint64_t runs_per_mutant = 0;
  std::uint32_t ops = 400;
  bool json = false;
  std::string negative_dir;  // hand-minimized negative scenarios to check and compare with
  std::string out_dir;       // where each kill's shrunk scenario is written
  double shrink_seconds = 10;
  // Candidate runs to shrink each kill: unlike seconds, the same bound on every machine.
  std::uint64_t shrink_runs = sim::ShrinkOptions{}.max_runs;
  std::uint32_t deep_check_every = 1;  // the campaigns' deep-check cadence
  // A build tree of the mutants preset whose tests labelled `mutant-kill` (the unit suites and
  // the scenario files but the negative ones) run under each mutant: the ctest column.
  std::string ctest_dir;
  bool list = false;  // only list the catalog: name, workload, "ttl" or "-", description
  std::vector<std::string> only;  // the planted bugs to run; empty: all of them
};

// With options.list: prints the catalog, a line per planted bug, and returns 0 (any build).
// Otherwise exit 0 when every mutant is killed (and, with a negative directory, every negative
// scenario fails under its mutant only and no shrunk kill is over twice its size, or over
// its `shrunk_at_most`), else 1;
// 2 in a build without mutants.
int run_kill_matrix(const KillMatrixOptions& options);

}  // namespace cowstate::cli
