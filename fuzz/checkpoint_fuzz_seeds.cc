// Writes the seed corpus of the checkpoint fuzz target into the directory given as the only
// argument: valid checkpoints of the fuzz backend, uncompressed, LZ4 and zstd, empty, and
// of a part of the key-group range. Generated from code at every run, never downloaded.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint_fuzz_backend.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: checkpoint_fuzz_seeds DIR\n");
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
  {
    cowstate_fuzz::FuzzBackend empty;
    save("empty.cscp", cowstate_fuzz::checkpoint_of(empty, 1, cowstate::Compression::none));
  }
  for (auto [name, c] : {std::pair{"none", cowstate::Compression::none},
                         std::pair{"lz4", cowstate::Compression::lz4},
                         std::pair{"zstd", cowstate::Compression::zstd}}) {
    for (std::uint64_t n : {std::uint64_t{3}, std::uint64_t{40}}) {
      cowstate_fuzz::FuzzBackend b;
      b.populate(n, n);
      save(std::string("all-") + name + "-" + std::to_string(n) + ".cscp",
           cowstate_fuzz::checkpoint_of(b, n, c));
    }
  }
  {
    cowstate_fuzz::FuzzBackend part(cowstate::KeyGroupRange(2, 5));
    part.populate(30, 1);
    save("part.cscp", cowstate_fuzz::checkpoint_of(part, 9, cowstate::Compression::lz4));
  }
  std::printf("checkpoint_fuzz_seeds: %d seeds in %s\n", written, dir.c_str());
  return 0;
}
