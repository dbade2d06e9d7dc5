// libFuzzer target: the checkpoint reader. Every input is restored into a fresh backend
// twice, once with checksums verified (the production path: any corruption must be refused)
// and once without (so mutations reach the block decoder behind the checksums). Neither may
// crash, trip a sanitizer or an assertion, or leave a map that fails its deep check; a
// failed restore must leave the backend empty (nothing half-restored).
//
// The data oracle: the seeds are checkpoints of known backends and say which in their
// checkpoint id (checkpoint_fuzz_backend.h, Provenance). An input that passes every check of
// the verified restore and names a known backend must restore to exactly that backend: a
// mutation that slips past the checksums and changes a state is a failure, not just one
// that crashes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "checkpoint_fuzz_backend.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  const cowstate::CheckpointInput input{"fuzz.cscp", bytes};
  for (bool verify : {true, false}) {
    cowstate_fuzz::FuzzBackend b;
    cowstate::RestoreOptions options;
    options.verify_checksums = verify;
    options.allow_partial_coverage = true;  // a file of any range reaches the decoder
    const cowstate::Status st = b.backend.restore({&input, 1}, options);
    if (!st.ok() && st.message().rfind("fuzz.cscp: ", 0) != 0) std::abort();  // names the file
    for (std::size_t i = 0; i < b.backend.state_count(); ++i) {
      if (!st.ok() && b.backend.table_at(i).size() != 0) std::abort();  // half-restored
    }
    if (!b.backend.check_invariants()) std::abort();
    const auto layout = cowstate::read_checkpoint_layout(input, options);
    if (verify && st.ok()) {
      if (!layout.ok()) std::abort();  // restored, yet its layout is refused
      if (const auto p = cowstate_fuzz::provenance_of(layout->header.checkpoint_id)) {
        const auto known = cowstate_fuzz::known_backend(*p);
        if (cowstate_fuzz::image(b) != cowstate_fuzz::image(*known)) std::abort();  // wrong data
      }
    }
  }
  return 0;
}
