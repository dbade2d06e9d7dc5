// Checkpoint storage: manifests, publishing by fsync + atomic rename with the manifest
// last, finding the latest complete checkpoint and pruning older ones. See
// cowstate/checkpoint_storage.h.
#include "cowstate/checkpoint_storage.h"

#include <algorithm>
#include <array>
#include <cinttypes>
#include <cstdio>
#include <functional>
#include <map>
#include <system_error>
#include <utility>

#include "cowstate/assert.h"
#include "cowstate/bytes.h"
#include "cowstate/hooks.h"

namespace cowstate {

namespace {

constexpr std::array<std::byte, 4> kManifestMagic = {std::byte{'C'}, std::byte{'S'}, std::byte{'M'},
                                                     std::byte{'F'}};
// 1: a full checkpoint's; 2: an incremental one's, with its chain.
constexpr std::uint16_t kManifestVersion = 1;
constexpr std::uint16_t kManifestChainVersion = 2;
constexpr std::size_t kManifestSize = CheckpointStorage::kManifestSize;
constexpr std::size_t kChainAt = 32;  // version 2: the chain's count, then its ids
constexpr const char* kDataSuffix = ".cscp";
constexpr const char* kManifestSuffix = ".manifest";
constexpr const char* kTmpSuffix = ".tmp";

std::string checkpoint_name(std::uint64_t id, const char* suffix) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "chk-%020" PRIu64 "%s", id, suffix);
  return buf;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The id of "chk-<20 digits><suffix>", or nullopt for any other name.
std::optional<std::uint64_t> parse_name(const std::string& name, const char* suffix) {
  const std::string s = suffix;
  if (name.size() != 4 + 20 + s.size() || name.compare(0, 4, "chk-") != 0 || !ends_with(name, s)) {
    return std::nullopt;
  }
  std::uint64_t id = 0;
  for (std::size_t i = 4; i < 24; ++i) {
    const char c = name[i];
    if (c < '0' || c > '9') return std::nullopt;
    const auto digit = static_cast<std::uint64_t>(c - '0');
    if (id > (UINT64_MAX - digit) / 10) return std::nullopt;
    id = id * 10 + digit;
  }
  return id;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// PendingCheckpoint

PendingCheckpoint::PendingCheckpoint(CheckpointStorage* storage, std::uint64_t id,
                                     std::unique_ptr<WritableFile> file)
    : storage_(storage), id_(id), file_(std::move(file)) {
  COWSTATE_ASSERT(storage_ != nullptr && file_ != nullptr, "C6",
                  "a pending checkpoint needs a file");
}

PendingCheckpoint::~PendingCheckpoint() {
  if (!finished_) abort();
}

const char* cancel_result_name(CancelResult r) noexcept {
  switch (r) {
    case CancelResult::accepted:
      return "accepted";
    case CancelResult::repeated:
      return "repeated";
    case CancelResult::too_late:
      return "too late";
    case CancelResult::finished:
      return "finished";
  }
  return "?";
}

// The compare-exchange is the whole protocol: cancel() and commit() each try to move the
// phase out of `open`, and exactly one succeeds. acq_rel is not needed for the decision (the
// phase carries no data), but it makes everything the cancelling thread did before its
// cancel visible to the owner that observes it, which a caller may rely on.
CancelResult PendingCheckpoint::cancel() noexcept {
  Phase seen = Phase::open;
  if (phase_.compare_exchange_strong(seen, Phase::cancelled, std::memory_order_acq_rel)) {
    return CancelResult::accepted;
  }
  switch (seen) {
    case Phase::cancelled:
      return CancelResult::repeated;
    case Phase::committing:
    case Phase::committed:
      return CancelResult::too_late;
    case Phase::open:
    case Phase::aborted:
      break;
  }
  return CancelResult::finished;
}

bool PendingCheckpoint::cancel_requested() const noexcept {
  return phase_.load(std::memory_order_acquire) == Phase::cancelled;
}

Status PendingCheckpoint::refuse_cancelled() {
  return Status::error("checkpoint " + std::to_string(id_) + " was cancelled: it is not published");
}

Status PendingCheckpoint::append(std::span<const std::byte> bytes) {
  COWSTATE_ASSERT(!finished_, "C6", "append to a committed or aborted checkpoint");
  if (cancel_requested()) {
    failed_ = true;
    return refuse_cancelled();
  }
  if (failed_) return Status::error("checkpoint " + std::to_string(id_) + " already failed");
  if (Status st = file_->append(bytes); !st.ok()) {
    failed_ = true;
    return st;
  }
  checksum_.update(bytes);
  size_ += bytes.size();
  return Status();
}

void PendingCheckpoint::abort() noexcept {
  if (holds_chain_) {
    storage_->release_chain(id_);
    holds_chain_ = false;
  }
  if (finished_ && file_ == nullptr) return;
  finished_ = true;
  Phase open = Phase::open;  // a cancelled checkpoint stays cancelled (cancel() says so)
  phase_.compare_exchange_strong(open, Phase::aborted, std::memory_order_acq_rel);
  if (file_ != nullptr) {
    (void)file_->close();
    file_.reset();
  }
  (void)storage_->fs_->remove_file(CheckpointStorage::temporary_path(storage_->data_path(id_)));
}

Status PendingCheckpoint::commit() {
  COWSTATE_ASSERT(!finished_, "C6", "a checkpoint committed or aborted twice");
  Phase seen = Phase::open;
  const bool won =
      phase_.compare_exchange_strong(seen, Phase::committing, std::memory_order_acq_rel);
  // Planted bug: the commit does not look at the phase and publishes a cancelled checkpoint.
  if (!won && !COWSTATE_MUTANT(commit_ignores_cancel)) {
    COWSTATE_ASSERT(seen == Phase::cancelled, "C7",
                    "only a cancel moves an unfinished checkpoint out of open");
    abort();
    return refuse_cancelled();
  }
  if (failed_) {
    abort();
    return Status::error("checkpoint " + std::to_string(id_) +
                         " not committed: an earlier write failed");
  }
  Status st = storage_->publish(*this);
  finished_ = true;
  if (holds_chain_) {  // complete, its manifest names the chain; or it never will
    storage_->release_chain(id_);
    holds_chain_ = false;
  }
  if (won) phase_.store(st.ok() ? Phase::committed : Phase::aborted, std::memory_order_release);
  return st;
}

// ---------------------------------------------------------------------------------------
// CheckpointStorage

std::string CheckpointStorage::data_path(std::uint64_t id) const {
  return dir_ + "/" + checkpoint_name(id, kDataSuffix);
}

std::string CheckpointStorage::manifest_path(std::uint64_t id) const {
  return dir_ + "/" + checkpoint_name(id, kManifestSuffix);
}

std::string CheckpointStorage::temporary_path(const std::string& path) { return path + kTmpSuffix; }

Result<std::unique_ptr<CheckpointStorage>> CheckpointStorage::open(std::string dir, FileSystem& fs,
                                                                   StorageOptions options) {
  COWSTATE_ASSERT(options.retain >= 1, "REQUIRES", "checkpoint storage must retain at least one");
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  std::unique_ptr<CheckpointStorage> s(new CheckpointStorage(std::move(dir), fs, options));
  if (Status st = fs.create_dir(s->dir_); !st.ok()) return st;
  // The directory's entry is durable only once its parent is synced: without it a power loss
  // can take the directory, and every checkpoint committed in it, away.
  const std::size_t slash = s->dir_.rfind('/');
  const std::string parent = slash == std::string::npos ? "."
                             : slash == 0               ? "/"
                                                        : s->dir_.substr(0, slash);
  if (Status st = fs.sync_dir(parent); !st.ok()) return st;
  if (Status st = s->clean(); !st.ok()) return st;
  return Result<std::unique_ptr<CheckpointStorage>>(std::move(s));
}

Result<std::unique_ptr<CheckpointStorage>> CheckpointStorage::open_read_only(std::string dir,
                                                                             FileSystem& fs) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (Result<std::vector<std::string>> names = fs.list_dir(dir); !names.ok()) {
    return names.status();
  }
  std::unique_ptr<CheckpointStorage> s(new CheckpointStorage(std::move(dir), fs, StorageOptions{}));
  s->read_only_ = true;
  return Result<std::unique_ptr<CheckpointStorage>>(std::move(s));
}

Status CheckpointStorage::clean() {
  Result<std::vector<std::string>> names = fs_->list_dir(dir_);
  if (!names.ok()) return names.status();
  bool removed = false;
  for (const std::string& name : *names) {
    const bool tmp = ends_with(name, kTmpSuffix) && name.compare(0, 4, "chk-") == 0;
    bool orphan = false;
    if (auto id = parse_name(name, kDataSuffix)) {
      orphan =
          !std::binary_search(names->begin(), names->end(), checkpoint_name(*id, kManifestSuffix));
    }
    if (tmp || orphan) {
      if (Status st = fs_->remove_file(dir_ + "/" + name); !st.ok()) return st;
      removed = true;
    }
  }
  if (removed) return fs_->sync_dir(dir_);
  return Status();
}

Result<CheckpointScan> CheckpointStorage::scan() {
  Result<std::vector<std::string>> names = fs_->list_dir(dir_);
  if (!names.ok()) return names.status();
  CheckpointScan out;
  std::map<std::uint64_t, std::vector<std::uint64_t>> chains;  // of each complete checkpoint
  for (const std::string& name : *names) {
    auto id = parse_name(name, kManifestSuffix);
    if (!id) continue;
    Result<Manifest> m = read_manifest(*id);
    if (!m.ok()) {
      out.damaged.push_back({*id, m.status().message()});
    } else if (!std::binary_search(names->begin(), names->end(),
                                   checkpoint_name(*id, kDataSuffix))) {
      out.damaged.push_back({*id, data_path(*id) + ": missing, though its manifest " +
                                      manifest_path(*id) + " is in place"});
    } else {
      out.complete.push_back(*id);
      chains.emplace(*id, std::move(m->chain));
    }
  }
  std::sort(out.complete.begin(), out.complete.end());
  // C11: a checkpoint is complete only while its whole chain is. Ascending, so a member's
  // own verdict is final before any checkpoint that names it is judged.
  std::vector<std::uint64_t> complete;
  for (const std::uint64_t id : out.complete) {
    const std::vector<std::uint64_t>& chain = chains[id];
    const auto broken = std::find_if(chain.begin(), chain.end(), [&](std::uint64_t member) {
      return !std::binary_search(complete.begin(), complete.end(), member);
    });
    if (broken == chain.end()) {
      complete.push_back(id);
      continue;
    }
    auto d = std::find_if(out.damaged.begin(), out.damaged.end(),
                          [&](const DamagedCheckpoint& x) { return x.id == *broken; });
    out.damaged.push_back(
        {id, manifest_path(id) + ": its chain member checkpoint " + std::to_string(*broken) +
                 (d != out.damaged.end()
                      ? " is damaged (" + d->reason + ")"
                      : " is missing (no manifest " + manifest_path(*broken) + ")")});
  }
  out.complete = std::move(complete);
  std::sort(out.complete.begin(), out.complete.end());
  std::sort(out.damaged.begin(), out.damaged.end(),
            [](const DamagedCheckpoint& a, const DamagedCheckpoint& b) { return a.id < b.id; });
  return Result<CheckpointScan>(std::move(out));
}

Result<std::vector<std::uint64_t>> CheckpointStorage::complete_checkpoints() {
  Result<CheckpointScan> found = scan();
  if (!found.ok()) return found.status();
  return Result<std::vector<std::uint64_t>>(std::move(found->complete));
}

Result<std::optional<std::uint64_t>> CheckpointStorage::latest() {
  Result<CheckpointScan> found = scan();
  if (!found.ok()) return found.status();
  std::optional<std::uint64_t> newest =
      found->complete.empty() ? std::nullopt : std::optional(found->complete.back());
  if (COWSTATE_MUTANT(latest_skips_newer_complete) && found->complete.size() >= 2) {
    newest = found->complete[found->complete.size() - 2];
  }
  if (!found->damaged.empty() && found->damaged.back().id > newest.value_or(0) &&
      !options_.fall_back_past_damaged) {
    const DamagedCheckpoint& d = found->damaged.back();
    return Status::error(dir_ + ": checkpoint " + std::to_string(d.id) + " is damaged (" +
                         d.reason + "); the newest complete checkpoint is " +
                         (newest ? std::to_string(*newest) : std::string("none")) +
                         ": falling back to it is an explicit option (fall_back_past_damaged)");
  }
  return Result<std::optional<std::uint64_t>>(newest);
}

Result<CheckpointManifest> CheckpointStorage::read_manifest(std::uint64_t id) {
  const std::string path = manifest_path(id);
  Result<std::vector<std::byte>> bytes = fs_->read_file(path);
  if (!bytes.ok()) return bytes.status();
  const std::vector<std::byte>& b = *bytes;
  auto bad = [&path](std::size_t at, const std::string& what) {
    return Status::error(path + ": offset " + std::to_string(at) + ": " + what);
  };
  if (b.size() < kManifestSize) {
    return bad(0, "expected a manifest of at least " + std::to_string(kManifestSize) +
                      " bytes, found " + std::to_string(b.size()));
  }
  if (!std::equal(kManifestMagic.begin(), kManifestMagic.end(), b.begin())) {
    return bad(0, "expected magic \"CSMF\" (a cowstate checkpoint manifest)");
  }
  // The checksum is the last 8 bytes of either version; version 1 is 40 bytes long.
  const std::uint16_t version = detail::load_le<std::uint16_t>(b.data() + 4);
  const std::size_t sum_at = version == kManifestChainVersion ? b.size() - 8 : kManifestSize - 8;
  const std::uint64_t sum = detail::load_le<std::uint64_t>(b.data() + sum_at);
  const std::uint64_t computed = checksum64(std::span<const std::byte>(b).first(sum_at));
  if (sum != computed) {
    return bad(sum_at, "expected manifest checksum " + detail::hex64(sum) +
                           " (XXH3-64 of bytes 0-" + std::to_string(sum_at - 1) + "), found " +
                           detail::hex64(computed) + ": the manifest is corrupt");
  }
  if (version != kManifestVersion && version != kManifestChainVersion) {
    return bad(4, "expected manifest version " + std::to_string(kManifestVersion) + " or " +
                      std::to_string(kManifestChainVersion) + ", found " + std::to_string(version) +
                      ": written by an incompatible cowstate version");
  }
  if (const std::uint16_t flags = detail::load_le<std::uint16_t>(b.data() + 6); flags != 0) {
    return bad(6, "expected manifest flags 0, found " + std::to_string(flags));
  }
  Manifest m{detail::load_le<std::uint64_t>(b.data() + 8),
             detail::load_le<std::uint64_t>(b.data() + 16),
             detail::load_le<std::uint64_t>(b.data() + 24),
             {}};
  if (m.id != id) {
    return bad(8,
               "expected checkpoint id " + std::to_string(id) + ", found " + std::to_string(m.id));
  }
  if (version == kManifestVersion) {
    if (b.size() != kManifestSize) {
      return bad(0, "expected a manifest of " + std::to_string(kManifestSize) +
                        " bytes (version 1), found " + std::to_string(b.size()));
    }
    return Result<Manifest>(std::move(m));
  }
  const std::uint64_t count =
      b.size() >= kChainAt + 4 + 8 ? detail::load_le<std::uint32_t>(b.data() + kChainAt) : 0;
  if (count == 0 || b.size() != kChainAt + 4 + 8 * count + 8) {
    return bad(kChainAt, "expected a chain of at least 1 checkpoint filling the manifest's " +
                             std::to_string(b.size()) + " bytes (44 + 8 per member), found a " +
                             "count of " + std::to_string(count));
  }
  std::uint64_t below = id;
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::size_t at = kChainAt + 4 + 8 * static_cast<std::size_t>(i);
    const std::uint64_t member = detail::load_le<std::uint64_t>(b.data() + at);
    if (member == 0 || member >= below) {
      return bad(at, "expected chain member " + std::to_string(i) + " in [1, " +
                         std::to_string(below) + ") (each older than the one before), found " +
                         std::to_string(member));
    }
    m.chain.push_back(member);
    below = member;
  }
  return Result<Manifest>(std::move(m));
}

