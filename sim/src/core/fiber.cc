// The project's only Boost.Context include. See fiber.h for the sanitizer story.
#include "cowstate/sim/fiber.h"

#include <boost/context/fiber.hpp>
#include <boost/context/fixedsize_stack.hpp>
#include <exception>
#include <utility>

#include "cowstate/assert.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define COWSTATE_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define COWSTATE_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define COWSTATE_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#define COWSTATE_TSAN 1
#endif

#if defined(COWSTATE_ASAN)
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(COWSTATE_TSAN)
#include <sanitizer/tsan_interface.h>
#endif

namespace ctx = boost::context;

namespace cowstate::sim {

struct Fiber::Impl {
  std::function<void()> body;
  ctx::fiber self;    // the fiber while suspended
  ctx::fiber caller;  // the resumer while the fiber runs
  bool started = false;
  bool finished = false;
  bool cancel = false;
  std::exception_ptr error;
  Impl* outer = nullptr;  // the fiber that resumed this one, if any

  // The fiber's stack, for the ASan hooks.
  const void* stack_bottom = nullptr;
  std::size_t stack_size = 0;
  // The resumer's stack, learned from __sanitizer_finish_switch_fiber.
  const void* caller_bottom = nullptr;
  std::size_t caller_size = 0;
  // ASan fake stacks, one per side: each side saves its own when it switches away and
  // gets it back when it is switched to again.
  void* caller_fake_stack = nullptr;
  void* fiber_fake_stack = nullptr;

  void* tsan_fiber = nullptr;
  void* tsan_caller = nullptr;

  // Before leaving the resumer for the fiber.
  void before_enter() {
#if defined(COWSTATE_ASAN)
    __sanitizer_start_switch_fiber(&caller_fake_stack, stack_bottom, stack_size);
#endif
#if defined(COWSTATE_TSAN)
    tsan_caller = __tsan_get_current_fiber();
    __tsan_switch_to_fiber(tsan_fiber, 0);
#endif
  }
  // Back in the resumer.
  void after_leave() {
#if defined(COWSTATE_ASAN)
    __sanitizer_finish_switch_fiber(caller_fake_stack, nullptr, nullptr);
#endif
  }
  // Inside the fiber, before switching to the resumer; `exiting` on the last switch.
  void before_leave(bool exiting) {
#if defined(COWSTATE_ASAN)
    __sanitizer_start_switch_fiber(exiting ? nullptr : &fiber_fake_stack, caller_bottom,
                                   caller_size);
#else
    (void)exiting;
#endif
#if defined(COWSTATE_TSAN)
    __tsan_switch_to_fiber(tsan_caller, 0);
#endif
  }
  // Inside the fiber, just after it was (re)entered.
  void after_enter(bool first) {
#if defined(COWSTATE_ASAN)
    __sanitizer_finish_switch_fiber(first ? nullptr : fiber_fake_stack, &caller_bottom,
                                    &caller_size);
#else
    (void)first;
#endif
  }
};

namespace {
thread_local Fiber::Impl* current = nullptr;

// fixedsize_stack that remembers where the stack is, for the ASan hooks.
class RecordingStack {
 public:
  RecordingStack(std::size_t bytes, Fiber::Impl* impl) : inner_(bytes), impl_(impl) {}
  ctx::stack_context allocate() {
    ctx::stack_context sc = inner_.allocate();
    impl_->stack_bottom = static_cast<char*>(sc.sp) - sc.size;
    impl_->stack_size = sc.size;
    return sc;
  }
  void deallocate(ctx::stack_context& sc) noexcept { inner_.deallocate(sc); }

 private:
  ctx::fixedsize_stack inner_;
  Fiber::Impl* impl_;
};
}  // namespace

Fiber::Fiber(std::function<void()> body, std::size_t stack_bytes)
    : impl_(std::make_unique<Impl>()) {
  impl_->body = std::move(body);
#if defined(COWSTATE_TSAN)
  impl_->tsan_fiber = __tsan_create_fiber(0);
#endif
  Impl* impl = impl_.get();
  impl_->self = ctx::fiber(std::allocator_arg, RecordingStack(stack_bytes, impl),
                           [impl](ctx::fiber&& caller) {
                             impl->after_enter(/*first=*/true);
                             impl->caller = std::move(caller);
                             try {
                               if (!impl->cancel) impl->body();
                             } catch (const Fiber::Cancelled&) {
                               // unwound on purpose
                             } catch (...) {
                               impl->error = std::current_exception();
                             }
                             impl->finished = true;
                             impl->before_leave(/*exiting=*/true);
                             return std::move(impl->caller);
                           });
}

Fiber::~Fiber() {
  if (impl_->started && !impl_->finished) {
    impl_->cancel = true;
    try {
      resume();
    } catch (...) {
      // the run is being discarded
    }
  }
#if defined(COWSTATE_TSAN)
  __tsan_destroy_fiber(impl_->tsan_fiber);
#endif
}

void Fiber::resume() {
  COWSTATE_ASSERT(!impl_->finished, "T1", "resuming a finished fiber");
  COWSTATE_ASSERT(current != impl_.get(), "T1", "a fiber resuming itself");
  impl_->started = true;
  impl_->outer = current;
  current = impl_.get();
  impl_->before_enter();
  impl_->self = std::move(impl_->self).resume();
  impl_->after_leave();
  current = impl_->outer;
  if (impl_->error) {
    std::exception_ptr e = std::exchange(impl_->error, nullptr);
    std::rethrow_exception(e);
  }
}

bool Fiber::finished() const noexcept { return impl_->finished; }

bool Fiber::in_fiber() noexcept { return current != nullptr; }

void Fiber::yield() {
  Impl* impl = current;
  if (impl == nullptr) return;
  impl->before_leave(/*exiting=*/false);
  impl->caller = std::move(impl->caller).resume();
  impl->after_enter(/*first=*/false);
  if (impl->cancel) throw Cancelled{};
}

}  // namespace cowstate::sim
