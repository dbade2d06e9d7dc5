// Simulator throughput: steps per second of fuzz campaigns on one core, with every check
// on (deep check after every step) and with the deep check sampled. A benchmark, not a
// test: run it from a release build (build/release/bench/cowstate_sim_bench).
//
//   cowstate_sim_bench [--seconds S] [--ops N] [--sample K]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cowstate/sim/campaign.h"

namespace {

struct Figure {
  double steps_per_second;
  std::uint64_t steps;
  std::uint64_t runs;
  std::uint64_t deep_checks;
  std::uint64_t entries_checked;
};

Figure measure(double seconds, std::uint32_t ops, std::uint32_t deep_every) {
  cowstate::sim::CampaignOptions o;
  o.seed = 1;
  o.time_seconds = seconds;
  o.ops = ops;
  o.deep_check_every = deep_every;
  const cowstate::sim::CampaignSummary s =
      cowstate::sim::run_campaign(o, nullptr, nullptr, nullptr);
  return Figure{static_cast<double>(s.totals.steps) / s.seconds, s.totals.steps, s.runs,
                s.totals.deep_checks, s.totals.entries_checked};
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 5;
  std::uint32_t ops = 400;
  std::uint32_t sample = 100;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--seconds") == 0)
      seconds = std::atof(argv[i + 1]);
    else if (std::strcmp(argv[i], "--ops") == 0)
      ops = static_cast<std::uint32_t>(std::atoi(argv[i + 1]));
    else if (std::strcmp(argv[i], "--sample") == 0)
      sample = static_cast<std::uint32_t>(std::atoi(argv[i + 1]));
    else {
      std::fprintf(stderr, "usage: %s [--seconds S] [--ops N] [--sample K]\n", argv[0]);
      return 2;
    }
  }
  std::printf("simulator throughput, one core, %.0f s per figure, %u writer ops per run\n", seconds,
              ops);
  std::printf("%-32s %14s %10s %8s %12s\n", "checks", "steps/s", "steps", "runs", "deep checks");
  const Figure all = measure(seconds, ops, 1);
  std::printf("%-32s %14.0f %10llu %8llu %12llu\n", "every check, deep every step",
              all.steps_per_second, static_cast<unsigned long long>(all.steps),
              static_cast<unsigned long long>(all.runs),
              static_cast<unsigned long long>(all.deep_checks));
  const Figure sampled = measure(seconds, ops, sample);
  const std::string label = "deep check every " + std::to_string(sample) + " steps";
  std::printf("%-32s %14.0f %10llu %8llu %12llu\n", label.c_str(), sampled.steps_per_second,
              static_cast<unsigned long long>(sampled.steps),
              static_cast<unsigned long long>(sampled.runs),
              static_cast<unsigned long long>(sampled.deep_checks));
  std::printf("targets: >= 100000 steps/s with every check: %s; >= 1000000 steps/s sampled: %s\n",
              all.steps_per_second >= 100000 ? "PASS" : "MISS",
              sampled.steps_per_second >= 1000000 ? "PASS" : "MISS");
  return 0;
}
