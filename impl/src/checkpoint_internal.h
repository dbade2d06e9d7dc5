// Private to impl/src. The layout constants of docs/checkpoint-format.md that the writer
// and the reader share, and the steps of reading a checkpoint file, one per format part:
// identity and header (checkpoint_header_reader.cc), the frame of footer and checksums
// (checkpoint_reader.cc), the key-group index (checkpoint_index_reader.cc) and a block
// with its sections (checkpoint_block_reader.cc).
//
// Every reading step returns an operating error prefixed by the input's name and naming
// the offset it found wrong; none of them changes a table unless it says so.
#pragma once

#include <zstd.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cowstate/checkpoint.h"

namespace cowstate::checkpoint_detail {

// Header fields before the state metadata, and the smallest state record.
constexpr std::size_t kFixedHeaderSize = 38;
constexpr std::size_t kMinStateRecord = 2 + 1 + 8 + 1;
constexpr std::size_t kHeaderSizeOffset = 8;
// A state's TTL configuration: ttl, update type, visibility, cleanup flags, cleanup size.
constexpr std::size_t kTtlRecordSize = 8 + 1 + 1 + 1 + 4;
constexpr std::uint8_t kTtlIncremental = 1;
constexpr std::uint8_t kTtlKeySwitch = 2;
constexpr std::uint8_t kTtlFullSnapshot = 4;

inline Status prefixed(const std::string& name, const Status& st) {
  COWSTATE_ASSERT(!st.ok(), "REQUIRES", "prefixing an ok Status");
  return Status::error(name + ": " + st.message());
}

// `r`'s error at `at`, prefixed by the input's name.
inline Status error_at(const std::string& name, const ByteReader& r, std::size_t at,
                       const std::string& what) {
  return prefixed(name, r.error_at(at, what));
}

// Where the parts of a file are, once its frame is checked (read_frame).
struct CheckpointFrame {
  std::uint16_t version = 0;       // the format version
  std::uint32_t header_size = 0;   // bytes of the header, its checksum included
  std::size_t footer_at = 0;       // where the footer begins
  std::uint64_t index_offset = 0;  // where the index begins
  std::uint64_t index_size = 0;    // bytes of the index, up to the footer
};

// Reads the magic, format version, flags and header size field with `r`, which starts at
// offset 0, into `frame`. Identity first, so a foreign file is called foreign rather than
// corrupt.
Status read_identity(const CheckpointInput& input, ByteReader& r, CheckpointFrame& frame);

// Checks the frame of `input`: its size, the end magic, the header size, the header and
// index checksums (when `options` verify them) and where the index lies.
Status read_frame(const CheckpointInput& input, const RestoreOptions& options, const ByteReader& r,
                  CheckpointFrame& frame);

// Reads the header fields after the header size field (the parent id in format 3), and
// the state records, into `out.header` and `out.state_offsets`. REQUIRES: `r` is just past
// the header size field.
Status read_header_fields(const CheckpointInput& input, ByteReader& r, const CheckpointFrame& frame,
                          CheckpointLayout& out);

// Reads the index into `out.blocks`: one block per key group of `out.header.range`,
// tiling the file from the header to the index.
Status read_block_index(const CheckpointInput& input, const CheckpointFrame& frame,
                        CheckpointLayout& out);

struct ZstdDCtxFree {
  void operator()(ZSTD_DCtx* c) const noexcept { ZSTD_freeDCtx(c); }
};

// What reading blocks reuses from one block to the next.
struct BlockScratch {
  std::vector<std::byte> raw;  // a decompressed block
  std::unique_ptr<ZSTD_DCtx, ZstdDCtxFree> zstd;
};

// A block's raw bytes: the file itself when it is uncompressed, so offsets are absolute,
// or the decompressed block. `where` prefixes every error found inside it.
struct RawBlock {
  std::span<const std::byte> bytes;
  std::size_t begin = 0;
  std::size_t end = 0;
  std::string where;
};

// Checks block `b`'s checksum (when `verify_checksum`) and gives its raw bytes in `raw`,
// decompressed into `scratch` if need be. REQUIRES: `b` comes from a validated layout.
Status open_block(const CheckpointInput& input, const CheckpointBlockInfo& b, bool verify_checksum,
                  BlockScratch& scratch, RawBlock& raw);

// Reads block `b` of `input` (its checksum when `options` verify it, its decompression and
// its sections) into `tables`: state i of the file goes to tables[table_of_state[i]]. A
// full block's sections are decoded into empty key groups, a delta block's applied to what
// the key group holds; an unchanged block reads nothing.
Status read_block(const CheckpointInput& input, const CheckpointHeader& h,
                  const CheckpointBlockInfo& b, const RestoreOptions& options,
                  const std::vector<std::unique_ptr<StateTableBase>>& tables,
                  const std::vector<std::size_t>& table_of_state, BlockScratch& scratch);

}  // namespace cowstate::checkpoint_detail
