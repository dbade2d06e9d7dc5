// Checkpoint storage on a real file system: the POSIX file system, fault injection, and
// publishing by fsync + atomic rename with the manifest last. See
// cowstate/checkpoint_storage.h.
#include "cowstate/checkpoint_storage.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

#include "cowstate/assert.h"
#include "cowstate/bytes.h"

namespace cowstate {

namespace {

Status errno_error(const char* op, const std::string& path, int err) {
  return Status::error(std::string(op) + " " + path + ": " + std::strerror(err));
}

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }
  Status append(std::span<const std::byte> bytes) override {
    COWSTATE_ASSERT(fd_ >= 0, "C6", "append to a closed file");
    const std::byte* p = bytes.data();
    std::size_t left = bytes.size();
    while (left > 0) {
      const ssize_t n = ::write(fd_, p, left);
      if (n < 0) {
        if (errno == EINTR) continue;
        return errno_error("write", path_, errno);
      }
      p += n;
      left -= static_cast<std::size_t>(n);
    }
    return Status();
  }
  Status sync() override {
    COWSTATE_ASSERT(fd_ >= 0, "C6", "sync of a closed file");
    if (::fsync(fd_) != 0) return errno_error("fsync", path_, errno);
    return Status();
  }
  Status close() override {
    COWSTATE_ASSERT(fd_ >= 0, "C6", "closing a closed file");
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) return errno_error("close", path_, errno);
    return Status();
  }

 private:
  std::string path_;
  int fd_;
};

class PosixFileSystem final : public FileSystem {
 public:
  Result<std::unique_ptr<WritableFile>> create_file(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return errno_error("create", path, errno);
    return Result<std::unique_ptr<WritableFile>>(std::make_unique<PosixWritableFile>(path, fd));
  }
  Result<std::vector<std::byte>> read_file(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno_error("open", path, errno);
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      return errno_error("stat", path, err);
    }
    std::vector<std::byte> bytes(static_cast<std::size_t>(st.st_size));
    std::size_t got = 0;
    while (got < bytes.size()) {
      const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int err = n < 0 ? errno : EIO;
        ::close(fd);
        return n < 0 ? errno_error("read", path, err)
                     : Status::error("read " + path + ": the file shrank while being read");
      }
      got += static_cast<std::size_t>(n);
    }
    ::close(fd);
    return Result<std::vector<std::byte>>(std::move(bytes));
  }
  Status rename_file(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) return errno_error("rename", from + " to", errno);
    return Status();
  }
  Status remove_file(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return errno_error("remove", path, errno);
    return Status();
  }
  Status sync_dir(const std::string& dir) override {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return errno_error("open directory", dir, errno);
    const int rc = ::fsync(fd);
    const int err = errno;
    ::close(fd);
    if (rc != 0) return errno_error("fsync directory", dir, err);
    return Status();
  }
  Status create_dir(const std::string& dir) override {
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
      return errno_error("create directory", dir, errno);
    }
    return Status();
  }
  Result<std::vector<std::string>> list_dir(const std::string& dir) override {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return errno_error("list directory", dir, errno);
    std::vector<std::string> names;
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    return Result<std::vector<std::string>>(std::move(names));
  }
};

// A file of a FaultInjectionFileSystem: counts its appends, syncs and close.
class FaultInjectionFile final : public WritableFile {
 public:
  FaultInjectionFile(FaultInjectionFileSystem* fs, std::string path,
                     std::unique_ptr<WritableFile> base)
      : fs_(fs), path_(std::move(path)), base_(std::move(base)) {}
  Status append(std::span<const std::byte> bytes) override {
    if (Status st = fs_->tick("write", path_); !st.ok()) return st;
    return base_->append(bytes);
  }
  Status sync() override {
    if (Status st = fs_->tick("fsync", path_); !st.ok()) return st;
    return base_->sync();
  }
  Status close() override {
    // The descriptor is closed either way, as close(2) does even when it reports an error.
    Status injected = fs_->tick("close", path_);
    Status st = base_->close();
    return injected.ok() ? std::move(st) : std::move(injected);
  }

 private:
  FaultInjectionFileSystem* fs_;
  std::string path_;
  std::unique_ptr<WritableFile> base_;
};