Result<std::vector<std::byte>> CheckpointStorage::read(std::uint64_t id) {
  Result<Manifest> m = read_manifest(id);
  if (!m.ok()) return m.status();
  const std::string path = data_path(id);
  Result<std::vector<std::byte>> data = fs_->read_file(path);
  if (!data.ok()) return data.status();
  if (data->size() != m->size) {
    return Status::error(path + ": expected " + std::to_string(m->size) +
                         " bytes (from the manifest), found " + std::to_string(data->size()) +
                         ": the file is truncated or was replaced");
  }
  if (const std::uint64_t computed = checksum64(*data);
      computed != m->checksum && !COWSTATE_MUTANT(read_ignores_file_checksum)) {
    return Status::error(path + ": expected XXH3-64 " + detail::hex64(m->checksum) + " of its " +
                         std::to_string(m->size) + " bytes (from the manifest " +
                         manifest_path(id) + "), found " + detail::hex64(computed) +
                         ": the file is corrupt");
  }
  return data;
}

Result<std::vector<std::vector<std::byte>>> CheckpointStorage::read_chain(std::uint64_t id) {
  Result<Manifest> m = read_manifest(id);
  if (!m.ok()) return m.status();
  std::vector<std::vector<std::byte>> out;
  for (const std::uint64_t member : m->chain) {
    Result<std::vector<std::byte>> data = read(member);
    if (!data.ok()) {
      return Status::error("checkpoint " + std::to_string(id) + "'s chain member " +
                           std::to_string(member) + ": " + data.status().message());
    }
    out.push_back(std::move(*data));
  }
  return Result<std::vector<std::vector<std::byte>>>(std::move(out));
}

