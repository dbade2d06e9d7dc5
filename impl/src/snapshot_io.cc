// The non-template parts of map snapshot reading: the frame check (everything but the
// entries) and the error messages. See cowstate/snapshot_io.h for the format.
#include "cowstate/snapshot_io.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <limits>
#include <string>

namespace cowstate::detail {

namespace {

Status check_serializer_id(ByteReader& r, const char* which, std::uint16_t expected) {
  const std::size_t at = r.offset();
  std::uint16_t found = 0;
  const std::string what = std::string(which) + " serializer id";
  if (Status st = r.read_u16(found, what.c_str()); !st.ok()) return st;
  if (found != expected) {
    return r.error_at(at, "expected " + what + " " + std::to_string(expected) + " (" +
                              serializer_name(expected) + "), found " + std::to_string(found) +
                              " (" + serializer_name(found) +
                              "): the file was written for other key/namespace/state types");
  }
  return Status();
}

}  // namespace

Status check_map_snapshot_frame(std::span<const std::byte> bytes, MapSnapshotIds expected,
                                std::size_t min_entry_size, std::uint64_t& count) {
  ByteReader r(bytes);
  std::span<const std::byte> magic;
  if (Status st = r.read_bytes(kMapSnapshotMagic.size(), magic, "magic \"CSMS\""); !st.ok()) {
    return st;
  }
  if (!std::equal(magic.begin(), magic.end(), kMapSnapshotMagic.begin())) {
    return r.error_at(0, "expected magic \"CSMS\" (a cowstate map snapshot), found " +
                             quoted(magic) + ": not a map snapshot file");
  }
  std::uint16_t version = 0;
  if (Status st = r.read_u16(version, "format version"); !st.ok()) return st;
  if (version != kMapSnapshotFormatVersion) {
    return r.error_at(4, "expected format version " + std::to_string(kMapSnapshotFormatVersion) +
                             ", found " + std::to_string(version) +
                             ": written by an incompatible cowstate version");
  }
  if (Status st = check_serializer_id(r, "key", expected.key); !st.ok()) return st;
  if (Status st = check_serializer_id(r, "namespace", expected.ns); !st.ok()) return st;
  if (Status st = check_serializer_id(r, "state", expected.state); !st.ok()) return st;
  if (Status st = r.read_u64(count, "entry count"); !st.ok()) return st;
  COWSTATE_ASSERT(r.offset() == kMapSnapshotHeaderSize, "S1", "header layout");

  if (r.remaining() < kMapSnapshotTrailerSize) {
    return r.error_at(r.offset(), "expected at least " + std::to_string(kMapSnapshotTrailerSize) +
                                      " bytes for the trailer (entry count, checksum), found " +
                                      std::to_string(r.remaining()) + ": the file is truncated");
  }
  const std::size_t checksum_at = bytes.size() - 8;
  const std::size_t trailer_at = bytes.size() - kMapSnapshotTrailerSize;
  const std::uint64_t stored = load_le<std::uint64_t>(bytes.data() + checksum_at);
  const std::uint64_t computed = checksum64(bytes.first(checksum_at));
  if (stored != computed) {
    return r.error_at(checksum_at, "expected checksum " + hex64(computed) +
                                       " (XXH3-64 of bytes 0.." + std::to_string(checksum_at) +
                                       "), found " + hex64(stored) +
                                       ": the file is truncated, corrupted or has bytes appended");
  }
  const std::uint64_t trailer_count = load_le<std::uint64_t>(bytes.data() + trailer_at);
  if (trailer_count != count) {
    return r.error_at(trailer_at, "expected a trailer entry count of " + std::to_string(count) +
                                      " (as in the header), found " +
                                      std::to_string(trailer_count) +
                                      ": the writer did not write every entry");
  }
  const std::size_t entry_bytes = trailer_at - kMapSnapshotHeaderSize;
  if (min_entry_size > 0 && count > entry_bytes / min_entry_size) {
    return r.error_at(
        12, "expected an entry count of at most " + std::to_string(entry_bytes / min_entry_size) +
                " (" + std::to_string(entry_bytes) + " bytes of entries, at least " +
                std::to_string(min_entry_size) + " each), found " + std::to_string(count));
  }
  return Status();
}

Status map_snapshot_entry_error(const Status& inner, std::uint64_t i, std::uint64_t n) {
  return Status::error(inner.message() + " (entry " + std::to_string(i + 1) + " of " +
                       std::to_string(n) + ")");
}

Status map_snapshot_duplicate_error(std::size_t entry_offset, std::uint64_t i, std::uint64_t n) {
  return Status::error("offset " + std::to_string(entry_offset) +
                       ": expected a (key, namespace) not seen before, found a duplicate (entry " +
                       std::to_string(i + 1) + " of " + std::to_string(n) + ")");
}

Status map_snapshot_trailing_error(std::size_t offset, std::size_t extra, std::uint64_t n) {
  return Status::error("offset " + std::to_string(offset) + ": expected the trailer after " +
                       std::to_string(n) + " entries, found " + std::to_string(extra) +
                       " more bytes of entry data (trailing garbage)");
}

}  // namespace cowstate::detail
