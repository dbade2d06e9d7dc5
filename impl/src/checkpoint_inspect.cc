// Inspecting checkpoint files and storage directories without a backend
// (cowstate/checkpoint_inspect.h): a block's sections are decoded by the serializer ids the
// header records.
#include "cowstate/checkpoint_inspect.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>

#include "checkpoint_internal.h"
#include "cowstate/assert.h"
#include "cowstate/key_groups.h"
#include "cowstate/serializers.h"

namespace cowstate {

namespace {

using checkpoint_detail::BlockScratch;
using checkpoint_detail::RawBlock;

template <class S>
Status read_with(ByteReader& r) {
  typename S::value_type v{};
  return S::read(r, v);
}

bool scalar_built_in(std::uint16_t id) noexcept { return id >= 1 && id <= 6; }

// Reads one value of built-in scalar serializer `id`. REQUIRES: scalar_built_in(id).
Status read_scalar(ByteReader& r, std::uint16_t id) {
  COWSTATE_ASSERT(scalar_built_in(id), "REQUIRES", "a built-in scalar serializer");
  switch (id) {
    case Int64Serializer::id:
      return read_with<Int64Serializer>(r);
    case UInt64Serializer::id:
      return read_with<UInt64Serializer>(r);
    case Int32Serializer::id:
      return read_with<Int32Serializer>(r);
    case StringSerializer::id:
      return read_with<StringSerializer>(r);
    case VectorInt64Serializer::id:
      return read_with<VectorInt64Serializer>(r);
    default:
      return Status();  // void: no bytes
  }
}

// Reads a key of serializer `id` and, for key types with a built-in hash, checks that it
// belongs to `key_group`.
Status read_key(ByteReader& r, std::uint16_t id, std::int32_t max_parallelism,
                std::int32_t key_group) {
  const std::size_t at = r.offset();
  std::int32_t hash = 0;
  Status st;
  if (id == Int64Serializer::id) {
    std::int64_t k = 0;
    st = Int64Serializer::read(r, k);
    hash = KeyHash<std::int64_t>{}(k);
  } else if (id == UInt64Serializer::id) {
    std::uint64_t k = 0;
    st = UInt64Serializer::read(r, k);
    hash = KeyHash<std::uint64_t>{}(k);
  } else if (id == Int32Serializer::id) {
    std::int32_t k = 0;
    st = Int32Serializer::read(r, k);
    hash = KeyHash<std::int32_t>{}(k);
  } else if (id == StringSerializer::id) {
    std::string k;
    st = StringSerializer::read(r, k);
    hash = KeyHash<std::string>{}(k);
  } else {
    return read_scalar(r, id);
  }
  if (!st.ok()) return st;
  if (const std::int32_t g = key_group_for_hash(hash, max_parallelism); g != key_group) {
    return r.error_at(at, "expected a key of key group " + std::to_string(key_group) +
                              ", found one of key group " + std::to_string(g));
  }
  return Status();
}

Status read_last_access(ByteReader& r) {
  std::int64_t t = 0;
  return r.read_i64(t, "TTL last-access time");
}

// Reads a list (7) or map (8) state: a u32 count, then elements or (key, value) pairs, each
// with its last-access time in the TTL form.
Status read_composite(ByteReader& r, const StateMetaInfo& m) {
  const bool map = m.state_serializer == 8;
  const bool ttl = m.ttl.has_value();
  std::uint32_t n = 0;
  if (Status st = r.read_u32(n, map ? "count of map" : "count of list"); !st.ok()) return st;
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::size_t before = r.offset();
    if (map) {
      if (Status st = read_scalar(r, m.element_serializer); !st.ok()) return st;
      if (ttl) {
        if (Status st = read_last_access(r); !st.ok()) return st;
      }
      if (Status st = read_scalar(r, m.value_serializer); !st.ok()) return st;
    } else {
      if (ttl) {
        if (Status st = read_last_access(r); !st.ok()) return st;
      }
      if (Status st = read_scalar(r, m.element_serializer); !st.ok()) return st;
    }
    if (r.offset() == before) return r.error_at(before, "expected an element of at least 1 byte");
  }
  return Status();
}

// Whether every serializer of state `m` is built in (so its entries can be decoded).
bool decodable(const StateMetaInfo& m, std::uint16_t key_serializer) {
  if (!scalar_built_in(key_serializer) || !scalar_built_in(m.namespace_serializer)) return false;
  if (m.state_serializer == 7) return scalar_built_in(m.element_serializer);
  if (m.state_serializer == 8) {
    return scalar_built_in(m.element_serializer) && scalar_built_in(m.value_serializer);
  }
  return scalar_built_in(m.state_serializer);
}

Status read_entry(ByteReader& r, const CheckpointHeader& h, const StateMetaInfo& m,
                  std::int32_t key_group) {
  if (Status st = read_key(r, h.key_serializer, h.max_parallelism, key_group); !st.ok()) return st;
  if (Status st = read_scalar(r, m.namespace_serializer); !st.ok()) return st;
  if (m.state_serializer == 7 || m.state_serializer == 8) return read_composite(r, m);
  if (m.ttl.has_value()) {
    if (Status st = read_last_access(r); !st.ok()) return st;
  }
  return read_scalar(r, m.state_serializer);
}

// A delta record (docs/checkpoint-format.md, "Incremental checkpoints"): its kind, key and
// namespace, and the state of a put.
Status read_delta_record(ByteReader& r, const CheckpointHeader& h, const StateMetaInfo& m,
                         std::int32_t key_group) {
  DeltaRecordKind kind{};
  if (Status st = read_delta_record_kind(r, kind); !st.ok()) return st;
  if (kind == DeltaRecordKind::put) return read_entry(r, h, m, key_group);
  if (Status st = read_key(r, h.key_serializer, h.max_parallelism, key_group); !st.ok()) return st;
  return read_scalar(r, m.namespace_serializer);
}

// Reads one section's header and, when its state is decodable, its entries (a delta
// block's records).
Status read_section(ByteReader& r, const CheckpointHeader& h, const std::vector<bool>& decode,
                    std::int32_t key_group, bool delta, std::uint32_t first_state,
                    CheckpointSectionReport& out) {
  const std::size_t at = r.offset();
  if (Status st = r.read_u32(out.state, "section state index"); !st.ok()) return st;
  if (out.state >= h.states.size() || out.state < first_state) {
    return r.error_at(at, "expected a state index in [" + std::to_string(first_state) + ", " +
                              std::to_string(h.states.size()) + ") (ascending), found " +
                              std::to_string(out.state));
  }
  if (Status st = r.read_u64(out.entries, "section entry count"); !st.ok()) return st;
  if (out.entries == 0 || out.entries > r.remaining()) {
    return r.error_at(at + 4, "expected an entry count in [1, " + std::to_string(r.remaining()) +
                                  "] (the bytes left in the block), found " +
                                  std::to_string(out.entries));
  }
  if (!decode[out.state]) {
    r.seek(r.offset() + r.remaining());  // the rest of the block cannot be told apart
    return Status();
  }
  for (std::uint64_t e = 0; e < out.entries; ++e) {
    Status st = delta ? read_delta_record(r, h, h.states[out.state], key_group)
                      : read_entry(r, h, h.states[out.state], key_group);
    if (!st.ok()) return st;
  }
  return Status();
}

// The sections of one raw block. Errors are not yet prefixed by `raw.where`.
Status read_block_sections(const RawBlock& raw, const CheckpointHeader& h,
                           const std::vector<bool>& decode, CheckpointBlockReport& out) {
  ByteReader r(raw.bytes);
  r.seek(raw.begin);
  r.set_limit(raw.end);
  std::uint32_t kg = 0;
  std::uint32_t sections = 0;
  if (Status st = r.read_u32(kg, "block key group"); !st.ok()) return st;
  if (kg != static_cast<std::uint32_t>(out.info.key_group)) {
    return r.error_at(raw.begin, "expected block key group " + std::to_string(out.info.key_group) +
                                     " (from the index), found " + std::to_string(kg));
  }
  if (Status st = r.read_u32(sections, "block section count"); !st.ok()) return st;
  if (sections > h.states.size()) {
    return r.error_at(raw.begin + 4, "expected at most " + std::to_string(h.states.size()) +
                                         " sections, found " + std::to_string(sections));
  }
  std::uint32_t first = 0;
  for (std::uint32_t s = 0; s < sections; ++s) {
    CheckpointSectionReport section;
    if (Status st = read_section(r, h, decode, out.info.key_group,
                                 out.info.kind == BlockKind::delta, first, section);
        !st.ok()) {
      return st;
    }
    first = section.state + 1;
    out.sections.push_back(section);
    if (!decode[section.state]) return Status();  // the rest is not told apart
  }
  if (!r.at_end()) {
    return r.error_at(r.offset(), "expected the end of the block of key group " +
                                      std::to_string(out.info.key_group) + ", found " +
                                      std::to_string(r.remaining()) + " more bytes");
  }
  return Status();
}

CheckpointDamage damage_of(const std::string& file, const Status& st) {
  COWSTATE_ASSERT(!st.ok(), "REQUIRES", "damage from an error");
  return CheckpointDamage{file, offset_in_message(st.message()), st.message()};
}

// Reads the blocks of a validated file into `out`, stopping at the first damage.
void inspect_blocks(const CheckpointInput& input, CheckpointFileReport& out) {
  COWSTATE_ASSERT(out.layout.has_value(), "REQUIRES", "a validated layout");
  const CheckpointHeader& h = out.layout->header;
  std::vector<bool> decode(h.states.size());
  for (std::size_t i = 0; i < h.states.size(); ++i) {
    decode[i] = decodable(h.states[i], h.key_serializer);
    if (!decode[i]) out.undecoded.push_back(static_cast<std::uint32_t>(i));
  }
  BlockScratch scratch;
  for (const CheckpointBlockInfo& b : out.layout->blocks) {
    CheckpointBlockReport block{b, {}};
    if (b.kind == BlockKind::unchanged) {  // nothing stored: nothing to read
      out.blocks.push_back(std::move(block));
      continue;
    }
    RawBlock raw;
    Status st = checkpoint_detail::open_block(input, b, true, scratch, raw);
    if (st.ok()) {
      st = read_block_sections(raw, h, decode, block);
      if (!st.ok()) st = Status::error(raw.where + st.message());
    }
    if (!st.ok()) {
      out.damage = damage_of(input.name, st);
      // Inside a compressed block the message names the decompressed offset second; the
      // block's own offset is where the file is damaged.
      if (b.compression != Compression::none) out.damage->offset = b.offset;
      return;
    }
    out.blocks.push_back(std::move(block));
  }
}

// Checkpoint `id` of `storage`: its manifest, its data file against the manifest, the data
// file's contents.
StoredCheckpointReport inspect_stored(CheckpointStorage& storage, FileSystem& fs, std::uint64_t id,
                                      bool complete, const std::string& reason) {
  StoredCheckpointReport out;
  out.id = id;
  out.complete = complete;
  out.reason = reason;
  Result<CheckpointManifest> m = storage.read_manifest(id);
  if (!m.ok()) {
    out.damage = damage_of(storage.manifest_path(id), m.status());
    return out;
  }
  out.manifest = *m;
  const std::string path = storage.data_path(id);
  Result<std::vector<std::byte>> data = fs.read_file(path);
  if (!data.ok()) {
    out.damage = CheckpointDamage{path, std::nullopt, data.status().message()};
    return out;
  }
  out.file = inspect_checkpoint(path, *data);
  if (out.file->damage) {
    out.damage = out.file->damage;
  } else if (data->size() != m->size || checksum64(*data) != m->checksum) {
    // Intact on its own, but not the file the manifest names: storage.read() says how.
    Result<std::vector<std::byte>> checked = storage.read(id);
    COWSTATE_ASSERT(!checked.ok(), "C5", "a data file that differs from its manifest");
    out.damage = damage_of(path, checked.status());
    if (data->size() != m->size)
      out.damage->offset = std::min<std::uint64_t>(data->size(), m->size);
  }
  return out;
}

}  // namespace

