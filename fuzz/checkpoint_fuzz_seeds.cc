// Writes the seed corpus of the checkpoint fuzz target into the directory given as the only
// argument: valid checkpoints of the fuzz backend, uncompressed, LZ4 and zstd, empty, small
// and large (many entries and blocks of several KiB per key group), and of a part of the
// key-group range, each naming in its checkpoint id the backend it was made from (the
// target's data oracle). Generated from code at every run, never downloaded.
// With a second argument, also a checkpoint storage directory there holding checkpoints 1-3
// (the CLI tests of `cowstate checkpoint` read it).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint_fuzz_backend.h"
#include "cowstate/checkpoint_storage.h"

// Checkpoints 1-3 of a growing backend, committed to a storage in `dir`.
bool write_storage(const std::string& dir) {
  cowstate::StorageOptions options;
  options.io_thread = false;
  auto storage = cowstate::CheckpointStorage::open(dir, cowstate::posix_file_system(), options);
  cowstate_fuzz::FuzzBackend b;
  for (std::uint64_t id = 1; storage.ok() && id <= 3; ++id) {
    b.populate(10 * id, id);
    auto pending = (*storage)->begin(id);
    if (!pending.ok()) break;
    cowstate::CheckpointWriter w(b.backend.snapshot(id), pending->get(),
                                 {cowstate::Compression::lz4, 1});
    while (!w.step(32)) {
    }
    if (w.failed() || !(*pending)->commit().ok()) break;
    if (id == 3) return true;
  }
  std::fprintf(stderr, "checkpoint_fuzz_seeds: cannot write checkpoints to %s\n", dir.c_str());
  return false;
}

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    std::fprintf(stderr, "usage: checkpoint_fuzz_seeds DIR [STORAGE_DIR]\n");
    return 2;
  }
  const std::string dir = argv[1];
  int written = 0;
  auto save = [&](const std::string& name, const std::vector<std::byte>& bytes) {
    std::ofstream f(dir + "/" + name, std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
    if (!f) {
      std::fprintf(stderr, "checkpoint_fuzz_seeds: cannot write %s/%s\n", dir.c_str(),
                   name.c_str());
      std::exit(1);
    }
    ++written;
  };
  // Every seed names the backend it is a checkpoint of (Provenance in its id).
  auto seed = [&](const std::string& name, cowstate_fuzz::Provenance p, cowstate::Compression c) {
    const auto b = cowstate_fuzz::known_backend(p);
    save(name, cowstate_fuzz::checkpoint_of(*b, cowstate_fuzz::provenance_id(p), c));
  };
  seed("empty.cscp", {0, 0, 0, 7}, cowstate::Compression::none);
  for (auto [name, c] : {std::pair{"none", cowstate::Compression::none},
                         std::pair{"lz4", cowstate::Compression::lz4},
                         std::pair{"zstd", cowstate::Compression::zstd}}) {
    // Three to some hundred entries per key group's block; the largest fill tens of KiB.
    for (std::uint16_t n : {std::uint16_t{3}, std::uint16_t{40}, std::uint16_t{900}}) {
      seed(std::string("all-") + name + "-" + std::to_string(n) + ".cscp", {n, n, 0, 7}, c);
    }
  }
  seed("part.cscp", {30, 1, 2, 5}, cowstate::Compression::lz4);
  std::printf("checkpoint_fuzz_seeds: %d seeds in %s\n", written, dir.c_str());
  if (argc == 3 && !write_storage(argv[2])) return 1;
  return 0;
}
