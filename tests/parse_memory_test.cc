// How much memory a parsed scenario takes, against the size of its file: every allocation of
// this binary is counted (operator new is replaced here), so the figures are bytes, exact
// and the same on every run.
#define CATCH_CONFIG_MAIN
#include <malloc.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <new>
#include <string>

#include "cli/cli_input.h"
#include "cowstate/sim/scenario.h"

namespace {

std::atomic<std::size_t> live_bytes{0};
std::atomic<std::size_t> peak_bytes{0};

void* counted_alloc(std::size_t n) {
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  const std::size_t now = live_bytes += malloc_usable_size(p);
  std::size_t peak = peak_bytes.load();
  while (now > peak && !peak_bytes.compare_exchange_weak(peak, now)) {
  }
  return p;
}

void counted_free(void* p) noexcept {
  if (p == nullptr) return;
  live_bytes -= malloc_usable_size(p);
  std::free(p);
}

// The most bytes live at once while `f` runs, above what was live when it began.
template <class F>
std::size_t peak_during(F&& f) {
  const std::size_t base = live_bytes.load();
  peak_bytes = base;
  f();
  return peak_bytes.load() - base;
}

// `lines` step lines as short as the format allows ("writer: get k=N"): the most items per
// byte of file, so the worst ratio of memory to file size.
std::string shortest_steps(int lines) {
  std::string text;
  for (int i = 0; i < lines; ++i) text += "writer: get k=" + std::to_string(i) + "\n";
  return text;
}

}  // namespace

void* operator new(std::size_t n) { return counted_alloc(n); }
void* operator new[](std::size_t n) { return counted_alloc(n); }
void operator delete(void* p) noexcept { counted_free(p); }
void operator delete[](void* p) noexcept { counted_free(p); }
void operator delete(void* p, std::size_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::size_t) noexcept { counted_free(p); }

// The documented bound (docs/scenario-format.md): a parsed scenario takes at most 5 times the
// size of its file, the file's text included, for any file; files of the corpus take less than
// twice their size.
constexpr double kMemoryPerFileByte = 5.0;

TEST_CASE("a parsed scenario of the shortest step lines takes at most 5x its text",
          "[scenario][memory]") {
  const std::string text = shortest_steps(50000);
  std::optional<cowstate::sim::Scenario> parsed;
  const std::size_t peak = peak_during([&] {
    cowstate::sim::ParseError error;
    parsed = cowstate::sim::parse_scenario(text, "shortest", &error);
  });
  REQUIRE(parsed);
  REQUIRE(parsed->step_count() == 50000);
  INFO("peak " << peak << " bytes for " << text.size() << " bytes of text");
  CHECK(static_cast<double>(peak) <= kMemoryPerFileByte * static_cast<double>(text.size()));
}

TEST_CASE("loading a scenario file never holds its whole text", "[scenario][memory]") {
  const std::string text = shortest_steps(50000);
  char path[] = "/tmp/cowstate-parse-memory-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  ::close(fd);
  std::ofstream(path, std::ios::binary) << text;
  std::optional<cowstate::sim::Scenario> loaded;
  const std::size_t peak =
      peak_during([&] { loaded = cowstate::cli::load_scenario(path, "test"); });
  std::remove(path);
  REQUIRE(loaded);
  REQUIRE(loaded->step_count() == 50000);
  // What the items take, measured alone, plus at most one buffer of 64 KiB and one line: the
  // text itself is never in memory.
  std::size_t items = 0;
  {
    std::vector<cowstate::sim::ScenarioItem> probe;
    items = peak_during([&] { probe.reserve(loaded->items.size() + 1); });
  }
  INFO("peak " << peak << " bytes; the item array alone " << items << "; the file " << text.size());
  CHECK(peak <= items + (std::size_t{1} << 17));
  CHECK(static_cast<double>(peak) <= kMemoryPerFileByte * static_cast<double>(text.size()));
}
