// Checkpoint files: the async writer, the layout reader and restore. See
// cowstate/checkpoint.h for the design and docs/checkpoint-format.md for the bytes.
#include "cowstate/checkpoint.h"

#include <lz4.h>
#include <zstd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <limits>
#include <new>
#include <string>
#include <utility>

#include "cowstate/hooks.h"

namespace cowstate {

namespace {

// Header fields before the state metadata, and the smallest state record.
constexpr std::size_t kFixedHeaderSize = 38;
constexpr std::size_t kMinStateRecord = 2 + 1 + 8 + 1;
constexpr std::size_t kHeaderSizeOffset = 8;
// A state's TTL configuration: ttl, update type, visibility, cleanup flags, cleanup size.
constexpr std::size_t kTtlRecordSize = 8 + 1 + 1 + 1 + 4;
constexpr std::uint8_t kTtlIncremental = 1;
constexpr std::uint8_t kTtlKeySwitch = 2;
constexpr std::uint8_t kTtlFullSnapshot = 4;

using detail::hex64;
using detail::quoted;

Status prefixed(const std::string& name, const Status& st) {
  COWSTATE_ASSERT(!st.ok(), "REQUIRES", "prefixing an ok Status");
  return Status::error(name + ": " + st.message());
}

std::span<const std::byte> as_bytes(const std::string& s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

struct ZstdCCtxFree {
  void operator()(ZSTD_CCtx* c) const noexcept { ZSTD_freeCCtx(c); }
};
struct ZstdDCtxFree {
  void operator()(ZSTD_DCtx* c) const noexcept { ZSTD_freeDCtx(c); }
};

// Bytes of the header of `h`, checksum included.
std::size_t header_size_of(const CheckpointHeader& h) noexcept {
  std::size_t size = kFixedHeaderSize + 8;
  for (const StateMetaInfo& s : h.states) {
    size += kMinStateRecord + s.name.size() + (s.ttl ? kTtlRecordSize : 0);
  }
  return size;
}

void encode_header(ByteWriter& w, const CheckpointHeader& h) {
  const std::size_t size = header_size_of(h);
  COWSTATE_ASSERT(size <= std::numeric_limits<std::uint32_t>::max(), "C3", "header above 4 GiB");
  w.put_bytes(kCheckpointMagic);
  w.put_u16(kCheckpointFormatVersion);
  w.put_u16(0);  // flags
  w.put_u32(static_cast<std::uint32_t>(size));
  w.put_u64(h.checkpoint_id);
  w.put_u32(static_cast<std::uint32_t>(h.max_parallelism));
  w.put_i32(h.range.start());
  w.put_i32(h.range.end());
  w.put_u16(h.key_serializer);
  w.put_u32(static_cast<std::uint32_t>(h.states.size()));
  COWSTATE_ASSERT(w.size() == kFixedHeaderSize, "C3", "fixed header layout");
  for (const StateMetaInfo& s : h.states) {
    COWSTATE_ASSERT(!s.name.empty() && s.name.size() <= 0xffff, "B3",
                    "state name empty or longer than 65535 bytes");
    w.put_u16(static_cast<std::uint16_t>(s.name.size()));
    w.put_bytes(as_bytes(s.name));
    w.put_u8(static_cast<std::uint8_t>(s.kind));
    w.put_u16(s.namespace_serializer);
    w.put_u16(s.state_serializer);
    w.put_u16(s.element_serializer);
    w.put_u16(s.value_serializer);
    w.put_u8(s.ttl.has_value() ? 1 : 0);
    if (s.ttl) {
      COWSTATE_ASSERT(s.ttl->valid(), "L1", "writing an invalid TTL configuration");
      const auto& inc = s.ttl->incremental_cleanup;
      w.put_u64(s.ttl->ttl_ms);
      w.put_u8(static_cast<std::uint8_t>(s.ttl->update_type));
      w.put_u8(static_cast<std::uint8_t>(s.ttl->visibility));
      w.put_u8(static_cast<std::uint8_t>((inc ? kTtlIncremental : 0) |
                                         (inc && inc->run_on_every_key_switch ? kTtlKeySwitch : 0) |
                                         (s.ttl->full_snapshot_cleanup ? kTtlFullSnapshot : 0)));
      w.put_u32(inc ? inc->cleanup_size : 0);
    }
  }
  w.put_u64(checksum64(w.written()));
  COWSTATE_ASSERT(w.size() == size, "C3", "header size field differs from the header");
}

}  // namespace

const char* compression_name(Compression c) noexcept {
  switch (c) {
    case Compression::none:
      return "none";
    case Compression::lz4:
      return "lz4";
    case Compression::zstd:
      return "zstd";
  }
  return "unknown";
}

// ---------------------------------------------------------------------------------------
// BackendSnapshot

BackendSnapshot::BackendSnapshot(CheckpointHeader header,
                                 std::vector<std::vector<Section>> key_groups)
    : header_(std::move(header)), key_groups_(std::move(key_groups)) {
  COWSTATE_ASSERT(key_groups_.size() == static_cast<std::size_t>(header_.range.size()), "C1",
                  "one section list per key group of the range");
  for (const auto& sections : key_groups_) {
    for (std::size_t i = 0; i < sections.size(); ++i) {
      COWSTATE_ASSERT(sections[i].snapshot != nullptr, "C1", "a section without a snapshot");
      COWSTATE_ASSERT(sections[i].state < header_.states.size(), "C1",
                      "a section of an unknown state");
      COWSTATE_ASSERT(i == 0 || sections[i - 1].state < sections[i].state, "C1",
                      "sections not in ascending state order");
      entries_ += sections[i].snapshot->size();
    }
  }
}

std::vector<BackendSnapshot::Section>& BackendSnapshot::key_group(std::int32_t key_group) {
  COWSTATE_ASSERT(header_.range.contains(key_group), "B1",
                  "key group outside the snapshot's range");
  return key_groups_[static_cast<std::size_t>(key_group - header_.range.start())];
}

std::size_t BackendSnapshot::live_key_groups() const noexcept {
  std::size_t n = 0;
  for (const auto& sections : key_groups_) {
    if (std::any_of(sections.begin(), sections.end(),
                    [](const Section& s) { return !s.snapshot->released(); })) {
      ++n;
    }
  }
  return n;
}

void BackendSnapshot::release_key_group(std::int32_t key_group) noexcept {
  for (Section& s : this->key_group(key_group)) s.snapshot->release();
}

void BackendSnapshot::release_all() noexcept {
  for (auto& sections : key_groups_) {
    for (Section& s : sections) s.snapshot->release();
  }
}

// ---------------------------------------------------------------------------------------
// CheckpointWriter

struct CheckpointWriter::Codec {
  std::unique_ptr<ZSTD_CCtx, ZstdCCtxFree> zstd;
};

CheckpointWriter::CheckpointWriter(std::unique_ptr<BackendSnapshot> snapshot, CheckpointSink* sink,
                                   CheckpointWriteOptions options)
    : snapshot_(std::move(snapshot)),
      sink_(sink),
      options_(options),
      codec_(std::make_unique<Codec>()) {
  COWSTATE_ASSERT(snapshot_ != nullptr, "REQUIRES", "a CheckpointWriter needs a snapshot");
  COWSTATE_ASSERT(sink_ != nullptr, "REQUIRES", "a CheckpointWriter needs a sink");
  next_key_group_ = snapshot_->header().range.start();
  index_.reserve(static_cast<std::size_t>(snapshot_->header().range.size()));
}

CheckpointWriter::~CheckpointWriter() {
  if (snapshot_ != nullptr) snapshot_->release_all();  // C2
}

void CheckpointWriter::fail(Status st) {
  COWSTATE_ASSERT(!finished(), "C2", "a finished checkpoint writer failed again");
  status_ = std::move(st);
  state_ = State::failed;
  // Planted bug: the failure path forgets its cleanup (the release and the check paired
  // with it), so the map snapshots stay pinned until the writer is destroyed.
  if (COWSTATE_MUTANT(snapshot_not_released_on_failure)) return;
  snapshot_->release_all();  // C2: nothing stays pinned by a dead checkpoint
  COWSTATE_ASSERT(snapshot_->live_key_groups() == 0, "C2", "map snapshots left after failure");
}

void CheckpointWriter::cancel() {
  if (finished()) return;
  fail(Status::error("checkpoint " + std::to_string(snapshot_->header().checkpoint_id) +
                     " cancelled after " + std::to_string(offset_) + " bytes"));
}

bool CheckpointWriter::emit(std::span<const std::byte> bytes) {
  if (Status st = sink_->append(bytes); !st.ok()) {
    fail(Status::error("writing checkpoint " + std::to_string(snapshot_->header().checkpoint_id) +
                       " at byte " + std::to_string(offset_) + ": " + st.message()));
    return false;
  }
  offset_ += bytes.size();
  return true;
}

void CheckpointWriter::begin_block() {
  COWSTATE_ASSERT(!block_open_ && block_.size() == 0, "C1", "a block began over another");
  const auto& sections = snapshot_->key_group(next_key_group_);
  block_.put_u32(static_cast<std::uint32_t>(next_key_group_));
  block_.put_u32(static_cast<std::uint32_t>(sections.size()));  // patched by finish_block
  section_ = 0;
  sections_kept_ = 0;
  if (!sections.empty()) begin_section(sections[0]);
  block_open_ = true;
}

void CheckpointWriter::begin_section(const BackendSnapshot::Section& s) {
  section_at_ = block_.size();
  block_.put_u32(s.state);
  block_.put_u64(s.snapshot->size());  // patched by end_section when cleanup left entries out
}

void CheckpointWriter::end_section(const KeyGroupStateSnapshot& s) {
  COWSTATE_ASSERT(s.done() && s.emitted() <= s.size(), "C1", "a section ended early");
  if (s.emitted() == 0) {
    block_.truncate(section_at_);  // TTL cleanup left every entry out: no section
  } else {
    if (s.emitted() != s.size()) block_.patch_u64(section_at_ + 4, s.emitted());
    ++sections_kept_;
  }
}

bool CheckpointWriter::finish_block() {
  COWSTATE_ASSERT(block_open_, "C1", "finishing a block that was not begun");
  COWSTATE_ASSERT(sections_kept_ <= snapshot_->key_group(next_key_group_).size(), "C1",
                  "more sections kept than the key group has");
  block_.patch_u32(4, sections_kept_);
  std::span<const std::byte> raw = block_.written();
  std::span<const std::byte> stored = raw;
  Compression used = Compression::none;
  if (options_.compression == Compression::lz4 && raw.size() <= LZ4_MAX_INPUT_SIZE) {
    const int bound = LZ4_compressBound(static_cast<int>(raw.size()));
    compressed_.resize(static_cast<std::size_t>(bound));
    const int n = LZ4_compress_default(reinterpret_cast<const char*>(raw.data()),
                                       reinterpret_cast<char*>(compressed_.data()),
                                       static_cast<int>(raw.size()), bound);
    if (n > 0) {
      stored = std::span<const std::byte>(compressed_.data(), static_cast<std::size_t>(n));
      used = Compression::lz4;
    }
  } else if (options_.compression == Compression::zstd) {
    if (codec_->zstd == nullptr) {
      codec_->zstd.reset(ZSTD_createCCtx());
      if (codec_->zstd == nullptr) throw std::bad_alloc();
    }
    compressed_.resize(ZSTD_compressBound(raw.size()));
    const std::size_t n =
        ZSTD_compressCCtx(codec_->zstd.get(), compressed_.data(), compressed_.size(), raw.data(),
                          raw.size(), options_.zstd_level);
    if (ZSTD_isError(n) == 0) {
      stored = std::span<const std::byte>(compressed_.data(), n);
      used = Compression::zstd;
    }
  }
  // Compression that does not pay, or that expands beyond what a reader accepts, is undone.
  if (used != Compression::none &&
      (stored.size() >= raw.size() || raw.size() > stored.size() * kMaxCompressionRatio)) {
    stored = raw;
    used = Compression::none;
  }
  const CheckpointBlockInfo entry{next_key_group_, offset_, stored.size(),
                                  raw.size(),      used,    checksum64(stored)};
  if (!emit(stored)) return false;
  index_.push_back(entry);
  block_.clear();
  block_open_ = false;
  snapshot_->release_key_group(next_key_group_);  // C2: as soon as its block is in the sink
  return true;
}

bool CheckpointWriter::finish_file() {
  const KeyGroupRange range = snapshot_->header().range;
  COWSTATE_ASSERT(index_.size() == static_cast<std::size_t>(range.size()), "C1",
                  "one block per key group");
  ByteWriter w;
  const std::uint64_t index_offset = offset_;
  w.put_u32(static_cast<std::uint32_t>(index_.size()));
  for (const CheckpointBlockInfo& e : index_) {
    w.put_u32(static_cast<std::uint32_t>(e.key_group));
    w.put_u64(e.offset);
    w.put_u64(e.stored);
    w.put_u64(e.raw);
    w.put_u8(static_cast<std::uint8_t>(e.compression));
    w.put_u64(e.checksum);
  }
  const std::uint64_t index_size = w.size();
  COWSTATE_ASSERT(index_size == 4 + index_.size() * kCheckpointIndexEntrySize, "C3",
                  "index layout");
  w.put_u64(index_offset);
  w.put_u64(index_size);
  w.put_u64(checksum64(w.written()));
  w.put_bytes(kCheckpointEndMagic);
  w.trim();
  if (!emit(w.written())) return false;
  state_ = State::done;
  snapshot_->release_all();
  COWSTATE_ASSERT(snapshot_->live_key_groups() == 0, "C2", "map snapshots left after the file");
  return true;
}

bool CheckpointWriter::step(std::size_t max_entries) {
  COWSTATE_ASSERT(max_entries > 0, "REQUIRES", "a checkpoint step needs a positive budget");
  if (finished()) return true;
  if (sink_->cancel_requested()) {
    cancel();
    return true;
  }
  if (state_ == State::header) {
    ByteWriter w;
    encode_header(w, snapshot_->header());
    w.trim();
    if (!emit(w.written())) return true;
    state_ = State::blocks;
  }
  const KeyGroupRange range = snapshot_->header().range;
  std::size_t budget = max_entries;
  while (budget > 0 && state_ == State::blocks) {
    if (sink_->cancel_requested()) {
      cancel();
      break;
    }
    if (range.empty() || next_key_group_ > range.end()) {
      finish_file();
      break;
    }
    if (!block_open_) {
      begin_block();
      --budget;
      continue;
    }
    auto& sections = snapshot_->key_group(next_key_group_);
    if (section_ < sections.size()) {
      KeyGroupStateSnapshot& s = *sections[section_].snapshot;
      budget -= s.write(block_, budget);
      if (s.done()) {
        end_section(s);
        ++section_;
        if (section_ < sections.size()) begin_section(sections[section_]);
      }
    } else {
      if (!finish_block()) break;
      ++next_key_group_;
    }
  }
  // block_ keeps its slack between steps (only written() is ever read): trimming it here
  // would make the next step's room zero-filled again, a memset of every block.
  return finished();
}

// ---------------------------------------------------------------------------------------
// Reading

Result<CheckpointLayout> read_checkpoint_layout(const CheckpointInput& input,
                                                const RestoreOptions& options) {
  const std::span<const std::byte> bytes = input.bytes;
  const std::string& name = input.name;
  auto err = [&name](const ByteReader& r, std::size_t at, const std::string& what) {
    return prefixed(name, r.error_at(at, what));
  };
  ByteReader r(bytes);
  CheckpointLayout out;

  // Identity first, so a foreign file is called foreign rather than corrupt.
  std::span<const std::byte> magic;
  if (Status st = r.read_bytes(kCheckpointMagic.size(), magic, "magic \"CSCP\""); !st.ok()) {
    return prefixed(name, st);
  }
  if (!std::equal(magic.begin(), magic.end(), kCheckpointMagic.begin())) {
    return err(r, 0,
               "expected magic \"CSCP\" (a cowstate checkpoint), found " + quoted(magic) +
                   ": not a checkpoint file");
  }
  std::uint16_t version = 0;
  std::uint16_t flags = 0;
  std::uint32_t header_size = 0;
  if (Status st = r.read_u16(version, "format version"); !st.ok()) return prefixed(name, st);
  if (version != kCheckpointFormatVersion) {
    return err(r, 4,
               "expected format version " + std::to_string(kCheckpointFormatVersion) + ", found " +
                   std::to_string(version) + ": written by an incompatible cowstate version");
  }
  if (Status st = r.read_u16(flags, "flags"); !st.ok()) return prefixed(name, st);
  if (flags != 0) {
    return err(r, 6, "expected flags 0, found " + std::to_string(flags));
  }
  if (Status st = r.read_u32(header_size, "header size"); !st.ok()) return prefixed(name, st);

  // The frame: footer at the end, header checksum, index checksum.
  const std::size_t min_size = kFixedHeaderSize + 8 + 4 + kCheckpointFooterSize;
  if (bytes.size() < min_size) {
    return err(r, bytes.size(),
               "expected at least " + std::to_string(min_size) + " bytes, found " +
                   std::to_string(bytes.size()) + ": the file is truncated");
  }
  const std::size_t footer_at = bytes.size() - kCheckpointFooterSize;
  const std::size_t end_magic_at = bytes.size() - kCheckpointEndMagic.size();
  if (!std::equal(kCheckpointEndMagic.begin(), kCheckpointEndMagic.end(),
                  bytes.begin() + static_cast<std::ptrdiff_t>(end_magic_at))) {
    return err(r, end_magic_at,
               "expected end magic \"CSCP_END\", found " + quoted(bytes.subspan(end_magic_at)) +
                   ": the file is truncated or was not completely written");
  }
  if (header_size < kFixedHeaderSize + 8 || header_size > footer_at - 4) {
    return err(r, kHeaderSizeOffset,
               "expected a header size in [" + std::to_string(kFixedHeaderSize + 8) + ", " +
                   std::to_string(footer_at - 4) + "], found " + std::to_string(header_size));
  }
  const std::size_t header_sum_at = header_size - 8;
  const std::uint64_t header_sum = detail::load_le<std::uint64_t>(bytes.data() + header_sum_at);
  if (options.verify_checksums) {
    const std::uint64_t computed = checksum64(bytes.first(header_sum_at));
    if (computed != header_sum) {
      return err(r, header_sum_at,
                 "expected header checksum " + hex64(computed) + " (XXH3-64 of bytes 0.." +
                     std::to_string(header_sum_at) + "), found " + hex64(header_sum) +
                     ": the header is corrupt");
    }
  }
  const std::uint64_t index_offset = detail::load_le<std::uint64_t>(bytes.data() + footer_at);
  const std::uint64_t index_size = detail::load_le<std::uint64_t>(bytes.data() + footer_at + 8);
  const std::uint64_t index_sum = detail::load_le<std::uint64_t>(bytes.data() + footer_at + 16);
  if (options.verify_checksums) {
    // Covers the index and the footer's offset and size fields (they are contiguous in a
    // good file; when they are not, the tiling check below refuses the file anyway).
    const std::size_t from =
        index_offset <= footer_at ? static_cast<std::size_t>(index_offset) : footer_at;
    const std::uint64_t computed = checksum64(bytes.subspan(from, footer_at + 16 - from));
    if (computed != index_sum) {
      return err(r, footer_at + 16,
                 "expected index checksum " + hex64(computed) + " (XXH3-64 of bytes " +
                     std::to_string(from) + ".." + std::to_string(footer_at + 16) + "), found " +
                     hex64(index_sum) + ": the index or footer is corrupt");
    }
  }
  if (index_offset < header_size || index_offset > footer_at ||
      index_size != footer_at - index_offset) {
    return err(r, footer_at,
               "expected the index between the header (ends at " + std::to_string(header_size) +
                   ") and the footer (at " + std::to_string(footer_at) +
                   ") and ending at the footer, found offset " + std::to_string(index_offset) +
                   " size " + std::to_string(index_size));
  }

  // Header fields.
  CheckpointHeader& h = out.header;
  out.header_size = header_size;
  r.set_limit(header_sum_at);
  std::uint32_t max_par = 0;
  std::int32_t start = 0;
  std::int32_t end = 0;
  std::uint32_t state_count = 0;
  if (Status st = r.read_u64(h.checkpoint_id, "checkpoint id"); !st.ok()) return prefixed(name, st);
  if (Status st = r.read_u32(max_par, "max parallelism"); !st.ok()) return prefixed(name, st);
  if (max_par < 1 || max_par > static_cast<std::uint32_t>(kUpperBoundMaxParallelism)) {
    return err(r, 20, "expected a max parallelism in [1, 32768], found " + std::to_string(max_par));
  }
  h.max_parallelism = static_cast<std::int32_t>(max_par);
  if (Status st = r.read_i32(start, "key group range start"); !st.ok()) return prefixed(name, st);
  if (Status st = r.read_i32(end, "key group range end"); !st.ok()) return prefixed(name, st);
  const bool empty_range = start == 0 && end == -1;
  if (!empty_range && (start < 0 || end < start || end >= h.max_parallelism)) {
    return err(r, 24,
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
    return err(r, 34,
               "expected a state count of at most " +
                   std::to_string(r.remaining() / kMinStateRecord) + " (" +
                   std::to_string(r.remaining()) + " bytes of state metadata), found " +
                   std::to_string(state_count));
  }
  COWSTATE_ASSERT(r.offset() == kFixedHeaderSize, "C3", "fixed header layout");
  for (std::uint32_t i = 0; i < state_count; ++i) {
    const std::size_t at = r.offset();
    out.state_offsets.push_back(at);
    StateMetaInfo s;
    std::uint16_t name_len = 0;
    std::span<const std::byte> name_bytes;
    std::uint8_t kind = 0;
    std::uint8_t has_ttl = 0;
    if (Status st = r.read_u16(name_len, "state name length"); !st.ok()) return prefixed(name, st);
    if (name_len == 0) return err(r, at, "expected a non-empty state name, found length 0");
    if (Status st = r.read_bytes(name_len, name_bytes, "state name"); !st.ok()) {
      return prefixed(name, st);
    }
    s.name.assign(reinterpret_cast<const char*>(name_bytes.data()), name_bytes.size());
    const std::size_t kind_at = r.offset();
    if (Status st = r.read_u8(kind, "state kind"); !st.ok()) return prefixed(name, st);
    if (kind < 1 || kind > 5) {
      return err(r, kind_at,
                 "expected a state kind in [1, 5] for state \"" + s.name + "\", found " +
                     std::to_string(kind));
    }
    s.kind = static_cast<StateKind>(kind);
    for (std::uint16_t* id : {&s.namespace_serializer, &s.state_serializer, &s.element_serializer,
                              &s.value_serializer}) {
      if (Status st = r.read_u16(*id, "serializer id"); !st.ok()) return prefixed(name, st);
    }
    const std::size_t ttl_at = r.offset();
    if (Status st = r.read_u8(has_ttl, "TTL flag"); !st.ok()) return prefixed(name, st);
    if (has_ttl > 1) {
      return err(r, ttl_at, "expected a TTL flag 0 or 1, found " + std::to_string(has_ttl));
    }
    if (has_ttl == 1) {
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
      if (ttl.ttl_ms == 0 ||
          ttl.ttl_ms > static_cast<std::uint64_t>(StateTtlConfig::kMaxTimestamp)) {
        return err(r, ttl_at + 1,
                   "expected a TTL in [1, 2^63-1] ms for state \"" + s.name + "\", found " +
                       std::to_string(ttl.ttl_ms));
      }
      if (update > 1 || visibility > 1) {
        return err(r, ttl_at + 9,
                   "expected a TTL update type and visibility in [0, 1], found " +
                       std::to_string(update) + " and " + std::to_string(visibility));
      }
      const bool incremental = (cleanup & kTtlIncremental) != 0;
      if (cleanup > 7 || ((cleanup & kTtlKeySwitch) != 0 && !incremental) ||
          incremental != (cleanup_size != 0)) {
        return err(r, ttl_at + 11,
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
    }
    for (const StateMetaInfo& prior : h.states) {
      if (prior.name == s.name) {
        return err(r, at, "expected distinct state names, found \"" + s.name + "\" twice");
      }
    }
    h.states.push_back(std::move(s));
  }
  if (!r.at_end()) {
    return err(r, r.offset(),
               "expected the header checksum after " + std::to_string(state_count) +
                   " states, found " + std::to_string(r.remaining()) + " more bytes");
  }

  // Index: one block per key group, tiling [header_size, index_offset).
  ByteReader ir(bytes);
  ir.seek(static_cast<std::size_t>(index_offset));
  ir.set_limit(footer_at);
  std::uint32_t count = 0;
  if (Status st = ir.read_u32(count, "index entry count"); !st.ok()) return prefixed(name, st);
  if (count != static_cast<std::uint32_t>(h.range.size()) ||
      index_size != 4 + std::uint64_t{count} * kCheckpointIndexEntrySize) {
    return err(ir, static_cast<std::size_t>(index_offset),
               "expected " + std::to_string(h.range.size()) +
                   " index entries (one per key group of " + h.range.to_string() + ") in " +
                   std::to_string(index_size) + " bytes, found a count of " +
                   std::to_string(count));
  }
  std::uint64_t expected_offset = header_size;
  out.blocks.reserve(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    const std::size_t at = ir.offset();
    CheckpointBlockInfo b{};
    std::uint32_t kg = 0;
    std::uint8_t compression = 0;
    Status st = ir.read_u32(kg, "index key group");
    if (st.ok()) st = ir.read_u64(b.offset, "block offset");
    if (st.ok()) st = ir.read_u64(b.stored, "block size");
    if (st.ok()) st = ir.read_u64(b.raw, "block raw size");
    if (st.ok()) st = ir.read_u8(compression, "block compression");
    if (st.ok()) st = ir.read_u64(b.checksum, "block checksum");
    if (!st.ok()) return prefixed(name, st);
    const std::int32_t want_kg = h.range.start() + static_cast<std::int32_t>(i);
    if (kg != static_cast<std::uint32_t>(want_kg)) {
      return err(ir, at,
                 "expected index entry " + std::to_string(i) + " for key group " +
                     std::to_string(want_kg) + ", found key group " + std::to_string(kg));
    }
    b.key_group = want_kg;
    if (b.offset != expected_offset || b.stored > index_offset - b.offset) {
      return err(ir, at + 4,
                 "expected the block of key group " + std::to_string(kg) + " at offset " +
                     std::to_string(expected_offset) + " and inside the blocks area (ends at " +
                     std::to_string(index_offset) + "), found offset " + std::to_string(b.offset) +
                     " size " + std::to_string(b.stored));
    }
    if (compression > 2) {
      return err(ir, at + 28,
                 "expected a block compression in [0, 2] (none, lz4, zstd), found " +
                     std::to_string(compression));
    }
    b.compression = static_cast<Compression>(compression);
    const bool raw_ok = b.compression == Compression::none
                            ? b.raw == b.stored
                            : (b.raw > b.stored && b.raw / kMaxCompressionRatio <= b.stored);
    if (!raw_ok || b.raw < 8) {
      return err(ir, at + 20,
                 "expected a raw block size of at least 8, equal to the stored size " +
                     std::to_string(b.stored) + " when uncompressed or above it by at most " +
                     std::to_string(kMaxCompressionRatio) + "x when compressed (" +
                     compression_name(b.compression) + "), found " + std::to_string(b.raw));
    }
    expected_offset = b.offset + b.stored;
    out.blocks.push_back(b);
  }
  if (expected_offset != index_offset) {
    return err(ir, static_cast<std::size_t>(index_offset),
               "expected the blocks to end where the index begins, found them ending at " +
                   std::to_string(expected_offset) + ": bytes between blocks and index");
  }
  COWSTATE_ASSERT(out.blocks.size() == static_cast<std::size_t>(h.range.size()), "C3",
                  "one block per key group");
  return Result<CheckpointLayout>(std::move(out));
}

namespace {

// Restore context of one input: its layout and state mapping.
struct InputPlan {
  CheckpointLayout layout;
  std::vector<std::size_t> table_of_state;  // file state index -> backend table index
};

Status map_states(const CheckpointInput& input, const CheckpointLayout& layout,
                  const std::vector<std::unique_ptr<StateTableBase>>& tables,
                  std::vector<std::size_t>& table_of_state) {
  const auto& states = layout.header.states;
  table_of_state.assign(states.size(), 0);
  for (std::size_t i = 0; i < states.size(); ++i) {
    const StateMetaInfo& s = states[i];
    const std::string where = input.name + ": offset " + std::to_string(layout.state_offsets[i]) +
                              ": state \"" + s.name + "\"";
    auto it = std::find_if(tables.begin(), tables.end(),
                           [&s](const auto& t) { return t->meta().name == s.name; });
    if (it == tables.end()) {
      return Status::error(where + " (" + state_kind_name(s.kind) +
                           ") is in the checkpoint but not registered in this backend: register "
                           "it before restoring");
    }
    const StateMetaInfo& m = (*it)->meta();
    auto ids = [](const StateMetaInfo& x) {
      return std::string(state_kind_name(x.kind)) + " state, namespace " +
             serializer_name(x.namespace_serializer) + ", state " +
             serializer_name(x.state_serializer) +
             (x.element_serializer != 0
                  ? std::string(", element ") + serializer_name(x.element_serializer)
                  : std::string()) +
             (x.value_serializer != 0
                  ? std::string(", value ") + serializer_name(x.value_serializer)
                  : std::string()) +
             (x.ttl ? ", with TTL" : "");
    };
    if (m.kind != s.kind || m.namespace_serializer != s.namespace_serializer ||
        m.state_serializer != s.state_serializer || m.element_serializer != s.element_serializer ||
        m.value_serializer != s.value_serializer || m.ttl.has_value() != s.ttl.has_value()) {
      return Status::error(where + ": expected " + ids(m) + " (as registered), found " + ids(s) +
                           ": the checkpoint's state is incompatible");
    }
    table_of_state[i] = static_cast<std::size_t>(it - tables.begin());
  }
  return Status();
}

// The smallest range holding `range` and the range of every input that reads (planted bug
// restore_keeps_out_of_range only).
KeyGroupRange hull_with_inputs(KeyGroupRange range, std::span<const CheckpointInput> inputs,
                               const RestoreOptions& options) {
  for (const CheckpointInput& input : inputs) {
    Result<CheckpointLayout> layout = read_checkpoint_layout(input, options);
    if (!layout.ok() || layout->header.range.empty()) continue;
    const KeyGroupRange r = layout->header.range;
    range = range.empty()
                ? r
                : KeyGroupRange(std::min(range.start(), r.start()), std::max(range.end(), r.end()));
  }
  return range;
}

}  // namespace

Status restore_state_tables(std::vector<std::unique_ptr<StateTableBase>>& tables,
                            std::int32_t max_parallelism, KeyGroupRange range,
                            std::uint16_t key_serializer, std::span<const CheckpointInput> inputs,
                            const RestoreOptions& options) {
  for (const auto& t : tables) {
    COWSTATE_ASSERT(!t->has_live_snapshot(), "C4", "restoring over a table with a live snapshot");
    COWSTATE_ASSERT(t->range() == range, "B1", "a table of another range");
  }
  // The key groups to keep: the target range. (Planted bug: the hull of the target range and
  // every input's range, as if the tables were sized from the checkpoints' metadata.)
  KeyGroupRange keep = range;
  if (COWSTATE_MUTANT(restore_keeps_out_of_range)) keep = hull_with_inputs(range, inputs, options);
  std::vector<std::unique_ptr<StateTableBase>> fresh;
  fresh.reserve(tables.size());
  for (const auto& t : tables) fresh.push_back(t->make_empty(keep));
  std::vector<std::size_t> claimed(static_cast<std::size_t>(keep.size()), inputs.size());
  std::vector<std::size_t> first_mapping;  // planted bug restore_global_state_ids only
  std::vector<std::byte> scratch;
  std::unique_ptr<ZSTD_DCtx, ZstdDCtxFree> zstd;

  for (std::size_t f = 0; f < inputs.size(); ++f) {
    const CheckpointInput& input = inputs[f];
    Result<CheckpointLayout> layout = read_checkpoint_layout(input, options);
    if (!layout.ok()) return layout.status();
    const CheckpointHeader& h = layout->header;
    if (h.max_parallelism != max_parallelism) {
      return Status::error(input.name + ": offset 20: expected max parallelism " +
                           std::to_string(max_parallelism) + " (this backend's), found " +
                           std::to_string(h.max_parallelism) +
                           ": a checkpoint restores only at the max parallelism it was written "
                           "with");
    }
    if (h.key_serializer != key_serializer) {
      return Status::error(input.name + ": offset 32: expected key serializer id " +
                           std::to_string(key_serializer) + " (" + serializer_name(key_serializer) +
                           "), found " + std::to_string(h.key_serializer) + " (" +
                           serializer_name(h.key_serializer) + ")");
    }
    std::vector<std::size_t> table_of_state;
    if (Status st = map_states(input, *layout, tables, table_of_state); !st.ok()) return st;
    if (COWSTATE_MUTANT(restore_global_state_ids)) {
      // Planted bug: the first file's state numbering is taken for every file.
      if (f == 0) first_mapping = table_of_state;
      if (first_mapping.size() == table_of_state.size()) table_of_state = first_mapping;
    }

    for (const CheckpointBlockInfo& b : layout->blocks) {
      if (!keep.contains(b.key_group)) continue;  // another instance's key group
      const auto slot = static_cast<std::size_t>(b.key_group - keep.start());
      if (claimed[slot] != inputs.size()) {
        return Status::error(input.name + ": offset " + std::to_string(b.offset) + ": key group " +
                             std::to_string(b.key_group) + " is also in " +
                             inputs[claimed[slot]].name + ": the checkpoints to restore overlap");
      }
      claimed[slot] = f;
      const auto stored = input.bytes.subspan(static_cast<std::size_t>(b.offset),
                                              static_cast<std::size_t>(b.stored));
      if (options.verify_checksums) {
        const std::uint64_t computed = checksum64(stored);
        if (computed != b.checksum) {
          return Status::error(input.name + ": offset " + std::to_string(b.offset) +
                               ": expected block checksum " + hex64(b.checksum) + " (key group " +
                               std::to_string(b.key_group) + ", from the index), found " +
                               hex64(computed) + ": the block is corrupt");
        }
      }
      // A reader over the raw block. Uncompressed: the file itself, so offsets are absolute.
      std::span<const std::byte> raw_bytes = input.bytes;
      std::size_t raw_begin = static_cast<std::size_t>(b.offset);
      std::size_t raw_end = raw_begin + stored.size();
      std::string where = input.name + ": ";
      if (b.compression != Compression::none) {
        scratch.resize(static_cast<std::size_t>(b.raw));
        std::size_t got = 0;
        bool ok = false;
        if (b.compression == Compression::lz4) {
          if (b.stored <= LZ4_MAX_INPUT_SIZE && b.raw <= std::numeric_limits<int>::max()) {
            const int n = LZ4_decompress_safe(reinterpret_cast<const char*>(stored.data()),
                                              reinterpret_cast<char*>(scratch.data()),
                                              static_cast<int>(stored.size()),
                                              static_cast<int>(scratch.size()));
            ok = n >= 0;
            got = ok ? static_cast<std::size_t>(n) : 0;
          }
        } else {
          if (zstd == nullptr) {
            zstd.reset(ZSTD_createDCtx());
            if (zstd == nullptr) throw std::bad_alloc();
          }
          const std::size_t n = ZSTD_decompressDCtx(zstd.get(), scratch.data(), scratch.size(),
                                                    stored.data(), stored.size());
          ok = ZSTD_isError(n) == 0;
          got = ok ? n : 0;
        }
        if (!ok || got != b.raw) {
          return Status::error(input.name + ": offset " + std::to_string(b.offset) +
                               ": expected a " + compression_name(b.compression) +
                               " block of key group " + std::to_string(b.key_group) +
                               " that decompresses to " + std::to_string(b.raw) + " bytes, found " +
                               (ok ? std::to_string(got) + " bytes" : "invalid compressed data"));
        }
        raw_bytes = scratch;
        raw_begin = 0;
        raw_end = scratch.size();
        where += "block of key group " + std::to_string(b.key_group) + " at offset " +
                 std::to_string(b.offset) + " (" + compression_name(b.compression) +
                 ", decompressed): ";
      }
      ByteReader r(raw_bytes);
      r.seek(raw_begin);
      r.set_limit(raw_end);
      auto fail = [&where](const Status& st) { return Status::error(where + st.message()); };
      std::uint32_t kg = 0;
      std::uint32_t sections = 0;
      if (Status st = r.read_u32(kg, "block key group"); !st.ok()) return fail(st);
      if (kg != static_cast<std::uint32_t>(b.key_group)) {
        return fail(r.error_at(raw_begin, "expected block key group " +
                                              std::to_string(b.key_group) +
                                              " (from the index), found " + std::to_string(kg)));
      }
      if (Status st = r.read_u32(sections, "block section count"); !st.ok()) return fail(st);
      if (sections > h.states.size()) {
        return fail(r.error_at(raw_begin + 4,
                               "expected at most " + std::to_string(h.states.size()) +
                                   " sections (one per state), found " + std::to_string(sections)));
      }
      std::uint32_t previous = 0;
      for (std::uint32_t s = 0; s < sections; ++s) {
        const std::size_t at = r.offset();
        std::uint32_t state = 0;
        std::uint64_t entries = 0;
        if (Status st = r.read_u32(state, "section state index"); !st.ok()) return fail(st);
        if (state >= h.states.size() || (s > 0 && state <= previous)) {
          return fail(r.error_at(at, "expected a state index in [" +
                                         std::to_string(s > 0 ? previous + 1 : 0) + ", " +
                                         std::to_string(h.states.size()) + ") (ascending), found " +
                                         std::to_string(state)));
        }
        previous = state;
        if (Status st = r.read_u64(entries, "section entry count"); !st.ok()) return fail(st);
        StateTableBase& table = *fresh[table_of_state[state]];
        if (entries == 0) {
          return fail(r.error_at(at + 4, "expected a positive entry count for state \"" +
                                             table.meta().name + "\", found 0"));
        }
        if (Status st = table.read_entries(r, b.key_group, entries); !st.ok()) return fail(st);
      }
      if (!r.at_end()) {
        return fail(r.error_at(r.offset(), "expected the end of the block of key group " +
                                               std::to_string(b.key_group) + ", found " +
                                               std::to_string(r.remaining()) + " more bytes"));
      }
    }
  }
  // C4: only now does the backend change.
  for (std::size_t i = 0; i < tables.size(); ++i) tables[i] = std::move(fresh[i]);
  return Status();
}

}  // namespace cowstate