// make_async_writable_file's file. The caller fills `fill_`; a full one is queued, and the
// I/O thread appends queued buffers to `base_` in order and returns them to `spare_`. All
// members below the mutex are shared and guarded by it.
class AsyncWritableFile final : public WritableFile {
 public:
  AsyncWritableFile(std::unique_ptr<WritableFile> base, AsyncFileOptions options)
      : base_(std::move(base)),
        buffer_bytes_(options.buffer_bytes),
        buffers_(options.buffers),
        pool_(options.pool) {
    COWSTATE_ASSERT(base_ != nullptr && buffer_bytes_ >= 4096 && buffers_ >= 2, "REQUIRES",
                    "an async file needs a file, buffers of at least 4096 bytes and two buffers");
    fill_ = new_buffer();
    allocated_ = 1;
    thread_ = std::thread([this] { run(); });
  }
  ~AsyncWritableFile() override {
    if (thread_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
        // Dropped: nobody will read this file's status any more.
        for (auto& b : queue_) spare_.push_back(std::move(b));
        queue_.clear();
      }
      work_.notify_one();
      thread_.join();
    }
    give_back();
  }
  AsyncWritableFile(const AsyncWritableFile&) = delete;
  AsyncWritableFile& operator=(const AsyncWritableFile&) = delete;

  Status append(std::span<const std::byte> bytes) override {
    COWSTATE_ASSERT(thread_.joinable(), "C6", "append to a closed file");
    if (failed_.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lock(mu_);
      return error_;
    }
    while (!bytes.empty()) {
      const std::size_t n = std::min(bytes.size(), buffer_bytes_ - fill_.size());
      fill_.insert(fill_.end(), bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
      bytes = bytes.subspan(n);
      if (fill_.size() == buffer_bytes_) {
        if (Status st = hand_over(); !st.ok()) return st;
      }
    }
    return Status();
  }

  Status sync() override {
    COWSTATE_ASSERT(thread_.joinable(), "C6", "sync of a closed file");
    if (Status st = drain(); !st.ok()) return st;
    // The I/O thread is idle (drain saw it so under the mutex): `base_` is ours here.
    Status st = base_->sync();
    remember(st);
    return st;
  }

  Status close() override {
    COWSTATE_ASSERT(thread_.joinable(), "C6", "closing a closed file");
    Status st = drain();
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_.notify_one();
    thread_.join();
    give_back();
    Status closed = base_->close();  // closed either way, as close(2)
    return st.ok() ? closed : st;
  }

 private:
  // Queues `fill_` and gives the caller an empty buffer: a spare one, a new one while fewer
  // than `buffers_` exist, or else the next one the I/O thread gives back. Returns the
  // file's error, if any, instead.
  Status hand_over() {
    std::unique_lock<std::mutex> lock(mu_);
    if (!error_.ok()) return error_;
    queue_.push_back(std::move(fill_));
    ++pending_;
    work_.notify_one();
    fill_ = std::vector<std::byte>();
    if (spare_.empty() && allocated_ < buffers_) {
      ++allocated_;
      lock.unlock();
      fill_ = new_buffer();
      return Status();
    }
    done_.wait(lock, [this] { return !spare_.empty() || !error_.ok(); });
    if (!error_.ok()) return error_;
    fill_ = std::move(spare_.back());
    spare_.pop_back();
    return Status();
  }

  // Queues what was filled and waits until every queued buffer is written; the file's error.
  Status drain() {
    if (!fill_.empty()) {
      if (Status st = hand_over(); !st.ok()) return st;
    }
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [this] { return pending_ == 0; });
    return error_;
  }

  // Returns the buffers to the pool. REQUIRES: the I/O thread has stopped.
  void give_back() {
    if (pool_ == nullptr) return;
    pool_->give(std::exchange(fill_, {}));
    for (auto& b : spare_) pool_->give(std::move(b));
    spare_.clear();
  }

  std::vector<std::byte> new_buffer() {
    if (pool_ != nullptr) return pool_->take(buffer_bytes_);
    std::vector<std::byte> b;
    b.reserve(buffer_bytes_);
    return b;
  }

  void remember(Status st) {
    std::lock_guard<std::mutex> lock(mu_);
    keep(std::move(st));
  }
  // Keeps `st` if it is the first error. REQUIRES: mu_ held.
  void keep(Status st) {
    if (!error_.ok() || st.ok()) return;
    error_ = std::move(st);
    failed_.store(true, std::memory_order_release);
  }

  // The I/O thread: writes queued buffers in order until stopped; after an error it only
  // gives the buffers back.
  void run() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      work_.wait(lock, [this] { return !queue_.empty() || stop_; });
      if (queue_.empty()) return;  // stopped, nothing left
      std::vector<std::byte> buffer = std::move(queue_.front());
      queue_.pop_front();
      const bool failed = !error_.ok();
      lock.unlock();
      Status st = failed ? Status() : base_->append(buffer);
      buffer.clear();
      lock.lock();
      keep(std::move(st));
      spare_.push_back(std::move(buffer));
      --pending_;
      done_.notify_one();
    }
  }

  std::unique_ptr<WritableFile> base_;
  const std::size_t buffer_bytes_;
  const std::size_t buffers_;
  AsyncBufferPool* const pool_;
  std::vector<std::byte> fill_;  // the caller's
  std::mutex mu_;
  std::condition_variable work_;  // the I/O thread waits: a queued buffer or stop
  std::condition_variable done_;  // the caller waits: a spare buffer, an error, or idle
  std::deque<std::vector<std::byte>> queue_;
  std::vector<std::vector<std::byte>> spare_;
  std::size_t pending_ = 0;          // queued or being written
  std::size_t allocated_ = 0;        // buffers made so far
  Status error_;                     // the first error of base_
  std::atomic<bool> failed_{false};  // error_ is set: lets append() see it without the lock
  bool stop_ = false;
  std::thread thread_;
};

