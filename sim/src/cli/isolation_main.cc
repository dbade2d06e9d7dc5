// cowstate-isolation: runs the isolation driver (cowstate/sim/isolation.h) for about
// --seconds, cycling through the option mixes with one seed after another, and prints what
// it checked. A reader thread checks and releases snapshots detached from the writer while
// the writer goes on writing, so snapshot iteration and release really happen on another
// thread.
//
//   cowstate-isolation [--seconds 20] [--seed 1] [--keys N] [--mix I] [--ops N] [--runs N]
//                      [--no-reader]
//
// Exit codes: 0 every check passed; 1 a difference between the map and the model (seed,
// step, op and diff printed, with a replay command); 2 bad command line.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "cli/cli_options.h"
#include "cowstate/sim/isolation.h"

namespace {

using cowstate::sim::IsolationCounters;
using cowstate::sim::IsolationMix;
using cowstate::sim::IsolationRun;
using Clock = std::chrono::steady_clock;

// Checks detached snapshots on its own thread and releases them.
class Reader {
 public:
  struct Item {
    IsolationRun::Detached snapshots;
    std::uint64_t seed = 0;
    std::uint64_t step = 0;  // the writer's step when it detached them
  };

  Reader() : thread_([this] { loop(); }) {}
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;
  ~Reader() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

  void push(Item item) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(item));
    }
    wake_.notify_all();
  }

  // Waits until every pushed snapshot was checked and released; returns the first failure.
  std::optional<std::string> drain() {
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait(lock, [this] { return queue_.empty() && !busy_; });
    return failure_;
  }

  std::uint64_t checked() {
    std::lock_guard<std::mutex> lock(mu_);
    return checked_;
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ with nothing left
      Item item = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      std::optional<std::string> bad = check(item);
      lock.lock();
      busy_ = false;
      ++checked_;
      if (bad && !failure_) failure_ = std::move(bad);
      idle_.notify_all();
    }
  }

  static std::optional<std::string> check(Item& item) {
    std::optional<std::string> bad;
    auto& boxed = item.snapshots.boxed;
    auto& inlined = item.snapshots.inlined;
    if (boxed) {
      bad = cowstate::sim::check_snapshot<IsolationRun::BoxedState>(boxed->handle, boxed->expected);
      boxed->handle.release();
    }
    if (inlined && !bad) {
      bad = cowstate::sim::check_snapshot<IsolationRun::InlineState>(inlined->handle,
                                                                     inlined->expected);
    }
    if (inlined) inlined->handle.release();
    if (!bad) return std::nullopt;
    return "reader thread: seed " + std::to_string(item.seed) + ", detached after step " +
           std::to_string(item.step) + ": " + *bad;
  }

  std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable idle_;
  std::deque<Item> queue_;
  bool busy_ = false;
  bool stop_ = false;
  std::uint64_t checked_ = 0;
  std::optional<std::string> failure_;
  std::thread thread_;  // last: starts after every other member exists
};

std::string millions(std::uint64_t n) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fM", static_cast<double>(n) / 1e6);
  return buf;
}

struct Args {
  double seconds = 20;
  std::uint64_t base_seed = 1;
  std::uint32_t keys = 0;
  int mix_index = -1;  // -1: every mix in turn
  std::uint64_t ops_per_run = 1000000;
  std::uint64_t runs_max = 0;
  bool no_reader = false;
};

