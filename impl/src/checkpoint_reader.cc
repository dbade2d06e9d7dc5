// Reading a checkpoint's layout: the frame (footer, end magic, header and index checksums)
// and, through the steps of checkpoint_internal.h, the header and the index. See
// cowstate/checkpoint.h and docs/checkpoint-format.md.
#include <algorithm>
#include <string>
#include <utility>

#include "checkpoint_internal.h"
#include "cowstate/checkpoint.h"
#include "cowstate/hooks.h"

namespace cowstate {

namespace checkpoint_detail {

namespace {

using detail::hex64;

// The header checksum at the end of the header, when `options` verify it.
Status check_header_checksum(const CheckpointInput& input, const RestoreOptions& options,
                             const ByteReader& r, std::uint32_t header_size) {
  const std::span<const std::byte> bytes = input.bytes;
  const std::size_t header_sum_at = header_size - 8;
  const std::uint64_t header_sum = detail::load_le<std::uint64_t>(bytes.data() + header_sum_at);
  if (!options.verify_checksums || COWSTATE_MUTANT(torn_header_accepted)) return Status();
  const std::uint64_t computed = checksum64(bytes.first(header_sum_at));
  if (computed != header_sum) {
    return error_at(input.name, r, header_sum_at,
                    "expected header checksum " + hex64(computed) + " (XXH3-64 of bytes 0.." +
                        std::to_string(header_sum_at) + "), found " + hex64(header_sum) +
                        ": the header is corrupt");
  }
  return Status();
}

// The index checksum in the footer, when `options` verify it. It covers the index and the
// footer's offset and size fields (they are contiguous in a good file; when they are not,
// the tiling check of read_frame refuses the file anyway).
Status check_index_checksum(const CheckpointInput& input, const RestoreOptions& options,
                            const ByteReader& r, const CheckpointFrame& frame) {
  const std::span<const std::byte> bytes = input.bytes;
  const std::size_t footer_at = frame.footer_at;
  const std::uint64_t index_sum = detail::load_le<std::uint64_t>(bytes.data() + footer_at + 16);
  if (!options.verify_checksums) return Status();
  const std::size_t from =
      frame.index_offset <= footer_at ? static_cast<std::size_t>(frame.index_offset) : footer_at;
  const std::uint64_t computed = checksum64(bytes.subspan(from, footer_at + 16 - from));
  if (computed != index_sum) {
    return error_at(input.name, r, footer_at + 16,
                    "expected index checksum " + hex64(computed) + " (XXH3-64 of bytes " +
                        std::to_string(from) + ".." + std::to_string(footer_at + 16) + "), found " +
                        hex64(index_sum) + ": the index or footer is corrupt");
  }
  return Status();
}

}  // namespace

Status read_frame(const CheckpointInput& input, const RestoreOptions& options, const ByteReader& r,
                  CheckpointFrame& frame) {
  const std::span<const std::byte> bytes = input.bytes;
  const std::string& name = input.name;
  const std::size_t min_size = kFixedHeaderSize + 8 + 4 + kCheckpointFooterSize;
  if (bytes.size() < min_size) {
    return error_at(name, r, bytes.size(),
                    "expected at least " + std::to_string(min_size) + " bytes, found " +
                        std::to_string(bytes.size()) + ": the file is truncated");
  }
  const std::size_t footer_at = bytes.size() - kCheckpointFooterSize;
  const std::size_t end_magic_at = bytes.size() - kCheckpointEndMagic.size();
  if (!std::equal(kCheckpointEndMagic.begin(), kCheckpointEndMagic.end(),
                  bytes.begin() + static_cast<std::ptrdiff_t>(end_magic_at))) {
    return error_at(name, r, end_magic_at,
                    "expected end magic \"CSCP_END\", found " +
                        detail::quoted(bytes.subspan(end_magic_at)) +
                        ": the file is truncated or was not completely written");
  }
  const std::uint32_t header_size = frame.header_size;
  if (header_size < kFixedHeaderSize + 8 || header_size > footer_at - 4) {
    return error_at(name, r, kHeaderSizeOffset,
                    "expected a header size in [" + std::to_string(kFixedHeaderSize + 8) + ", " +
                        std::to_string(footer_at - 4) + "], found " + std::to_string(header_size));
  }
  if (Status st = check_header_checksum(input, options, r, header_size); !st.ok()) return st;
  frame.footer_at = footer_at;
  frame.index_offset = detail::load_le<std::uint64_t>(bytes.data() + footer_at);
  frame.index_size = detail::load_le<std::uint64_t>(bytes.data() + footer_at + 8);
  if (Status st = check_index_checksum(input, options, r, frame); !st.ok()) return st;
  if (frame.index_offset < header_size || frame.index_offset > footer_at ||
      frame.index_size != footer_at - frame.index_offset) {
    return error_at(name, r, footer_at,
                    "expected the index between the header (ends at " +
                        std::to_string(header_size) + ") and the footer (at " +
                        std::to_string(footer_at) + ") and ending at the footer, found offset " +
                        std::to_string(frame.index_offset) + " size " +
                        std::to_string(frame.index_size));
  }
  return Status();
}

}  // namespace checkpoint_detail

// The parts in file order, each checked before the next is read, so an error names the
// first thing wrong.
Result<CheckpointLayout> read_checkpoint_layout(const CheckpointInput& input,
                                                const RestoreOptions& options) {
  namespace cd = checkpoint_detail;
  ByteReader r(input.bytes);
  cd::CheckpointFrame frame;
  if (Status st = cd::read_identity(input, r, frame); !st.ok()) return st;
  if (Status st = cd::read_frame(input, options, r, frame); !st.ok()) return st;
  CheckpointLayout out;
  out.version = frame.version;
  out.header_size = frame.header_size;
  if (Status st = cd::read_header_fields(input, r, frame, out); !st.ok()) return st;
  if (input.expected_checkpoint_id != 0 &&
      out.header.checkpoint_id != input.expected_checkpoint_id) {
    return Status::error(input.name + ": offset 12: expected checkpoint id " +
                         std::to_string(input.expected_checkpoint_id) + ", found " +
                         std::to_string(out.header.checkpoint_id) +
                         ": the file holds another checkpoint");
  }
  if (Status st = cd::read_block_index(input, frame, out); !st.ok()) return st;
  COWSTATE_ASSERT(out.blocks.size() == static_cast<std::size_t>(out.header.range.size()), "C3",
                  "one block per key group");
  return Result<CheckpointLayout>(std::move(out));
}

}  // namespace cowstate
