// The failure pipeline of the `cowstate` CLI: from a failing run to a report a user can
// trust, in an order that loses nothing when a later step crashes:
//
//   1. the report is printed and flushed: seed, strategy, outcome, the failure's signature,
//      what the check saw, the options, the last trace lines and a replay command that
//      pastes (the binary as invoked, absolute file paths);
//   2. the case file is written (fuzz), which `cowstate replay` reruns exactly;
//   3. the crash hint names that failure, its case file and the phase, so a crash while
//      shrinking still points at the original failure;
//   4. the run is recorded, written down as a fixed-schedule scenario and shrunk while it
//      fails the same way (the same FailureSignature, failure.h);
//   5. the shrunk scenario is written with a header: who found it, the signature, the tool
//      version and the command that replays it;
//   6. with --json, one record per failure carries all of the above.
//
// Everything here runs on the main thread; the crash handler only reads a fixed buffer.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cowstate/sim/campaign.h"
#include "cowstate/sim/scenario.h"
#include "cowstate/sim/shrink.h"

namespace cowstate::cli {

using sim::CaseSpec;
using sim::FinishedRun;
using sim::RunResult;
using sim::Scenario;

// Exit codes besides those of outcomes (failure.h).
constexpr int kExitUsage = 2;
constexpr int kExitCrash = 3;

// The binary as it was invoked: its absolute path when argv[0] names a path, the bare name
// when the shell found it on PATH. Set once in main().
void set_invoked_as(const char* argv0);
const std::string& invoked_as();
// `path` made absolute (against the current directory), lexically normal, quoted for a
// shell when it needs to be.
std::string pasteable(const std::string& path);

// Line-buffers stdout when it is not a terminal (a pipe, a file), so a crash loses no
// finished line, and installs the fatal-signal handlers (not under a sanitizer).
void prepare_output();
// What the crash handler prints after "crashed with SIGNAL": the run or phase in flight.
void set_crash_hint(const std::string& hint);
// Crashes (SIGSEGV) when the environment variable COWSTATE_CRASH_WHILE names `phase`: how
// the CLI tests prove that a crash in that phase loses no report (tests/cli/crash.sh).
void crash_if_asked(const char* phase);

// The command that reruns a generated run: `replay CASE` when there is a case file, else
// the fuzz command line of that single seed.
std::string replay_command(const CaseSpec& spec, const std::string& case_file);

// Writes `text` to DIR/NAME, creating DIR; the absolute path, or "" after a message on
// stderr.
std::string write_file(const std::string& dir, const std::string& name, const std::string& text);
// The case file of a finished run, DIR/case-SEED.txt (absolute), or "".
std::string write_case_file(const std::string& dir, const CaseSpec& spec);

// Step 1: the report of a failing generated run.
void print_failure(const FinishedRun& run, const std::string& case_file);
// What `cowstate run` prints for a failing scenario.
void print_run_failure(const RunResult& r);

struct Shrunk {
  sim::ShrinkResult result;
  std::string path;  // the written scenario (absolute), "" when not written
  std::string text;  // the scenario as written
  // The text, parsed and run again, fails with result.signature (a shrinker or printer bug
  // otherwise, which is reported).
  bool replays_same = false;
};

struct ShrinkRequest {
  std::string origin;   // "Found by:" in the header: the command that found the failure
  std::string out_dir;  // where to write it ("" : nowhere)
  std::string name;     // its file name
  double seconds = 30;  // time to shrink
  std::string mutant;   // the planted bug active, which the scenario `kills` ("" : none)
  bool show = true;     // print what was done and the scenario
  std::uint64_t runs = sim::ShrinkOptions{}.max_runs;  // candidate runs to shrink
};

// Steps 4 and 5 for a failing scenario (a fixed schedule) that failed as `failure`.
Shrunk shrink_to_file(const Scenario& failing, const sim::FailureSignature& failure,
                      const ShrinkRequest& request);
// Steps 4 and 5 for a failing generated run; nullopt when the run left no schedule to write
// down (it failed in its setup), after saying so.
std::optional<Shrunk> shrink_case(const CaseSpec& spec, const RunResult& failure,
                                  const ShrinkRequest& request);

// The JSON record of one finished run (step 6 adds the failure's files when it failed).
nlohmann::json run_json(const FinishedRun& run, const std::string& campaign_id);
// What a run (or a campaign's totals) checked: steps, ops, snapshots, entries, deep checks.
nlohmann::json stats_json(const sim::RunStats& stats);

// Distinct failures of a campaign or an exploration, by signature, in the order found.
class FailureTally {
 public:
  struct Entry {
    sim::FailureSignature signature;
    std::uint64_t runs = 0;
    std::uint64_t first_run = 0;
    std::uint64_t first_seed = 0;
    std::string case_file, shrunk_file, replay;
  };
  // Counts a failure; true when its signature is new (the caller then shrinks it).
  bool add(const sim::FailureSignature& signature, std::uint64_t run, std::uint64_t seed);
  // The entry of a signature added before.
  Entry& at(const sim::FailureSignature& signature);
  const std::vector<Entry>& entries() const noexcept { return entries_; }
  std::uint64_t failures() const noexcept;
  void print() const;  // the text summary of distinct failures
  nlohmann::json to_json() const;

 private:
  std::vector<Entry> entries_;
  std::map<std::string, std::size_t> index_;  // signature text -> entries_
};

}  // namespace cowstate::cli
