// The real-thread stress tests' settings from the environment: how long each test case runs
// (COWSTATE_STRESS_SECONDS, default 2) and the seed of its operation mix
// (COWSTATE_STRESS_SEED, default: the time).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdlib>

namespace stress_env {

inline double seconds() {
  const char* s = std::getenv("COWSTATE_STRESS_SECONDS");
  if (s == nullptr || *s == '\0') return 2.0;
  const double v = std::strtod(s, nullptr);
  return v > 0 ? v : 2.0;
}

inline std::uint64_t seed() {
  if (const char* s = std::getenv("COWSTATE_STRESS_SEED"); s != nullptr && *s != '\0') {
    return std::strtoull(s, nullptr, 0);
  }
  return static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}

// When a test case started now should stop.
inline std::chrono::steady_clock::time_point deadline() {
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(
             std::chrono::duration<double>(seconds()));
}

}  // namespace stress_env
