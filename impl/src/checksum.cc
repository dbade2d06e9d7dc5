#include "cowstate/checksum.h"

#include <xxhash.h>

#include <new>

#include "cowstate/assert.h"

namespace cowstate {

namespace {
XXH3_state_t* as_state(void* p) noexcept { return static_cast<XXH3_state_t*>(p); }
}  // namespace

std::uint64_t checksum64(std::span<const std::byte> bytes) noexcept {
  return XXH3_64bits(bytes.data(), bytes.size());
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
  const XXH_errorcode rc = XXH3_64bits_update(as_state(state_.get()), bytes.data(), bytes.size());
  COWSTATE_ASSERT(rc == XXH_OK, "REQUIRES", "XXH3_64bits_update failed");
}

std::uint64_t Checksum64Stream::digest() const noexcept {
  COWSTATE_ASSERT(state_ != nullptr, "REQUIRES", "digest() on a moved-from Checksum64Stream");
  return XXH3_64bits_digest(as_state(state_.get()));
}

}  // namespace cowstate