// The arguments, or the exit code of a refused or help-only command line.
std::variant<Args, int> parse_args(int argc, char** argv) {
  Args a;
  CLI::App app{"cowstate-isolation: CowStateMap against the reference model, seeded runs"};
  cowstate::cli::add_version_flag(app, "cowstate-isolation");
  using cowstate::cli::unsigned_option;
  cowstate::cli::seconds_option(&app, "--seconds", a.seconds, 0, 31536000,
                                "Time budget in seconds (about)");
  unsigned_option(&app, "--seed", a.base_seed, 0, UINT64_MAX,
                  "First seed; run i uses seed + i / mixes");
  unsigned_option(&app, "--keys", a.keys, 1, 1u << 24, "Override every mix's key count")
      ->default_str("the mix's");
  std::uint64_t mix = 0;
  CLI::Option* mix_option = unsigned_option(
      &app, "--mix", mix, 0, 1000, "Run only this mix (index, see the list printed first)");
  mix_option->default_str("every mix");
  unsigned_option(&app, "--ops", a.ops_per_run, 1, std::uint64_t{1} << 40,
                  "Operations per run at most");
  unsigned_option(&app, "--runs", a.runs_max, 0, std::uint64_t{1} << 40,
                  "Stop after this many runs (0: only the time budget)");
  app.add_flag("--no-reader", a.no_reader, "Check every snapshot on the writer thread only");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  if (mix_option->count() > 0) a.mix_index = static_cast<int>(mix);
  return a;
}

void print_plan(const Args& a, const std::vector<IsolationMix>& mixes) {
  std::printf("cowstate-isolation: about %.0f s, first seed %llu, at most %llu ops per run%s\n",
              a.seconds, static_cast<unsigned long long>(a.base_seed),
              static_cast<unsigned long long>(a.ops_per_run),
              a.no_reader ? "" : ", snapshots also checked on a reader thread");
  for (std::size_t i = 0; i < mixes.size(); ++i) {
    if (a.mix_index < 0 || static_cast<std::size_t>(a.mix_index) == i) {
      std::printf("  mix %zu: %s\n", i, mixes[i].name);
    }
  }
  std::fflush(stdout);
}

// Reports a failed run with its replay command and ends the process: a map that failed a
// check may be corrupt, so its destructor does not run.
[[noreturn]] void fail_run(const Args& a, const IsolationRun& run, bool ok,
                           const std::optional<std::string>& reader_bad, std::uint64_t runs,
                           std::size_t m, std::uint64_t seed) {
  std::printf("FAIL after %llu runs\n", static_cast<unsigned long long>(runs));
  if (!ok) std::printf("%s\n", run.failure()->message().c_str());
  if (reader_bad) std::printf("%s\n", reader_bad->c_str());
  const std::string keys_flag = a.keys != 0 ? " --keys " + std::to_string(a.keys) : "";
  std::printf("replay: cowstate-isolation --mix %zu --seed %llu --runs 1 --ops %llu%s%s\n", m,
              static_cast<unsigned long long>(seed),
              static_cast<unsigned long long>(ok ? run.steps() : run.failure()->step),
              keys_flag.c_str(), reader_bad ? "" : " --no-reader");
  std::fflush(stdout);
  std::_Exit(1);
}

void print_run(std::uint64_t runs, std::uint64_t seed, std::size_t m, const IsolationCounters& c) {
  std::printf(
      "run %3llu  seed %-4llu mix %zu  %7llu ops  %5llu snapshots  %8s entries compared  "
      "%6llu deep checks  %2.0f%% mid-rehash  ok\n",
      static_cast<unsigned long long>(runs), static_cast<unsigned long long>(seed), m,
      static_cast<unsigned long long>(c.ops), static_cast<unsigned long long>(c.snapshots_started),
      millions(c.entries_compared).c_str(), static_cast<unsigned long long>(c.deep_checks),
      c.ops == 0 ? 0.0
                 : 100.0 * static_cast<double>(c.ops_mid_rehash) / static_cast<double>(c.ops));
  std::fflush(stdout);
}

struct Totals {
  IsolationCounters counters;
  std::uint64_t runs = 0;
  std::uint64_t detached = 0;
  std::uint64_t first_seed = 0;
  std::uint64_t last_seed = 0;
};

