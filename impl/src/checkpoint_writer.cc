// Writing checkpoint files: the header encoding, the backend snapshot a checkpoint is
// written from, and the async writer that turns it into blocks and the index. See
// cowstate/checkpoint.h for the design and docs/checkpoint-format.md for the bytes.
#include <lz4.h>
#include <zstd.h>

#include <algorithm>
#include <limits>
#include <new>
#include <string>
#include <utility>

#include "checkpoint_internal.h"
#include "cowstate/checkpoint.h"
#include "cowstate/hooks.h"

namespace cowstate {

namespace {

using checkpoint_detail::kFixedHeaderSize;
using checkpoint_detail::kMinStateRecord;
using checkpoint_detail::kTtlFullSnapshot;
using checkpoint_detail::kTtlIncremental;
using checkpoint_detail::kTtlKeySwitch;
using checkpoint_detail::kTtlRecordSize;

std::span<const std::byte> as_bytes(const std::string& s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

struct ZstdCCtxFree {
  void operator()(ZSTD_CCtx* c) const noexcept { ZSTD_freeCCtx(c); }
};

// The format a checkpoint is written in: 2 unless it has a parent.
std::uint16_t format_of(const CheckpointHeader& h) noexcept {
  return h.parent_checkpoint_id != 0 ? kCheckpointFormatVersion : kCheckpointFullFormatVersion;
}

// Bytes of the header of `h`, checksum included.
std::size_t header_size_of(const CheckpointHeader& h) noexcept {
  std::size_t size = kFixedHeaderSize + (format_of(h) >= 3 ? 8 : 0) + 8;
  for (const StateMetaInfo& s : h.states) {
    size += kMinStateRecord + s.name.size() + (s.ttl ? kTtlRecordSize : 0);
  }
  return size;
}

void encode_header(ByteWriter& w, const CheckpointHeader& h) {
  const std::size_t size = header_size_of(h);
  COWSTATE_ASSERT(size <= std::numeric_limits<std::uint32_t>::max(), "C3", "header above 4 GiB");
  w.put_bytes(kCheckpointMagic);
  w.put_u16(format_of(h));
  w.put_u16(0);  // flags
  w.put_u32(static_cast<std::uint32_t>(size));
  w.put_u64(h.checkpoint_id);
  w.put_u32(static_cast<std::uint32_t>(h.max_parallelism));
  w.put_i32(h.range.start());
  w.put_i32(h.range.end());
  w.put_u16(h.key_serializer);
  w.put_u32(static_cast<std::uint32_t>(h.states.size()));
  COWSTATE_ASSERT(w.size() == kFixedHeaderSize, "C3", "fixed header layout");
  if (format_of(h) >= 3) w.put_u64(h.parent_checkpoint_id);
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

// A block's stored form: compressed, or the raw bytes themselves.
struct StoredBlock {
  std::span<const std::byte> bytes;
  Compression compression = Compression::none;
};

// `raw` compressed into `out` as `options` ask. Compression that fails, does not pay, or
// expands beyond what a reader accepts is undone: the raw bytes are stored.
StoredBlock compress_block(std::span<const std::byte> raw, const CheckpointWriteOptions& options,
                           std::unique_ptr<ZSTD_CCtx, ZstdCCtxFree>& zstd,
                           std::vector<std::byte>& out) {
  StoredBlock stored{raw, Compression::none};
  if (options.compression == Compression::lz4 && raw.size() <= LZ4_MAX_INPUT_SIZE) {
    const int bound = LZ4_compressBound(static_cast<int>(raw.size()));
    out.resize(static_cast<std::size_t>(bound));
    const int n = LZ4_compress_default(reinterpret_cast<const char*>(raw.data()),
                                       reinterpret_cast<char*>(out.data()),
                                       static_cast<int>(raw.size()), bound);
    if (n > 0) {
      stored = {std::span<const std::byte>(out.data(), static_cast<std::size_t>(n)),
                Compression::lz4};
    }
  } else if (options.compression == Compression::zstd) {
    if (zstd == nullptr) {
      zstd.reset(ZSTD_createCCtx());
      if (zstd == nullptr) throw std::bad_alloc();
    }
    out.resize(ZSTD_compressBound(raw.size()));
    const std::size_t n = ZSTD_compressCCtx(zstd.get(), out.data(), out.size(), raw.data(),
                                            raw.size(), options.zstd_level);
    if (ZSTD_isError(n) == 0) {
      stored = {std::span<const std::byte>(out.data(), n), Compression::zstd};
    }
  }
  if (stored.compression != Compression::none &&
      (stored.bytes.size() >= raw.size() ||
       raw.size() > stored.bytes.size() * kMaxCompressionRatio)) {
    stored = {raw, Compression::none};
  }
  return stored;
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

const char* block_kind_name(BlockKind k) noexcept {
  switch (k) {
    case BlockKind::full:
      return "full";
    case BlockKind::delta:
      return "delta";
    case BlockKind::unchanged:
      return "unchanged";
  }
  return "unknown";
}

// ---------------------------------------------------------------------------------------
// BackendSnapshot

BackendSnapshot::BackendSnapshot(CheckpointHeader header,
                                 std::vector<std::vector<Section>> key_groups,
                                 std::vector<BlockKind> kinds)
    : header_(std::move(header)), key_groups_(std::move(key_groups)), kinds_(std::move(kinds)) {
  COWSTATE_ASSERT(key_groups_.size() == static_cast<std::size_t>(header_.range.size()), "C1",
                  "one section list per key group of the range");
  COWSTATE_ASSERT(kinds_.empty() || kinds_.size() == key_groups_.size(), "C1",
                  "one block kind per key group of the range");
  for (const BlockKind k : kinds_) {
    COWSTATE_ASSERT(k == BlockKind::full || (k == BlockKind::delta && header_.parent_checkpoint_id),
                    "C10", "a block kind other than full, or a delta without a parent");
  }
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

const std::vector<BackendSnapshot::Section>& BackendSnapshot::key_group(
    std::int32_t key_group) const {
  COWSTATE_ASSERT(header_.range.contains(key_group), "B1",
                  "key group outside the snapshot's range");
  return key_groups_[static_cast<std::size_t>(key_group - header_.range.start())];
}

BlockKind BackendSnapshot::kind(std::int32_t key_group) const {
  COWSTATE_ASSERT(header_.range.contains(key_group), "B1",
                  "key group outside the snapshot's range");
  return kinds_.empty() ? BlockKind::full
                        : kinds_[static_cast<std::size_t>(key_group - header_.range.start())];
}

std::size_t BackendSnapshot::delta_key_groups() const noexcept {
  return static_cast<std::size_t>(std::count(kinds_.begin(), kinds_.end(), BlockKind::delta));
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
  block_.put_u64(s.snapshot->records());  // patched by end_section to what was emitted
}

void CheckpointWriter::end_section(const KeyGroupStateSnapshot& s) {
  COWSTATE_ASSERT(s.done() && s.emitted() <= s.records(), "C1", "a section ended early");
  if (s.emitted() == 0) {
    block_.truncate(section_at_);  // TTL cleanup left every entry out, or no change: none
  } else {
    if (s.emitted() != s.records()) block_.patch_u64(section_at_ + 4, s.emitted());
    ++sections_kept_;
  }
}

bool CheckpointWriter::finish_block() {
  COWSTATE_ASSERT(block_open_, "C1", "finishing a block that was not begun");
  COWSTATE_ASSERT(sections_kept_ <= snapshot_->key_group(next_key_group_).size(), "C1",
                  "more sections kept than the key group has");
  block_.patch_u32(4, sections_kept_);
  BlockKind kind = snapshot_->kind(next_key_group_);
  if (kind == BlockKind::delta && sections_kept_ == 0) {
    kind = BlockKind::unchanged;  // no state changed: nothing is stored
    block_.clear();
  }
  const std::span<const std::byte> raw = block_.written();
  const StoredBlock stored = compress_block(raw, options_, codec_->zstd, compressed_);
  const CheckpointBlockInfo entry{
      next_key_group_,          offset_, stored.bytes.size(), raw.size(), stored.compression,
      checksum64(stored.bytes), kind};
  if (!stored.bytes.empty() && !emit(stored.bytes)) return false;
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
  const bool v3 = format_of(snapshot_->header()) >= 3;
  w.put_u32(static_cast<std::uint32_t>(index_.size()));
  for (const CheckpointBlockInfo& e : index_) {
    w.put_u32(static_cast<std::uint32_t>(e.key_group));
    w.put_u64(e.offset);
    w.put_u64(e.stored);
    w.put_u64(e.raw);
    w.put_u8(static_cast<std::uint8_t>(e.compression));
    w.put_u64(e.checksum);
    if (v3) w.put_u8(static_cast<std::uint8_t>(e.kind));
  }
  const std::uint64_t index_size = w.size();
  COWSTATE_ASSERT(index_size == 4 + index_.size() * (v3 ? kCheckpointIndexEntrySizeV3
                                                        : kCheckpointIndexEntrySize),
                  "C3", "index layout");
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

}  // namespace cowstate
