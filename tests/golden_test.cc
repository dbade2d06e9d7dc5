// Golden files: checkpoints written by earlier builds (tests/golden/vN/, one folder per
// format version; tests/golden/README.md), read by this build. The promise of
// docs/checkpoint-format.md ("Versions"): every file a released format version wrote
// restores to exactly what wrote it, or is refused with an error naming both versions.
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cowstate/checkpoint.h"
#include "cowstate/checkpoint_storage.h"
#include "cowstate/checksum.h"
#include "golden/golden_backend.h"

namespace {

using backend_test::Bytes;

const std::filesystem::path kGolden = std::filesystem::path(COWSTATE_SOURCE_DIR) / "tests/golden";

Bytes read_golden(const std::string& name) {
  std::ifstream in(kGolden / name, std::ios::binary);
  INFO(name);
  REQUIRE(in.good());
  const std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Bytes out(s.size());
  std::memcpy(out.data(), s.data(), s.size());
  REQUIRE_FALSE(out.empty());
  return out;
}

}  // namespace

TEST_CASE("golden checkpoints of format 2 restore to exactly the backend that wrote them",
          "[checkpoint][golden]") {
  const std::string name =
      GENERATE(as<std::string>{}, "v2/plain-none.cscp", "v2/plain-lz4.cscp", "v2/plain-zstd.cscp");
  const Bytes file = read_golden(name);
  auto layout = cowstate::read_checkpoint_layout({name, file});
  REQUIRE(layout.ok());
  CHECK(layout->header.checkpoint_id == 1);
  CHECK(layout->blocks.size() == 128);
  golden::Plain want;
  CHECK(backend_test::restore_image(file) == backend_test::image(want.s));
}

TEST_CASE("a golden TTL checkpoint of format 2 keeps every last-access time",
          "[checkpoint][golden][ttl]") {
  const Bytes file = read_golden("v2/ttl-none.cscp");
  golden::WithTtl want;
  golden::WithTtl got;  // the same states and config; its contents are replaced
  const cowstate::CheckpointInput in{"v2/ttl-none.cscp", file};
  const cowstate::Status st = got.b.restore({&in, 1});
  INFO(st.message());
  REQUIRE(st.ok());
  CHECK(got.stored() == want.stored());
  CHECK(got.b.check_invariants());
}

TEST_CASE("a golden storage directory of format 2 opens and its checkpoint restores",
          "[checkpoint][storage][golden]") {
  backend_test::TempDir tmp;
  // open() tidies the directory (temporaries, orphans): give it a copy, never the source tree.
  const std::filesystem::path dir = std::filesystem::path(tmp.path()) / "storage";
  std::filesystem::copy(kGolden / "v2/storage", dir);
  auto storage = cowstate::CheckpointStorage::open(dir.string());
  REQUIRE(storage.ok());
  auto latest = (*storage)->latest();
  REQUIRE(latest.ok());
  REQUIRE(*latest == std::optional<std::uint64_t>(2));
  auto bytes = (*storage)->read(2);
  INFO((bytes.ok() ? std::string() : bytes.status().message()));
  REQUIRE(bytes.ok());
  golden::Plain want;
  CHECK(backend_test::restore_image(*bytes) == backend_test::image(want.s));
}

TEST_CASE("a checkpoint of format 1 is refused, naming the file and both versions",
          "[checkpoint][golden][errors]") {
  const Bytes file = read_golden("v1/plain-none.cscp");
  golden::Plain b;  // holds state; a refused restore must leave it as it is
  const auto before = backend_test::image(b.s);
  const cowstate::CheckpointInput in{"v1/plain-none.cscp", file};
  const cowstate::Status st = b.b.restore({&in, 1});
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().rfind("v1/plain-none.cscp: ", 0) == 0);
  CHECK(st.message().find("expected format version 2 or 3, found 1") != std::string::npos);
  CHECK(backend_test::image(b.s) == before);
}

TEST_CASE("a manifest of another version makes its checkpoint damaged, naming both versions",
          "[checkpoint][storage][golden][errors]") {
  backend_test::TempDir tmp;
  const std::filesystem::path dir = std::filesystem::path(tmp.path()) / "storage";
  std::filesystem::copy(kGolden / "v2/storage", dir);
  // Manifest version 3, with a checksum that matches: a file a newer build could write.
  const std::filesystem::path manifest = dir / "chk-00000000000000000002.manifest";
  Bytes m = read_golden("v2/storage/chk-00000000000000000002.manifest");
  REQUIRE(m.size() == cowstate::CheckpointStorage::kManifestSize);
  m[4] = std::byte{3};
  const std::uint64_t sum = cowstate::checksum64(std::span<const std::byte>(m).first(32));
  for (std::size_t i = 0; i < 8; ++i) m[32 + i] = static_cast<std::byte>(sum >> (8 * i));
  std::ofstream(manifest, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(m.data()), static_cast<std::streamsize>(m.size()));
  auto storage = cowstate::CheckpointStorage::open(dir.string());
  REQUIRE(storage.ok());
  auto scan = (*storage)->scan();
  REQUIRE(scan.ok());
  REQUIRE(scan->damaged.size() == 1);
  CHECK(scan->damaged[0].reason.find("offset 4: expected manifest version 1 or 2, found 3") !=
        std::string::npos);
  CHECK_FALSE((*storage)->latest().ok());
}

TEST_CASE("a golden incremental chain of format 3 restores to exactly the backend that wrote it",
          "[checkpoint][golden][incremental]") {
  const Bytes c1 = read_golden("v3/chain-1.cscp");
  const Bytes c2 = read_golden("v3/chain-2.cscp");
  const Bytes c3 = read_golden("v3/chain-3.cscp");
  auto l1 = cowstate::read_checkpoint_layout({"v3/chain-1.cscp", c1});
  auto l3 = cowstate::read_checkpoint_layout({"v3/chain-3.cscp", c3});
  REQUIRE(l1.ok());
  REQUIRE(l3.ok());
  CHECK(l1->version == 2);
  CHECK(l3->version == 3);
  CHECK(l3->header.parent_checkpoint_id == 2);
  std::size_t deltas = 0;
  for (const auto& b : l3->blocks) deltas += b.kind == cowstate::BlockKind::delta ? 1 : 0;
  CHECK(deltas > 10);

  golden::PlainIncremental want;
  want.change(1);
  want.change(2);
  backend_test::Backend got(backend_test::KeyGroupRange::all(128));
  backend_test::States gs(got);
  const std::vector<cowstate::CheckpointInput> chain{{"v3/chain-2.cscp", c2},
                                                     {"v3/chain-1.cscp", c1}};
  const cowstate::CheckpointInput head{"v3/chain-3.cscp", c3, 3, chain};
  const cowstate::Status st = got.restore({&head, 1});
  INFO(st.message());
  REQUIRE(st.ok());
  CHECK(backend_test::image(gs) == backend_test::image(want.s));
}