std::optional<std::uint64_t> offset_in_message(const std::string& message) {
  const std::string tag = ": offset ";
  const std::size_t at = message.find(tag);
  if (at == std::string::npos) return std::nullopt;
  std::size_t i = at + tag.size();
  if (i >= message.size() || message[i] < '0' || message[i] > '9') return std::nullopt;
  std::uint64_t v = 0;
  for (; i < message.size() && message[i] >= '0' && message[i] <= '9'; ++i) {
    const auto digit = static_cast<std::uint64_t>(message[i] - '0');
    if (v > (UINT64_MAX - digit) / 10) return std::nullopt;
    v = v * 10 + digit;
  }
  return v;
}

CheckpointFileReport inspect_checkpoint(const std::string& name, std::span<const std::byte> bytes) {
  CheckpointFileReport out;
  out.name = name;
  out.size = bytes.size();
  const CheckpointInput input{name, bytes, 0};
  Result<CheckpointLayout> layout = read_checkpoint_layout(input);
  if (!layout.ok()) {
    out.damage = damage_of(name, layout.status());
    return out;
  }
  out.layout = std::move(*layout);
  inspect_blocks(input, out);
  COWSTATE_ASSERT(out.damage || out.blocks.size() == out.layout->blocks.size(), "C3",
                  "an intact file with a block missing from its report");
  return out;
}