Result<std::unique_ptr<PendingCheckpoint>> CheckpointStorage::begin(std::uint64_t id,
                                                                    std::uint64_t parent) {
  COWSTATE_ASSERT(id > 0, "REQUIRES", "checkpoint ids start at 1");
  if (read_only_) return Status::error(dir_ + ": opened read-only: no checkpoint can begin");
  Result<CheckpointScan> found = scan();
  if (!found.ok()) return found.status();
  if (!found->complete.empty() && id <= found->complete.back()) {
    return Status::error(dir_ + ": checkpoint " + std::to_string(id) +
                         " is not above the latest complete checkpoint " +
                         std::to_string(found->complete.back()) + ": checkpoint ids must grow");
  }
  if (!found->damaged.empty() && id <= found->damaged.back().id) {
    return Status::error(dir_ + ": checkpoint " + std::to_string(id) +
                         " is not above the damaged checkpoint " +
                         std::to_string(found->damaged.back().id) +
                         ", whose files it would replace: checkpoint ids must grow");
  }
  std::vector<std::uint64_t> chain;
  if (parent != 0) {
    if (!std::binary_search(found->complete.begin(), found->complete.end(), parent)) {
      return Status::error(dir_ + ": checkpoint " + std::to_string(id) + " names checkpoint " +
                           std::to_string(parent) +
                           " as its parent, which is not complete here: an incremental "
                           "checkpoint needs its whole chain");
    }
    Result<Manifest> pm = read_manifest(parent);
    if (!pm.ok()) return pm.status();
    chain.push_back(parent);
    chain.insert(chain.end(), pm->chain.begin(), pm->chain.end());
  }
  const std::string tmp = temporary_path(data_path(id));
  Result<std::unique_ptr<WritableFile>> file = fs_->create_file(tmp);
  if (!file.ok()) return file.status();
  if (options_.io_thread) {
    AsyncFileOptions io = options_.io_buffers;
    io.pool = &io_pool_;
    io.label = tmp;
    try {
      *file = make_async_writable_file(std::move(*file), io);
    } catch (const std::system_error& e) {  // no thread to be had; the file is closed
      (void)fs_->remove_file(tmp);
      return Status::error(tmp + ": cannot start the I/O thread: " + e.what());
    }
  }
  std::unique_ptr<PendingCheckpoint> p(new PendingCheckpoint(this, id, std::move(*file)));
  if (!chain.empty()) {
    hold_chain(id, chain);
    p->holds_chain_ = true;
  }
  p->chain_ = std::move(chain);
  return Result<std::unique_ptr<PendingCheckpoint>>(std::move(p));
}

