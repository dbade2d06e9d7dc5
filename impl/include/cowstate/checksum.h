// Checksums for cowstate files: XXH3-64 with seed 0 (libxxhash), one-shot and streaming.
// Where libxxhash has its x86 dispatcher, the AVX2/AVX-512 code runs (src/checksum.cc).
// The streaming form over any split of the input equals the one-shot form over the whole.
//
// Thread safety: checksum64 is pure; a Checksum64Stream is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

namespace cowstate {

// XXH3-64 (seed 0) of `bytes`.
std::uint64_t checksum64(std::span<const std::byte> bytes) noexcept;

// XXH3-64 (seed 0) fed in pieces. Move-only; a moved-from stream must not be used.
class Checksum64Stream {
 public:
  Checksum64Stream();
  void update(std::span<const std::byte> bytes) noexcept;
  // Checksum of everything fed so far; the stream may continue afterwards.
  std::uint64_t digest() const noexcept;

 private:
  struct FreeState {
    void operator()(void* state) const noexcept;
  };
  std::unique_ptr<void, FreeState> state_;  // XXH3_state_t, opaque to keep <xxhash.h> out
};

}  // namespace cowstate
