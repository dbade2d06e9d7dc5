#include "cowstate/checksum.h"

#include <xxhash.h>

#include <new>

#include "cowstate/assert.h"

#if defined(COWSTATE_XXH3_DISPATCH) && COWSTATE_XXH3_DISPATCH
#define XXH_DISPATCH_DISABLE_REPLACE  // name the dispatching functions explicitly below
#include <xxh_x86dispatch.h>
#endif

namespace cowstate {

namespace {
XXH3_state_t* as_state(void* p) noexcept { return static_cast<XXH3_state_t*>(p); }

#if defined(COWSTATE_XXH3_DISPATCH) && COWSTATE_XXH3_DISPATCH
// libxxhash's x86 dispatcher (built into Debian's library; CMake checks that it links) picks
// AVX2 or AVX-512 at run time, where XXH3_64bits is its SSE2 build, several times slower on
// checkpoint blocks. Same function, same values. Its AVX-512 path returns with the upper
// vector registers dirty, after which every legacy-SSE instruction of the process runs
// several times slower (XXH3's SSE2 path among them); a vzeroupper after each call clears
// them. It is an AVX instruction, executed only where the CPU (and OS) has AVX: elsewhere
// the dispatcher never used it.
[[gnu::target("avx")]] void clear_upper_vector_state() noexcept { __builtin_ia32_vzeroupper(); }
bool cpu_has_avx() noexcept {
  static const bool avx = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx") != 0;
  }();
  return avx;
}
std::uint64_t xxh3_64(const void* data, std::size_t size) noexcept {
  const std::uint64_t h = XXH3_64bits_dispatch(data, size);
  if (cpu_has_avx()) clear_upper_vector_state();
  return h;
}
XXH_errorcode xxh3_64_update(XXH3_state_t* state, const void* data, std::size_t size) noexcept {
  const XXH_errorcode rc = XXH3_64bits_update_dispatch(state, data, size);
  if (cpu_has_avx()) clear_upper_vector_state();
  return rc;
}
#else
std::uint64_t xxh3_64(const void* data, std::size_t size) noexcept {
  return XXH3_64bits(data, size);
}
XXH_errorcode xxh3_64_update(XXH3_state_t* state, const void* data, std::size_t size) noexcept {
  return XXH3_64bits_update(state, data, size);
}
#endif
}  // namespace

std::uint64_t checksum64(std::span<const std::byte> bytes) noexcept {
  return xxh3_64(bytes.data(), bytes.size());
}

void Checksum64Stream::FreeState::operator()(void* state) const noexcept {
  XXH3_freeState(as_state(state));
}

Checksum64Stream::Checksum64Stream() : state_(XXH3_createState()) {
  if (state_ == nullptr) throw std::bad_alloc();
  const XXH_errorcode rc = XXH3_64bits_reset(as_state(state_.get()));
  COWSTATE_ASSERT(rc == XXH_OK, "REQUIRES", "XXH3_64bits_reset failed");
}

void Checksum64Stream::update(std::span<const std::byte> bytes) noexcept {
  COWSTATE_ASSERT(state_ != nullptr, "REQUIRES", "update() on a moved-from Checksum64Stream");
  if (bytes.empty()) return;
  const XXH_errorcode rc = xxh3_64_update(as_state(state_.get()), bytes.data(), bytes.size());
  COWSTATE_ASSERT(rc == XXH_OK, "REQUIRES", "XXH3_64bits_update failed");
}

std::uint64_t Checksum64Stream::digest() const noexcept {
  COWSTATE_ASSERT(state_ != nullptr, "REQUIRES", "digest() on a moved-from Checksum64Stream");
  return XXH3_64bits_digest(as_state(state_.get()));
}

}  // namespace cowstate