Status CheckpointStorage::publish(PendingCheckpoint& p) {
  const std::string data = data_path(p.id_);
  const std::string data_tmp = temporary_path(data);
  const std::string manifest = manifest_path(p.id_);
  const std::string manifest_tmp = temporary_path(manifest);
  // Best-effort removal of everything this checkpoint created, after a failure (C6).
  auto undo = [&](Status st, bool data_published, bool manifest_published) {
    if (p.file_ != nullptr) (void)p.file_->close();
    p.file_.reset();
    if (manifest_published) {
      // Durably gone before the data file goes, as in prune(): a power loss must not keep
      // the manifest and lose its data file, a damaged checkpoint where none was published.
      (void)fs_->remove_file(manifest);
      (void)fs_->sync_dir(dir_);
    }
    (void)fs_->remove_file(manifest_tmp);
    (void)fs_->remove_file(data_published ? data : data_tmp);
    return Status::error("checkpoint " + std::to_string(p.id_) + " not committed: " + st.message());
  };
  // 1. the data file: durable before it gets its final name.
  if (Status st = COWSTATE_MUTANT(rename_before_data_sync) ? Status() : p.file_->sync(); !st.ok())
    return undo(std::move(st), false, false);
  Status closed = p.file_->close();
  p.file_.reset();
  if (!closed.ok()) return undo(std::move(closed), false, false);
  // 2. its final name, durable.
  if (Status st = fs_->rename_file(data_tmp, data); !st.ok())
    return undo(std::move(st), false, false);
  if (Status st = COWSTATE_MUTANT(manifest_before_data_durable) ? Status() : fs_->sync_dir(dir_);
      !st.ok())
    return undo(std::move(st), true, false);
  // 3. the manifest, last (C5).
  ByteWriter w;
  w.put_bytes(kManifestMagic);
  w.put_u16(p.chain_.empty() ? kManifestVersion : kManifestChainVersion);
  w.put_u16(0);
  w.put_u64(p.id_);
  w.put_u64(p.size_);
  w.put_u64(p.checksum_.digest());
  if (!p.chain_.empty()) {
    w.put_u32(static_cast<std::uint32_t>(p.chain_.size()));
    for (const std::uint64_t member : p.chain_) w.put_u64(member);
  }
  w.put_u64(checksum64(w.written()));
  w.trim();
  COWSTATE_ASSERT(
      w.size() == (p.chain_.empty() ? kManifestSize : kChainAt + 4 + 8 * p.chain_.size() + 8), "C5",
      "manifest layout");
  Result<std::unique_ptr<WritableFile>> mf = fs_->create_file(manifest_tmp);
  if (!mf.ok()) return undo(mf.status(), true, false);
  Status st = (*mf)->append(w.written());
  if (st.ok()) st = (*mf)->sync();
  Status mclosed = (*mf)->close();
  if (st.ok()) st = std::move(mclosed);
  if (!st.ok()) return undo(std::move(st), true, false);
  if (Status r = fs_->rename_file(manifest_tmp, manifest); !r.ok()) {
    return undo(std::move(r), true, false);
  }
  if (Status r = COWSTATE_MUTANT(no_dir_sync_after_rename) ? Status() : fs_->sync_dir(dir_);
      !r.ok())
    return undo(std::move(r), true, true);
  // 4. complete; an error while pruning only leaves older checkpoints for the next commit.
  // Its manifest names its chain now: the hold begin() took is no longer needed.
  if (p.holds_chain_) {
    release_chain(p.id_);
    p.holds_chain_ = false;
  }
  (void)prune();
  return Status();
}

