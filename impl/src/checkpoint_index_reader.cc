// Reading a checkpoint's key-group index: one entry per key group of the header's range,
// whose blocks tile the file from the end of the header to the index
// (docs/checkpoint-format.md, "Index").
#include <string>

#include "checkpoint_internal.h"
#include "cowstate/checkpoint.h"

namespace cowstate::checkpoint_detail {

namespace {

// Index entry `i` (at `ir`) into `b`: the block of the i-th key group of `h.range`, at
// `expected_offset` and inside the blocks area, which ends at `index_offset`.
Status read_index_entry(const std::string& name, ByteReader& ir, std::uint16_t version,
                        const CheckpointHeader& h, std::uint32_t i, std::uint64_t expected_offset,
                        std::uint64_t index_offset, CheckpointBlockInfo& b) {
  const std::size_t at = ir.offset();
  std::uint32_t kg = 0;
  std::uint8_t compression = 0;
  std::uint8_t kind = 0;
  Status st = ir.read_u32(kg, "index key group");
  if (st.ok()) st = ir.read_u64(b.offset, "block offset");
  if (st.ok()) st = ir.read_u64(b.stored, "block size");
  if (st.ok()) st = ir.read_u64(b.raw, "block raw size");
  if (st.ok()) st = ir.read_u8(compression, "block compression");
  if (st.ok()) st = ir.read_u64(b.checksum, "block checksum");
  if (st.ok() && version >= 3) st = ir.read_u8(kind, "block kind");
  if (!st.ok()) return prefixed(name, st);
  const std::int32_t want_kg = h.range.start() + static_cast<std::int32_t>(i);
  if (kg != static_cast<std::uint32_t>(want_kg)) {
    return error_at(name, ir, at,
                    "expected index entry " + std::to_string(i) + " for key group " +
                        std::to_string(want_kg) + ", found key group " + std::to_string(kg));
  }
  b.key_group = want_kg;
  if (b.offset != expected_offset || b.stored > index_offset - b.offset) {
    return error_at(name, ir, at + 4,
                    "expected the block of key group " + std::to_string(kg) + " at offset " +
                        std::to_string(expected_offset) + " and inside the blocks area (ends at " +
                        std::to_string(index_offset) + "), found offset " +
                        std::to_string(b.offset) + " size " + std::to_string(b.stored));
  }
  if (compression > 2) {
    return error_at(name, ir, at + 28,
                    "expected a block compression in [0, 2] (none, lz4, zstd), found " +
                        std::to_string(compression));
  }
  b.compression = static_cast<Compression>(compression);
  if (kind > 2) {
    return error_at(
        name, ir, at + 37,
        "expected a block kind in [0, 2] (full, delta, unchanged), found " + std::to_string(kind));
  }
  b.kind = static_cast<BlockKind>(kind);
  if (b.kind == BlockKind::unchanged) {
    if (b.stored != 0 || b.raw != 0 || b.compression != Compression::none) {
      return error_at(name, ir, at + 12,
                      "expected an unchanged block of key group " + std::to_string(kg) +
                          " to store nothing (size 0, raw size 0, no compression), found size " +
                          std::to_string(b.stored) + " raw size " + std::to_string(b.raw) + " " +
                          compression_name(b.compression));
    }
    return Status();
  }
  const bool raw_ok = b.compression == Compression::none
                          ? b.raw == b.stored
                          : (b.raw > b.stored && b.raw / kMaxCompressionRatio <= b.stored);
  if (!raw_ok || b.raw < 8) {
    return error_at(name, ir, at + 20,
                    "expected a raw block size of at least 8, equal to the stored size " +
                        std::to_string(b.stored) + " when uncompressed or above it by at most " +
                        std::to_string(kMaxCompressionRatio) + "x when compressed (" +
                        compression_name(b.compression) + "), found " + std::to_string(b.raw));
  }
  return Status();
}

}  // namespace

Status read_block_index(const CheckpointInput& input, const CheckpointFrame& frame,
                        CheckpointLayout& out) {
  const std::string& name = input.name;
  const CheckpointHeader& h = out.header;
  const std::uint64_t index_offset = frame.index_offset;
  ByteReader ir(input.bytes);
  ir.seek(static_cast<std::size_t>(index_offset));
  ir.set_limit(frame.footer_at);
  std::uint32_t count = 0;
  if (Status st = ir.read_u32(count, "index entry count"); !st.ok()) return prefixed(name, st);
  const std::uint64_t entry_size =
      frame.version >= 3 ? kCheckpointIndexEntrySizeV3 : kCheckpointIndexEntrySize;
  if (count != static_cast<std::uint32_t>(h.range.size()) ||
      frame.index_size != 4 + std::uint64_t{count} * entry_size) {
    return error_at(name, ir, static_cast<std::size_t>(index_offset),
                    "expected " + std::to_string(h.range.size()) +
                        " index entries (one per key group of " + h.range.to_string() + ") in " +
                        std::to_string(frame.index_size) + " bytes, found a count of " +
                        std::to_string(count));
  }
  std::uint64_t expected_offset = frame.header_size;
  out.blocks.reserve(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    CheckpointBlockInfo b{};
    if (Status st =
            read_index_entry(name, ir, frame.version, h, i, expected_offset, index_offset, b);
        !st.ok()) {
      return st;
    }
    expected_offset = b.offset + b.stored;
    out.blocks.push_back(b);
  }
  if (expected_offset != index_offset) {
    return error_at(name, ir, static_cast<std::size_t>(index_offset),
                    "expected the blocks to end where the index begins, found them ending at " +
                        std::to_string(expected_offset) + ": bytes between blocks and index");
  }
  return Status();
}

}  // namespace cowstate::checkpoint_detail
