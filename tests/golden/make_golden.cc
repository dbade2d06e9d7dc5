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

TEST_CASE("write the golden files of the current format version") {
  const char* dir = std::getenv("COWSTATE_GOLDEN_OUT");
  REQUIRE(dir != nullptr);
  const std::filesystem::path out(dir);
  std::filesystem::create_directories(out);
  golden::Plain plain;
  write_file(out / "plain-none.cscp", backend_test::write_checkpoint(plain.b, 1, 1000));
  write_file(out / "plain-lz4.cscp",
             backend_test::write_checkpoint(plain.b, 1, 1000, cowstate::Compression::lz4));
  write_file(out / "plain-zstd.cscp",
             backend_test::write_checkpoint(plain.b, 1, 1000, cowstate::Compression::zstd));
  golden::WithTtl ttl;
  write_file(out / "ttl-none.cscp", backend_test::write_checkpoint(ttl.b, 1, 1000));
  // A storage directory holding checkpoint 2 of the plain backend: its data file and manifest.
  auto storage = cowstate::CheckpointStorage::open((out / "storage").string());
  REQUIRE(storage.ok());
  auto pending = (*storage)->begin(2);
  REQUIRE(pending.ok());
  REQUIRE((*pending)->append(backend_test::write_checkpoint(plain.b, 2, 1000)).ok());
  REQUIRE((*pending)->commit().ok());
}