void print_totals(const Totals& t, double elapsed) {
  const IsolationCounters& total = t.counters;
  std::printf(
      "checked: %llu runs (seeds %llu..%llu), %llu ops, %llu snapshots started (%llu released, "
      "%llu detached to the reader thread), %llu entries compared (%llu full live-map compares, "
      "%llu snapshot compares), %llu deep checks, %.1f%% of ops mid-rehash, %.1f s\n",
      static_cast<unsigned long long>(t.runs), static_cast<unsigned long long>(t.first_seed),
      static_cast<unsigned long long>(t.last_seed), static_cast<unsigned long long>(total.ops),
      static_cast<unsigned long long>(total.snapshots_started),
      static_cast<unsigned long long>(total.snapshots_released),
      static_cast<unsigned long long>(t.detached),
      static_cast<unsigned long long>(total.entries_compared),
      static_cast<unsigned long long>(total.full_compares),
      static_cast<unsigned long long>(total.snapshot_compares),
      static_cast<unsigned long long>(total.deep_checks),
      total.ops == 0
          ? 0.0
          : 100.0 * static_cast<double>(total.ops_mid_rehash) / static_cast<double>(total.ops),
      elapsed);
}

}  // namespace

int main(int argc, char** argv) {
  const std::variant<Args, int> parsed = parse_args(argc, argv);
  if (const int* code = std::get_if<int>(&parsed)) return *code;
  const Args& a = std::get<Args>(parsed);
  const std::vector<IsolationMix> mixes = cowstate::sim::isolation_mixes();
  if (a.mix_index >= static_cast<int>(mixes.size())) {
    std::fprintf(stderr, "cowstate-isolation: --mix %d: there are only %zu mixes\n", a.mix_index,
                 mixes.size());
    return 2;
  }
  print_plan(a, mixes);

  // Any COWSTATE_ASSERT in the map becomes a reported failure with seed and step.
  cowstate::sim::ScopedThrowingAssertHandler throwing_asserts;
  std::optional<Reader> reader;
  if (!a.no_reader) reader.emplace();
  constexpr std::uint64_t kDetachEvery = 64;

  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a.seconds));
  const Clock::duration slice = a.mix_index >= 0
                                    ? deadline - start
                                    : (deadline - start) / static_cast<Clock::rep>(mixes.size());
  Totals t;
  do {
    const std::size_t m =
        a.mix_index >= 0 ? static_cast<std::size_t>(a.mix_index) : t.runs % mixes.size();
    const std::uint64_t seed = a.base_seed + (a.mix_index >= 0 ? t.runs : t.runs / mixes.size());
    cowstate::sim::IsolationOptions options = mixes[m].options;
    options.seed = seed;
    if (a.keys != 0) options.key_count = a.keys;
    if (t.runs == 0) t.first_seed = seed;
    t.last_seed = seed;

    // Cycling through every mix, each run gets an equal slice of the budget, so a short
    // budget still visits every mix once.
    const Clock::time_point run_deadline = std::min(deadline, Clock::now() + slice);
    IsolationRun run(options);
    bool ok = true;
    for (std::uint64_t i = 0; i < a.ops_per_run && ok; ++i) {
      if (i % 256 == 0 && i > 0 && Clock::now() >= run_deadline) break;
      ok = run.step();
      if (ok && reader && i % kDetachEvery == kDetachEvery - 1 &&
          run.boxed_lane().live_snapshots() > 0) {
        reader->push(Reader::Item{run.detach_snapshot(), seed, run.steps()});
        ++t.detached;
      }
    }
    std::optional<std::string> reader_bad;
    if (reader) reader_bad = reader->drain();  // every detached handle is released now
    if (ok) ok = run.finish();
    if (!ok || reader_bad) fail_run(a, run, ok, reader_bad, t.runs, m, seed);
    print_run(t.runs, seed, m, run.counters());
    t.counters += run.counters();
    ++t.runs;
  } while (Clock::now() < deadline && (a.runs_max == 0 || t.runs < a.runs_max));

  print_totals(t, std::chrono::duration<double>(Clock::now() - start).count());
  std::printf("PASS: every op result, live map and snapshot matched the model\n");
  return 0;
}
