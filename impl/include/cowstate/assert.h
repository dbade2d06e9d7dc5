// Assertions that stay on in every build, each naming the invariant it protects.
//
// Two kinds of errors (docs/invariants.md): operating errors (bad input, I/O) are
// returned as a Status; programmer errors are assertion failures and crash loudly,
// naming the invariant id. An embedder such as the simulator may install a handler
// that throws instead of aborting, so a broken invariant becomes a reported failure
// with its id instead of a dead process.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace cowstate {

// Called with the failing expression, the invariant id ("I3") and a message.
// The handler must not return normally; if it does, the process aborts.
using AssertHandler = void (*)(const char* expr, const char* invariant, const char* message,
                               const char* file, int line);

namespace detail {
inline AssertHandler& assert_handler() noexcept {
  static AssertHandler handler = nullptr;
  return handler;
}

[[noreturn]] inline void assert_fail(const char* expr, const char* invariant, const char* message,
                                     const char* file, int line) {
  if (AssertHandler h = assert_handler()) h(expr, invariant, message, file, line);
  std::fprintf(stderr, "%s:%d: cowstate invariant %s violated: %s (%s)\n", file, line, invariant,
               message, expr);
  std::abort();
}
}  // namespace detail

// Installs `handler` process-wide; returns the previous one. Not thread-safe: install
// before starting threads.
inline AssertHandler set_assert_handler(AssertHandler handler) noexcept {
  AssertHandler previous = detail::assert_handler();
  detail::assert_handler() = handler;
  return previous;
}

}  // namespace cowstate

// COWSTATE_ASSERT(cond, "I4", "what went wrong"): always on.
#define COWSTATE_ASSERT(cond, invariant, message)                                     \
  do {                                                                                \
    if (!(cond)) [[unlikely]]                                                         \
      ::cowstate::detail::assert_fail(#cond, invariant, message, __FILE__, __LINE__); \
  } while (0)

// COWSTATE_DEBUG_ASSERT(cond, "I3", "what went wrong"): the same check in builds without
// NDEBUG (the dev and sanitizer presets, the simulator and tests built there), nothing in
// release builds. For checks on the path of every map operation, where an always-on
// branch would cost each call; what is checked once per snapshot, rehash step or reclaim
// stays on.
#ifdef NDEBUG
#define COWSTATE_DEBUG_ASSERT(cond, invariant, message) \
  do {                                                  \
    (void)sizeof(!(cond));                              \
  } while (0)
#else
#define COWSTATE_DEBUG_ASSERT(cond, invariant, message) COWSTATE_ASSERT(cond, invariant, message)
#endif
