// Reading one block of a checkpoint into state tables: its checksum, its decompression and
// its sections, one per state with entries in the key group (docs/checkpoint-format.md,
// "Blocks").
#include <lz4.h>
#include <zstd.h>

#include <limits>
#include <new>
#include <string>

#include "checkpoint_internal.h"
#include "cowstate/checkpoint.h"
#include "cowstate/hooks.h"

namespace cowstate::checkpoint_detail {

namespace {

using detail::hex64;

Status check_block_checksum(const CheckpointInput& input, const CheckpointBlockInfo& b,
                            std::span<const std::byte> stored) {
  const std::uint64_t computed = checksum64(stored);
  if (computed != b.checksum) {
    return Status::error(input.name + ": offset " + std::to_string(b.offset) +
                         ": expected block checksum " + hex64(b.checksum) + " (key group " +
                         std::to_string(b.key_group) + ", from the index), found " +
                         hex64(computed) + ": the block is corrupt");
  }
  return Status();
}

// Decompresses `stored` into `scratch.raw`. REQUIRES: `b` is compressed.
Status decompress_block(const CheckpointInput& input, const CheckpointBlockInfo& b,
                        std::span<const std::byte> stored, BlockScratch& scratch) {
  COWSTATE_ASSERT(b.compression != Compression::none, "REQUIRES", "decompressing a raw block");
  scratch.raw.resize(static_cast<std::size_t>(b.raw));
  std::size_t got = 0;
  bool ok = false;
  if (b.compression == Compression::lz4) {
    if (b.stored <= LZ4_MAX_INPUT_SIZE && b.raw <= std::numeric_limits<int>::max()) {
      const int n = LZ4_decompress_safe(
          reinterpret_cast<const char*>(stored.data()), reinterpret_cast<char*>(scratch.raw.data()),
          static_cast<int>(stored.size()), static_cast<int>(scratch.raw.size()));
      ok = n >= 0;
      got = ok ? static_cast<std::size_t>(n) : 0;
    }
  } else {
    if (scratch.zstd == nullptr) {
      scratch.zstd.reset(ZSTD_createDCtx());
      if (scratch.zstd == nullptr) throw std::bad_alloc();
    }
    const std::size_t n = ZSTD_decompressDCtx(scratch.zstd.get(), scratch.raw.data(),
                                              scratch.raw.size(), stored.data(), stored.size());
    ok = ZSTD_isError(n) == 0;
    got = ok ? n : 0;
  }
  if (!ok || got != b.raw) {
    return Status::error(input.name + ": offset " + std::to_string(b.offset) + ": expected a " +
                         compression_name(b.compression) + " block of key group " +
                         std::to_string(b.key_group) + " that decompresses to " +
                         std::to_string(b.raw) + " bytes, found " +
                         (ok ? std::to_string(got) + " bytes" : "invalid compressed data"));
  }
  return Status();
}

// The raw bytes of block `b`, decompressed into `scratch` if need be.
Status raw_block(const CheckpointInput& input, const CheckpointBlockInfo& b,
                 std::span<const std::byte> stored, BlockScratch& scratch, RawBlock& raw) {
  raw.bytes = input.bytes;
  raw.begin = static_cast<std::size_t>(b.offset);
  raw.end = raw.begin + stored.size();
  raw.where = input.name + ": ";
  if (b.compression == Compression::none) return Status();
  if (Status st = decompress_block(input, b, stored, scratch); !st.ok()) return st;
  raw.bytes = scratch.raw;
  raw.begin = 0;
  raw.end = scratch.raw.size();
  raw.where += "block of key group " + std::to_string(b.key_group) + " at offset " +
               std::to_string(b.offset) + " (" + compression_name(b.compression) +
               ", decompressed): ";
  return Status();
}

// The block's key group and sections, read with `r` from `begin` on. Errors are not yet
// prefixed by RawBlock::where.
Status read_sections(ByteReader& r, std::size_t begin, const CheckpointHeader& h,
                     const CheckpointBlockInfo& b,
                     const std::vector<std::unique_ptr<StateTableBase>>& tables,
                     const std::vector<std::size_t>& table_of_state) {
  std::uint32_t kg = 0;
  std::uint32_t sections = 0;
  if (Status st = r.read_u32(kg, "block key group"); !st.ok()) return st;
  if (kg != static_cast<std::uint32_t>(b.key_group)) {
    return r.error_at(begin, "expected block key group " + std::to_string(b.key_group) +
                                 " (from the index), found " + std::to_string(kg));
  }
  if (Status st = r.read_u32(sections, "block section count"); !st.ok()) return st;
  if (sections > h.states.size()) {
    return r.error_at(begin + 4, "expected at most " + std::to_string(h.states.size()) +
                                     " sections (one per state), found " +
                                     std::to_string(sections));
  }
  std::uint32_t previous = 0;
  for (std::uint32_t s = 0; s < sections; ++s) {
    const std::size_t at = r.offset();
    std::uint32_t state = 0;
    std::uint64_t entries = 0;
    if (Status st = r.read_u32(state, "section state index"); !st.ok()) return st;
    if (state >= h.states.size() || (s > 0 && state <= previous)) {
      return r.error_at(at, "expected a state index in [" +
                                std::to_string(s > 0 ? previous + 1 : 0) + ", " +
                                std::to_string(h.states.size()) + ") (ascending), found " +
                                std::to_string(state));
    }
    previous = state;
    if (Status st = r.read_u64(entries, "section entry count"); !st.ok()) return st;
    StateTableBase& table = *tables[table_of_state[state]];
    if (entries == 0) {
      return r.error_at(at + 4, "expected a positive " +
                                    std::string(b.kind == BlockKind::delta ? "record" : "entry") +
                                    " count for state \"" + table.meta().name + "\", found 0");
    }
    Status st = b.kind == BlockKind::delta ? table.apply_delta(r, b.key_group, entries)
                                           : table.read_entries(r, b.key_group, entries);
    if (!st.ok()) return st;
  }
  if (!r.at_end()) {
    return r.error_at(r.offset(), "expected the end of the block of key group " +
                                      std::to_string(b.key_group) + ", found " +
                                      std::to_string(r.remaining()) + " more bytes");
  }
  return Status();
}

}  // namespace

Status open_block(const CheckpointInput& input, const CheckpointBlockInfo& b, bool verify_checksum,
                  BlockScratch& scratch, RawBlock& raw) {
  COWSTATE_ASSERT(b.offset + b.stored <= input.bytes.size(), "REQUIRES",
                  "a block inside its file (read_checkpoint_layout checked the tiling)");
  const auto stored =
      input.bytes.subspan(static_cast<std::size_t>(b.offset), static_cast<std::size_t>(b.stored));
  if (verify_checksum) {
    if (Status st = check_block_checksum(input, b, stored); !st.ok()) return st;
  }
  return raw_block(input, b, stored, scratch, raw);
}

Status read_block(const CheckpointInput& input, const CheckpointHeader& h,
                  const CheckpointBlockInfo& b, const RestoreOptions& options,
                  const std::vector<std::unique_ptr<StateTableBase>>& tables,
                  const std::vector<std::size_t>& table_of_state, BlockScratch& scratch) {
  COWSTATE_ASSERT(table_of_state.size() == h.states.size(), "REQUIRES",
                  "a table for every state of the file");
  if (b.kind == BlockKind::unchanged) return Status();
  RawBlock raw;
  const bool verify = options.verify_checksums && !COWSTATE_MUTANT(restore_ignores_block_checksum);
  if (Status st = open_block(input, b, verify, scratch, raw); !st.ok()) return st;
  ByteReader r(raw.bytes);
  r.seek(raw.begin);
  r.set_limit(raw.end);
  if (Status st = read_sections(r, raw.begin, h, b, tables, table_of_state); !st.ok()) {
    return Status::error(raw.where + st.message());
  }
  return Status();
}

}  // namespace cowstate::checkpoint_detail