Result<CheckpointDirectoryReport> inspect_checkpoint_directory(const std::string& dir,
                                                               FileSystem& fs) {
  Result<std::unique_ptr<CheckpointStorage>> storage = CheckpointStorage::open_read_only(dir, fs);
  if (!storage.ok()) return storage.status();
  Result<CheckpointScan> scan = (*storage)->scan();
  if (!scan.ok()) return scan.status();
  Result<std::vector<std::string>> names = fs.list_dir((*storage)->dir());
  if (!names.ok()) return names.status();
  CheckpointDirectoryReport out;
  out.dir = (*storage)->dir();
  for (std::uint64_t id : scan->complete) {
    out.checkpoints.push_back(inspect_stored(**storage, fs, id, true, ""));
  }
  for (const DamagedCheckpoint& d : scan->damaged) {
    out.checkpoints.push_back(inspect_stored(**storage, fs, d.id, false, d.reason));
  }
  std::sort(out.checkpoints.begin(), out.checkpoints.end(),
            [](const auto& a, const auto& b) { return a.id < b.id; });
  for (const std::string& name : *names) {
    const bool known =
        std::any_of(out.checkpoints.begin(), out.checkpoints.end(), [&](const auto& c) {
          const std::string data = (*storage)->data_path(c.id);
          const std::string manifest = (*storage)->manifest_path(c.id);
          return out.dir + "/" + name == data || out.dir + "/" + name == manifest;
        });
    if (!known) out.other_files.push_back(name);
  }
  COWSTATE_ASSERT(out.checkpoints.size() == scan->complete.size() + scan->damaged.size(), "C5",
                  "every scanned checkpoint reported once");
  return Result<CheckpointDirectoryReport>(std::move(out));
}

}  // namespace cowstate