constexpr std::array<std::byte, 4> kManifestMagic = {std::byte{'C'}, std::byte{'S'}, std::byte{'M'},
                                                     std::byte{'F'}};
constexpr std::uint16_t kManifestVersion = 1;
constexpr std::size_t kManifestSize = 40;
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

FileSystem& posix_file_system() {
  static PosixFileSystem fs;
  return fs;
}

std::vector<std::byte> AsyncBufferPool::take(std::size_t bytes) {
  std::vector<std::byte> b;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!kept_.empty()) {
      b = std::move(kept_.back());
      kept_.pop_back();
    }
  }
  b.clear();
  b.reserve(bytes);
  return b;
}

void AsyncBufferPool::give(std::vector<std::byte> buffer) {
  if (buffer.capacity() == 0) return;
  buffer.clear();
  std::lock_guard<std::mutex> lock(mu_);
  if (kept_.size() < max_kept_) kept_.push_back(std::move(buffer));
}

std::size_t AsyncBufferPool::kept() const {
  std::lock_guard<std::mutex> lock(mu_);
  return kept_.size();
}

std::unique_ptr<WritableFile> make_async_writable_file(std::unique_ptr<WritableFile> file,
                                                       AsyncFileOptions options) {
  return std::make_unique<AsyncWritableFile>(std::move(file), options);
}

// ---------------------------------------------------------------------------------------
// FaultInjectionFileSystem

Status FaultInjectionFileSystem::tick(const char* op, const std::string& path) {
  ++operations_;
  if (fail_at_ != 0 && operations_ == fail_at_) {
    injected_ = true;
    return Status::error(std::string(op) + " " + path + ": injected I/O error (operation " +
                         std::to_string(operations_) + ")");
  }
  return Status();
}

Result<std::unique_ptr<WritableFile>> FaultInjectionFileSystem::create_file(
    const std::string& path) {
  if (Status st = tick("create", path); !st.ok()) return st;
  Result<std::unique_ptr<WritableFile>> base = base_->create_file(path);
  if (!base.ok()) return base.status();
  return Result<std::unique_ptr<WritableFile>>(
      std::make_unique<FaultInjectionFile>(this, path, std::move(*base)));
}

Status FaultInjectionFileSystem::rename_file(const std::string& from, const std::string& to) {
  if (Status st = tick("rename", from); !st.ok()) return st;
  return base_->rename_file(from, to);
}

Status FaultInjectionFileSystem::remove_file(const std::string& path) {
  if (Status st = tick("remove", path); !st.ok()) return st;
  return base_->remove_file(path);
}

