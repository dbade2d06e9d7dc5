// Fiber: a stackful coroutine for the deterministic scheduler, on Boost.Context.
//
// sim/src/core/fiber.cc holds the project's only Boost.Context include. Debian's Boost.Context
// is fcontext-only and tells no sanitizer about stack switches, so this wrapper calls the
// hooks itself: __sanitizer_start/finish_switch_fiber under ASan (so it tracks the fake
// stacks and does not report the fiber stack as a stack overflow) and
// __tsan_create/switch_to/destroy_fiber under TSan.
//
// ASan's detect_stack_use_after_return must stay off (its default): a finishing fiber
// tells ASan it is gone before Boost.Context's own exit frames run, and with fake stacks
// those frames live in the fake stack ASan has just freed. The asan preset leaves it off.
//
// Thread safety: a fiber is resumed and yields on one thread.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

namespace cowstate::sim {

class Fiber {
 public:
  // Thrown inside a fiber by yield() when its owner cancels it; the body should let it
  // propagate so the stack unwinds. Not derived from std::exception on purpose.
  struct Cancelled {};

  explicit Fiber(std::function<void()> body, std::size_t stack_bytes = 256 * 1024);
  // Cancels and unwinds the fiber if it has not finished.
  ~Fiber();
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  // Runs the fiber until it yields or finishes. Rethrows what escaped the body.
  // REQUIRES: !finished(); not called from inside this fiber.
  void resume();
  bool finished() const noexcept;

  // Inside a fiber: switches back to whoever resumed it. Outside any fiber: does nothing.
  static void yield();
  // True when called from inside a fiber.
  static bool in_fiber() noexcept;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace cowstate::sim
