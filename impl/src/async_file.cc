// Async files: appends gathered into buffers that an I/O thread writes in order. See
// cowstate/async_file.h.
#include "cowstate/async_file.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include "cowstate/assert.h"

namespace cowstate {

namespace {

// members below the mutex are shared and guarded by it. With a ManualIo there is no thread:
// the queue is the same, and queued buffers land when the ManualIo or a waiting caller says.
class AsyncWritableFile final : public WritableFile, private ManualIo::File {
 public:
  AsyncWritableFile(std::unique_ptr<WritableFile> base, AsyncFileOptions options)
      : base_(std::move(base)),
        buffer_bytes_(options.buffer_bytes),
        buffers_(options.buffers),
        pool_(options.pool),
        manual_(options.manual_io),
        label_(std::move(options.label)) {
    COWSTATE_ASSERT(base_ != nullptr && buffers_ >= 2, "REQUIRES",
                    "an async file needs a file and two buffers");
    COWSTATE_ASSERT(buffer_bytes_ >= (manual_ != nullptr ? 1 : 4096), "REQUIRES",
                    "an async file's buffers hold at least 4096 bytes (1 with a ManualIo)");
    fill_ = new_buffer();
    allocated_ = 1;
    if (manual_ != nullptr) {
      manual_->attach(this);
    } else {
      thread_ = std::thread([this] { run(); });
    }
  }
  ~AsyncWritableFile() override {
    if (open_) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
        // Dropped: nobody will read this file's status any more.
        for (auto& b : queue_) spare_.push_back(std::move(b));
        queue_.clear();
      }
      stop_io();
    }
    give_back();
  }
  AsyncWritableFile(const AsyncWritableFile&) = delete;
  AsyncWritableFile& operator=(const AsyncWritableFile&) = delete;

  Status append(std::span<const std::byte> bytes) override {
    COWSTATE_ASSERT(open_, "C6", "append to a closed file");
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
    COWSTATE_ASSERT(open_, "C6", "sync of a closed file");
    if (Status st = drain(); !st.ok()) return st;
    // The I/O thread is idle (drain saw it so under the mutex): `base_` is ours here.
    Status st = base_->sync();
    remember(st);
    return st;
  }

  Status close() override {
    COWSTATE_ASSERT(open_, "C6", "closing a closed file");
    Status st = drain();
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    stop_io();
    give_back();
    Status closed = base_->close();  // closed either way, as close(2)
    return st.ok() ? closed : st;
  }

 private:
  // Queues `fill_` and gives the caller an empty buffer: a spare one, a new one while fewer
  // than `buffers_` exist, or else the next one the I/O thread (or with a ManualIo, the
  // caller itself, landing the oldest) gives back. Returns the file's error, if any, instead.
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
    if (manual_ != nullptr) {
      if (spare_.empty()) land(lock);
    } else {
      done_.wait(lock, [this] { return !spare_.empty() || !error_.ok(); });
    }
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
    if (manual_ != nullptr) {
      while (!queue_.empty()) land(lock);
    }
    done_.wait(lock, [this] { return pending_ == 0; });
    return error_;
  }

  // Ends the I/O: joins the thread, or leaves the ManualIo. REQUIRES: stop_ is set.
  void stop_io() {
    open_ = false;
    if (manual_ != nullptr) {
      manual_->detach(this);
      return;
    }
    work_.notify_one();
    thread_.join();
  }

  // Returns the buffers to the pool. REQUIRES: the I/O has stopped.
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

  // Writes the oldest queued buffer (nothing after an error) and gives it back as a spare.
  // REQUIRES: `lock` holds mu_ and the queue is not empty; it is released while writing.
  void land(std::unique_lock<std::mutex>& lock) {
    COWSTATE_ASSERT(!queue_.empty(), "REQUIRES", "landing a buffer of an empty queue");
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

  // ManualIo::File.
  bool has_queued() const override { return !queue_.empty(); }
  void land_oldest() override {
    std::unique_lock<std::mutex> lock(mu_);
    land(lock);
  }
  const std::string& label() const override { return label_; }

  // The I/O thread: writes queued buffers in order until stopped; after an error it only
  // gives the buffers back.
  void run() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      work_.wait(lock, [this] { return !queue_.empty() || stop_; });
      if (queue_.empty()) return;  // stopped, nothing left
      land(lock);
    }
  }

  std::unique_ptr<WritableFile> base_;
  const std::size_t buffer_bytes_;
  const std::size_t buffers_;
  AsyncBufferPool* const pool_;
  ManualIo* const manual_;  // null: the I/O thread writes
  const std::string label_;
  bool open_ = true;             // the caller's: neither closed nor destroyed
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
}  // namespace

ManualIo::~ManualIo() {
  COWSTATE_ASSERT(files_.empty(), "REQUIRES", "a ManualIo outlives the files that use it");
}

void ManualIo::attach(File* f) { files_.push_back(f); }

void ManualIo::detach(File* f) { files_.erase(std::find(files_.begin(), files_.end(), f)); }

ManualIo::File* ManualIo::waiting_file(std::size_t i) const {
  for (File* f : files_) {
    if (f->has_queued() && i-- == 0) return f;
  }
  COWSTATE_ASSERT(false, "REQUIRES", "a waiting file's index is below waiting()");
  return nullptr;
}

std::size_t ManualIo::waiting() const {
  return static_cast<std::size_t>(
      std::count_if(files_.begin(), files_.end(), [](const File* f) { return f->has_queued(); }));
}

const std::string& ManualIo::label(std::size_t i) const { return waiting_file(i)->label(); }

void ManualIo::land(std::size_t i) { waiting_file(i)->land_oldest(); }

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

}  // namespace cowstate