Status FaultInjectionFileSystem::sync_dir(const std::string& dir) {
  if (Status st = tick("fsync directory", dir); !st.ok()) return st;
  return base_->sync_dir(dir);
}

Status FaultInjectionFileSystem::create_dir(const std::string& dir) {
  if (Status st = tick("create directory", dir); !st.ok()) return st;
  return base_->create_dir(dir);
}

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
  if (finished_ && file_ == nullptr) return;
  finished_ = true;
  Phase open = Phase::open;  // a cancelled checkpoint stays cancelled (cancel() says so)
  phase_.compare_exchange_strong(open, Phase::aborted, std::memory_order_acq_rel);
  if (file_ != nullptr) {
    (void)file_->close();
    file_.reset();
  }
  (void)storage_->fs_->remove_file(storage_->data_path(id_) + kTmpSuffix);
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

Result<std::unique_ptr<CheckpointStorage>> CheckpointStorage::open(std::string dir, FileSystem& fs,
                                                                   StorageOptions options) {
  COWSTATE_ASSERT(options.retain >= 1, "REQUIRES", "checkpoint storage must retain at least one");
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  std::unique_ptr<CheckpointStorage> s(new CheckpointStorage(std::move(dir), fs, options));
  if (Status st = fs.create_dir(s->dir_); !st.ok()) return st;
  if (Status st = s->clean(); !st.ok()) return st;
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

Result<std::vector<std::uint64_t>> CheckpointStorage::complete_checkpoints() {
  Result<std::vector<std::string>> names = fs_->list_dir(dir_);
  if (!names.ok()) return names.status();
  std::vector<std::uint64_t> ids;
  for (const std::string& name : *names) {
    auto id = parse_name(name, kManifestSuffix);
    if (!id) continue;
    if (!std::binary_search(names->begin(), names->end(), checkpoint_name(*id, kDataSuffix))) {
      continue;
    }
    if (!read_manifest(*id).ok()) continue;  // a damaged manifest makes nothing complete
    ids.push_back(*id);
  }
  std::sort(ids.begin(), ids.end());
  return Result<std::vector<std::uint64_t>>(std::move(ids));
}

Result<std::optional<std::uint64_t>> CheckpointStorage::latest() {
  Result<std::vector<std::uint64_t>> ids = complete_checkpoints();
  if (!ids.ok()) return ids.status();
  if (ids->empty()) return Result<std::optional<std::uint64_t>>(std::nullopt);
  return Result<std::optional<std::uint64_t>>(ids->back());
}

Result<CheckpointStorage::Manifest> CheckpointStorage::read_manifest(std::uint64_t id) {
  const std::string path = manifest_path(id);
  Result<std::vector<std::byte>> bytes = fs_->read_file(path);
  if (!bytes.ok()) return bytes.status();
  const std::vector<std::byte>& b = *bytes;
  auto bad = [&path](std::size_t at, const std::string& what) {
    return Status::error(path + ": offset " + std::to_string(at) + ": " + what);
  };
  if (b.size() != kManifestSize) {
    return bad(0, "expected a manifest of " + std::to_string(kManifestSize) + " bytes, found " +
                      std::to_string(b.size()));
  }
  if (!std::equal(kManifestMagic.begin(), kManifestMagic.end(), b.begin())) {
    return bad(0, "expected magic \"CSMF\" (a cowstate checkpoint manifest)");
  }
  const std::uint64_t sum = detail::load_le<std::uint64_t>(b.data() + 32);
  const std::uint64_t computed = checksum64(std::span<const std::byte>(b).first(32));
  if (sum != computed) return bad(32, "expected the manifest checksum to match: it is corrupt");
  if (detail::load_le<std::uint16_t>(b.data() + 4) != kManifestVersion ||
      detail::load_le<std::uint16_t>(b.data() + 6) != 0) {
    return bad(4, "expected manifest version 1 and flags 0");
  }
  Manifest m{detail::load_le<std::uint64_t>(b.data() + 8),
             detail::load_le<std::uint64_t>(b.data() + 16),
             detail::load_le<std::uint64_t>(b.data() + 24)};
  if (m.id != id) {
    return bad(8,
               "expected checkpoint id " + std::to_string(id) + ", found " + std::to_string(m.id));
  }
  return Result<Manifest>(m);
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
  if (checksum64(*data) != m->checksum) {
    return Status::error(path + ": expected the XXH3-64 recorded in the manifest, found " +
                         "another: the file is corrupt");
  }
  return data;
}

Result<std::unique_ptr<PendingCheckpoint>> CheckpointStorage::begin(std::uint64_t id) {
  COWSTATE_ASSERT(id > 0, "REQUIRES", "checkpoint ids start at 1");
  Result<std::optional<std::uint64_t>> last = latest();
  if (!last.ok()) return last.status();
  if (last->has_value() && id <= **last) {
    return Status::error(dir_ + ": checkpoint " + std::to_string(id) +
                         " is not above the latest complete checkpoint " + std::to_string(**last) +
                         ": checkpoint ids must grow");
  }
  const std::string tmp = data_path(id) + kTmpSuffix;
  Result<std::unique_ptr<WritableFile>> file = fs_->create_file(tmp);
  if (!file.ok()) return file.status();
  if (options_.io_thread) {
    AsyncFileOptions io = options_.io_buffers;
    io.pool = &io_pool_;
    try {
      *file = make_async_writable_file(std::move(*file), io);
    } catch (const std::system_error& e) {  // no thread to be had; the file is closed
      (void)fs_->remove_file(tmp);
      return Status::error(tmp + ": cannot start the I/O thread: " + e.what());
    }
  }
  return Result<std::unique_ptr<PendingCheckpoint>>(
      std::unique_ptr<PendingCheckpoint>(new PendingCheckpoint(this, id, std::move(*file))));
}

Status CheckpointStorage::publish(PendingCheckpoint& p) {
  const std::string data = data_path(p.id_);
  const std::string data_tmp = data + kTmpSuffix;
  const std::string manifest = manifest_path(p.id_);
  const std::string manifest_tmp = manifest + kTmpSuffix;
  // Best-effort removal of everything this checkpoint created, after a failure (C6).
  auto undo = [&](Status st, bool data_published, bool manifest_published) {
    if (p.file_ != nullptr) (void)p.file_->close();
    p.file_.reset();
    if (manifest_published) (void)fs_->remove_file(manifest);
    (void)fs_->remove_file(manifest_tmp);
    (void)fs_->remove_file(data_published ? data : data_tmp);
    return Status::error("checkpoint " + std::to_string(p.id_) + " not committed: " + st.message());
  };
  // 1. the data file: durable before it gets its final name.
  if (Status st = p.file_->sync(); !st.ok()) return undo(std::move(st), false, false);
  Status closed = p.file_->close();
  p.file_.reset();
  if (!closed.ok()) return undo(std::move(closed), false, false);
  // 2. its final name, durable.
  if (Status st = fs_->rename_file(data_tmp, data); !st.ok())
    return undo(std::move(st), false, false);
  if (Status st = fs_->sync_dir(dir_); !st.ok()) return undo(std::move(st), true, false);
  // 3. the manifest, last (C5).
  ByteWriter w;
  w.put_bytes(kManifestMagic);
  w.put_u16(kManifestVersion);
  w.put_u16(0);
  w.put_u64(p.id_);
  w.put_u64(p.size_);
  w.put_u64(p.checksum_.digest());
  w.put_u64(checksum64(w.written()));
  w.trim();
  COWSTATE_ASSERT(w.size() == kManifestSize, "C5", "manifest layout");
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
  if (Status r = fs_->sync_dir(dir_); !r.ok()) return undo(std::move(r), true, true);
  // 4. complete; an error while pruning only leaves older checkpoints for the next commit.
  (void)prune();
  return Status();
}

Status CheckpointStorage::prune() {
  Result<std::vector<std::uint64_t>> ids = complete_checkpoints();
  if (!ids.ok()) return ids.status();
  if (ids->size() <= options_.retain) return Status();
  const std::size_t drop = ids->size() - options_.retain;
  for (std::size_t i = 0; i < drop; ++i) {
    const std::uint64_t id = (*ids)[i];
    // Manifest first: once it is gone the checkpoint is no longer complete.
    if (Status st = fs_->remove_file(manifest_path(id)); !st.ok()) return st;
    if (Status st = fs_->remove_file(data_path(id)); !st.ok()) return st;
  }
  return fs_->sync_dir(dir_);
}

}  // namespace cowstate