void CheckpointStorage::hold_chain(std::uint64_t id, const std::vector<std::uint64_t>& chain) {
  const std::lock_guard<std::mutex> lock(held_mu_);
  held_chains_[id] = chain;
}

void CheckpointStorage::release_chain(std::uint64_t id) noexcept {
  const std::lock_guard<std::mutex> lock(held_mu_);
  held_chains_.erase(id);
}

std::vector<std::uint64_t> CheckpointStorage::held_chain_members() {
  const std::lock_guard<std::mutex> lock(held_mu_);
  std::vector<std::uint64_t> out;
  for (const auto& [id, chain] : held_chains_) out.insert(out.end(), chain.begin(), chain.end());
  return out;
}

// Drops the complete checkpoints beyond the newest `retain`, and the damaged ones older than
// the oldest retained one (C9: they would otherwise stay forever), except the members of a
// retained checkpoint's chain or of one still being written (C11).
Status CheckpointStorage::prune() {
  Result<CheckpointScan> found = scan();
  if (!found.ok()) return found.status();
  const std::vector<std::uint64_t>& complete = found->complete;
  if (complete.empty()) return Status();
  const std::size_t drop =
      complete.size() > options_.retain ? complete.size() - options_.retain : 0;
  const std::uint64_t oldest_kept = complete[drop];
  std::vector<std::uint64_t> referenced;  // by a retained checkpoint's chain
  for (std::size_t i = drop; i < complete.size(); ++i) {
    Result<Manifest> m = read_manifest(complete[i]);
    if (!m.ok()) return m.status();
    referenced.insert(referenced.end(), m->chain.begin(), m->chain.end());
  }
  // Planted bug: the chains are not counted, so a retained delta loses its ancestors.
  if (COWSTATE_MUTANT(prune_drops_chain_member)) referenced.clear();
  // Planted bug: a checkpoint being written is not counted, so its parent can go.
  if (!COWSTATE_MUTANT(prune_ignores_pending_chain)) {
    const std::vector<std::uint64_t> held = held_chain_members();
    referenced.insert(referenced.end(), held.begin(), held.end());
  }
  std::sort(referenced.begin(), referenced.end());
  auto needed = [&referenced](std::uint64_t id) {
    return std::binary_search(referenced.begin(), referenced.end(), id);
  };
  std::vector<std::uint64_t> gone;
  for (std::size_t i = 0; i < drop; ++i) {
    if (!needed(complete[i])) gone.push_back(complete[i]);
  }
  if (COWSTATE_MUTANT(prune_removes_needed_file) && drop > 0) {
    (void)fs_->remove_file(data_path(oldest_kept));
  }
  for (const DamagedCheckpoint& d : found->damaged) {
    if (d.id < oldest_kept && !needed(d.id)) gone.push_back(d.id);
  }
  if (gone.empty()) return Status();
  Result<std::vector<std::string>> names = fs_->list_dir(dir_);
  if (!names.ok()) return names.status();
  auto present = [&names](const std::string& name) {
    return std::binary_search(names->begin(), names->end(), name);
  };
  // Manifests first, newest first, each durably gone before the next: a chain names only
  // older checkpoints, so whatever stops this (an error, a power loss) leaves no manifest
  // whose chain lost a member (C11). Once they are gone no checkpoint of `gone` is complete
  // or damaged, and the data files left are orphans whatever a power loss keeps of what
  // follows.
  std::sort(gone.begin(), gone.end(), std::greater<>());
  for (const std::uint64_t id : gone) {
    if (Status st = fs_->remove_file(manifest_path(id)); !st.ok()) return st;
    if (Status st = fs_->sync_dir(dir_); !st.ok()) return st;
  }
  for (const std::uint64_t id : gone) {
    if (!present(checkpoint_name(id, kDataSuffix))) continue;  // a damaged one's, missing
    if (Status st = fs_->remove_file(data_path(id)); !st.ok()) return st;
  }
  return fs_->sync_dir(dir_);
}

}  // namespace cowstate
