// Reading a checkpoint's identity and header: magic, version, flags, the fixed fields and
// one record per state with its TTL configuration (docs/checkpoint-format.md, "Header").
#include <algorithm>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "checkpoint_internal.h"
#include "cowstate/checkpoint.h"

namespace cowstate::checkpoint_detail {

namespace {

using detail::quoted;

// The fixed fields after the header size: checkpoint id, max parallelism, key group range,
// key serializer; and the state count, checked against the bytes left for state records.
Status read_fixed_fields(const std::string& name, ByteReader& r, CheckpointHeader& h,
                         std::uint32_t& state_count) {
  std::uint32_t max_par = 0;
  std::int32_t start = 0;
  std::int32_t end = 0;
  if (Status st = r.read_u64(h.checkpoint_id, "checkpoint id"); !st.ok()) return prefixed(name, st);
  if (Status st = r.read_u32(max_par, "max parallelism"); !st.ok()) return prefixed(name, st);
  if (max_par < 1 || max_par > static_cast<std::uint32_t>(kUpperBoundMaxParallelism)) {
    return error_at(name, r, 20,
                    "expected a max parallelism in [1, 32768], found " + std::to_string(max_par));
  }
  h.max_parallelism = static_cast<std::int32_t>(max_par);
  if (Status st = r.read_i32(start, "key group range start"); !st.ok()) return prefixed(name, st);
  if (Status st = r.read_i32(end, "key group range end"); !st.ok()) return prefixed(name, st);
  const bool empty_range = start == 0 && end == -1;
  if (!empty_range && (start < 0 || end < start || end >= h.max_parallelism)) {
    return error_at(name, r, 24,
                    "expected a key group range within [0, " + std::to_string(max_par - 1) +
                        "] or the empty range [0, -1], found [" + std::to_string(start) + ", " +
                        std::to_string(end) + "]");
  }
  h.range = KeyGroupRange(start, end);
  if (Status st = r.read_u16(h.key_serializer, "key serializer id"); !st.ok()) {
    return prefixed(name, st);
  }
  if (Status st = r.read_u32(state_count, "state count"); !st.ok()) return prefixed(name, st);
  if (state_count > r.remaining() / kMinStateRecord) {
    return error_at(name, r, 34,
                    "expected a state count of at most " +
                        std::to_string(r.remaining() / kMinStateRecord) + " (" +
                        std::to_string(r.remaining()) + " bytes of state metadata), found " +
                        std::to_string(state_count));
  }
  COWSTATE_ASSERT(r.offset() == kFixedHeaderSize, "C3", "fixed header layout");
  return Status();
}

// The TTL record of state `s`, whose TTL flag is at `ttl_at`, into `s.ttl`.
Status read_ttl_record(const std::string& name, ByteReader& r, std::size_t ttl_at,
                       StateMetaInfo& s) {
  StateTtlConfig ttl;
  std::uint8_t update = 0;
  std::uint8_t visibility = 0;
  std::uint8_t cleanup = 0;
  std::uint32_t cleanup_size = 0;
  Status st = r.read_u64(ttl.ttl_ms, "TTL");
  if (st.ok()) st = r.read_u8(update, "TTL update type");
  if (st.ok()) st = r.read_u8(visibility, "TTL visibility");
  if (st.ok()) st = r.read_u8(cleanup, "TTL cleanup flags");
  if (st.ok()) st = r.read_u32(cleanup_size, "TTL cleanup size");
  if (!st.ok()) return prefixed(name, st);
  if (ttl.ttl_ms == 0 || ttl.ttl_ms > static_cast<std::uint64_t>(StateTtlConfig::kMaxTimestamp)) {
    return error_at(name, r, ttl_at + 1,
                    "expected a TTL in [1, 2^63-1] ms for state \"" + s.name + "\", found " +
                        std::to_string(ttl.ttl_ms));
  }
  if (update > 1 || visibility > 1) {
    return error_at(name, r, ttl_at + 9,
                    "expected a TTL update type and visibility in [0, 1], found " +
                        std::to_string(update) + " and " + std::to_string(visibility));
  }
  const bool incremental = (cleanup & kTtlIncremental) != 0;
  if (cleanup > 7 || ((cleanup & kTtlKeySwitch) != 0 && !incremental) ||
      incremental != (cleanup_size != 0)) {
    return error_at(name, r, ttl_at + 11,
                    "expected TTL cleanup flags in [0, 7] (1 incremental, 2 on every key switch "
                    "with 1, 4 full snapshot) and a cleanup size that is positive exactly with "
                    "incremental cleanup, found flags " +
                        std::to_string(cleanup) + " and size " + std::to_string(cleanup_size));
  }
  ttl.update_type = static_cast<StateTtlConfig::UpdateType>(update);
  ttl.visibility = static_cast<StateTtlConfig::Visibility>(visibility);
  ttl.incremental_cleanup = std::nullopt;
  if (incremental) {
    ttl.incremental_cleanup =
        StateTtlConfig::IncrementalCleanup{cleanup_size, (cleanup & kTtlKeySwitch) != 0};
  }
  ttl.full_snapshot_cleanup = (cleanup & kTtlFullSnapshot) != 0;
  COWSTATE_ASSERT(ttl.valid(), "L1", "a read TTL configuration is valid");
  s.ttl = ttl;
  return Status();
}

// One state record, which begins at `at`: name, kind, serializer ids, TTL flag and record.
Status read_state_record(const std::string& name, ByteReader& r, std::size_t at, StateMetaInfo& s) {
  std::uint16_t name_len = 0;
  std::span<const std::byte> name_bytes;
  std::uint8_t kind = 0;
  std::uint8_t has_ttl = 0;
  if (Status st = r.read_u16(name_len, "state name length"); !st.ok()) return prefixed(name, st);
  if (name_len == 0)
    return error_at(name, r, at, "expected a non-empty state name, found length 0");
  if (Status st = r.read_bytes(name_len, name_bytes, "state name"); !st.ok()) {
    return prefixed(name, st);
  }
  s.name.assign(reinterpret_cast<const char*>(name_bytes.data()), name_bytes.size());
  const std::size_t kind_at = r.offset();
  if (Status st = r.read_u8(kind, "state kind"); !st.ok()) return prefixed(name, st);
  if (kind < 1 || kind > 5) {
    return error_at(name, r, kind_at,
                    "expected a state kind in [1, 5] for state \"" + s.name + "\", found " +
                        std::to_string(kind));
  }
  s.kind = static_cast<StateKind>(kind);
  for (std::uint16_t* id :
       {&s.namespace_serializer, &s.state_serializer, &s.element_serializer, &s.value_serializer}) {
    if (Status st = r.read_u16(*id, "serializer id"); !st.ok()) return prefixed(name, st);
  }
  const std::size_t ttl_at = r.offset();
  if (Status st = r.read_u8(has_ttl, "TTL flag"); !st.ok()) return prefixed(name, st);
  if (has_ttl > 1) {
    return error_at(name, r, ttl_at,
                    "expected a TTL flag 0 or 1, found " + std::to_string(has_ttl));
  }
  if (has_ttl == 1) return read_ttl_record(name, r, ttl_at, s);
  return Status();
}

}  // namespace

Status read_identity(const CheckpointInput& input, ByteReader& r, CheckpointFrame& frame) {
  const std::string& name = input.name;
  COWSTATE_ASSERT(r.offset() == 0, "REQUIRES", "the identity is read from offset 0");
  std::span<const std::byte> magic;
  if (Status st = r.read_bytes(kCheckpointMagic.size(), magic, "magic \"CSCP\""); !st.ok()) {
    return prefixed(name, st);
  }
  if (!std::equal(magic.begin(), magic.end(), kCheckpointMagic.begin())) {
    return error_at(name, r, 0,
                    "expected magic \"CSCP\" (a cowstate checkpoint), found " + quoted(magic) +
                        ": not a checkpoint file");
  }
  std::uint16_t version = 0;
  std::uint16_t flags = 0;
  if (Status st = r.read_u16(version, "format version"); !st.ok()) return prefixed(name, st);
  if (version < kCheckpointFullFormatVersion || version > kCheckpointFormatVersion) {
    return error_at(name, r, 4,
                    "expected format version " + std::to_string(kCheckpointFullFormatVersion) +
                        " or " + std::to_string(kCheckpointFormatVersion) + ", found " +
                        std::to_string(version) + ": written by an incompatible cowstate version");
  }
  frame.version = version;
  if (Status st = r.read_u16(flags, "flags"); !st.ok()) return prefixed(name, st);
  if (flags != 0) {
    return error_at(name, r, 6, "expected flags 0, found " + std::to_string(flags));
  }
  if (Status st = r.read_u32(frame.header_size, "header size"); !st.ok()) {
    return prefixed(name, st);
  }
  return Status();
}

Status read_header_fields(const CheckpointInput& input, ByteReader& r, const CheckpointFrame& frame,
                          CheckpointLayout& out) {
  const std::string& name = input.name;
  COWSTATE_ASSERT(r.offset() == kHeaderSizeOffset + 4, "REQUIRES",
                  "header fields are read after the header size field");
  CheckpointHeader& h = out.header;
  r.set_limit(frame.header_size - 8);  // the header checksum is not a field
  std::uint32_t state_count = 0;
  if (Status st = read_fixed_fields(name, r, h, state_count); !st.ok()) return st;
  if (frame.version >= 3) {
    if (Status st = r.read_u64(h.parent_checkpoint_id, "parent checkpoint id"); !st.ok()) {
      return prefixed(name, st);
    }
    if (h.parent_checkpoint_id == 0 || h.parent_checkpoint_id >= h.checkpoint_id) {
      return error_at(name, r, kFixedHeaderSize,
                      "expected a parent checkpoint id in [1, " + std::to_string(h.checkpoint_id) +
                          ") (an incremental checkpoint of " + "checkpoint " +
                          std::to_string(h.checkpoint_id) + "), found " +
                          std::to_string(h.parent_checkpoint_id));
    }
  }
  for (std::uint32_t i = 0; i < state_count; ++i) {
    const std::size_t at = r.offset();
    out.state_offsets.push_back(at);
    StateMetaInfo s;
    if (Status st = read_state_record(name, r, at, s); !st.ok()) return st;
    for (const StateMetaInfo& prior : h.states) {
      if (prior.name == s.name) {
        return error_at(name, r, at,
                        "expected distinct state names, found \"" + s.name + "\" twice");
      }
    }
    h.states.push_back(std::move(s));
  }
  if (!r.at_end()) {
    return error_at(name, r, r.offset(),
                    "expected the header checksum after " + std::to_string(state_count) +
                        " states, found " + std::to_string(r.remaining()) + " more bytes");
  }
  COWSTATE_ASSERT(h.states.size() == out.state_offsets.size(), "C3", "one offset per state record");
  return Status();
}

}  // namespace cowstate::checkpoint_detail
