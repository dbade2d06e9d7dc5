// cowstate_make_golden: writes the golden files of the current format version into the
// directory COWSTATE_GOLDEN_OUT (tests/golden/README.md says when and how). Not a test: run by
// hand when a format version is added, never to "fix" a golden test that fails.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "cowstate/checkpoint_storage.h"
#include "golden_backend.h"

namespace {

void write_file(const std::filesystem::path& path, const backend_test::Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

}  // namespace

// Format 3 (written into tests/golden/v3/): an incremental chain of golden::PlainIncremental,
// checkpoint 1 full (format 2), 2 and 3 deltas (3 with LZ4 blocks). The files of tests/golden/v2/
// were written by this program at commit 0750e80.
TEST_CASE("write the golden files of the current format version") {
  const char* dir = std::getenv("COWSTATE_GOLDEN_OUT");
  REQUIRE(dir != nullptr);
  const std::filesystem::path out(dir);
  std::filesystem::create_directories(out);
  golden::PlainIncremental chain;
  const backend_test::Bytes c1 = backend_test::write_checkpoint(chain.b, 1, 1000);
  chain.b.notify_checkpoint_complete(1, c1.size());
  write_file(out / "chain-1.cscp", c1);
  chain.change(1);
  const backend_test::Bytes c2 = backend_test::write_checkpoint(chain.b, 2, 1000);
  chain.b.notify_checkpoint_complete(2, c2.size());
  write_file(out / "chain-2.cscp", c2);
  chain.change(2);
  write_file(out / "chain-3.cscp",
             backend_test::write_checkpoint(chain.b, 3, 1000, cowstate::Compression::lz4));
}
