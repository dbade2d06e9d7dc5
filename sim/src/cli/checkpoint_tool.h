// `cowstate checkpoint inspect PATH` and `cowstate checkpoint verify PATH`: a checkpoint
// file or a storage directory, looked inside without a backend (cowstate/checkpoint_inspect.h).
//
//   inspect  the header (id, max parallelism, key-group range, key serializer), every state
//            with its kind, serializers and TTL configuration, every block with its offset,
//            stored and raw size, compression, checksum and entries per state; for a
//            directory every checkpoint with its manifest and whether it is complete or
//            damaged, and the other files in it. Text, or one JSON document with --json.
//   verify   reads everything inspect reads and says only whether it is intact.
//
// Exit codes: 0 intact, 1 damaged (the first damage of each file is named with the file and
// the byte offset), 2 bad usage or a path that is neither a readable file nor a directory.
// inspect exits like verify, after printing what it could read.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace cowstate::cli {

struct CheckpointToolArgs {
  std::string path;
  bool json = false;
  bool verify_only = false;  // which subcommand ran
  CLI::App* inspect = nullptr;
  CLI::App* verify = nullptr;
};

// Adds `checkpoint` with its subcommands `inspect` and `verify` to `app`.
void add_checkpoint_tool(CLI::App& app, CheckpointToolArgs& args);

// REQUIRES: `checkpoint` was parsed with one of its subcommands.
int run_checkpoint_tool(CheckpointToolArgs& args);

}  // namespace cowstate::cli
