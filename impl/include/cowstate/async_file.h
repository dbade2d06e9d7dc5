// Async files: a WritableFile whose appends are written by an I/O thread of its own, and
// the pool its buffers come from.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cowstate/file_system.h"

namespace cowstate {

// Buffers of async files (below), kept from one file to the next, so that each checkpoint
// fills memory the process already has: glibc returns freed blocks of a megabyte to the
// kernel, and every page of a fresh one is a page fault again. Thread-safe; it must outlive
// the files that use it.
class AsyncBufferPool {
 public:
  explicit AsyncBufferPool(std::size_t max_kept = 4) : max_kept_(max_kept) {}
  AsyncBufferPool(const AsyncBufferPool&) = delete;
  AsyncBufferPool& operator=(const AsyncBufferPool&) = delete;

  // An empty buffer with room for `bytes`: a kept one if it is large enough.
  std::vector<std::byte> take(std::size_t bytes);
  // Keeps `buffer`, emptied, unless max_kept are kept already.
  void give(std::vector<std::byte> buffer);
  std::size_t kept() const;

 private:
  mutable std::mutex mu_;
  std::size_t max_kept_;
  std::vector<std::vector<std::byte>> kept_;
};

// The I/O of async files (below) that nobody performs until asked: a deterministic stand-in
// for their I/O threads, for simulators and tests. Its owner decides when each queued buffer
// lands, and which file's first, within what an async file promises: a file's buffers land
// in the order they were queued, different files' in any order. A file whose writer would
// wait for its thread (every buffer queued, or sync and close, which drain the queue) lands
// its own oldest buffers itself, as if its thread had finished them just then.
// Thread safety: the queue and its files are used by one thread.
class ManualIo {
 public:
  ManualIo() = default;
  ManualIo(const ManualIo&) = delete;
  ManualIo& operator=(const ManualIo&) = delete;
  // REQUIRES: every file that used it is closed or destroyed.
  ~ManualIo();

  // The files with a queued buffer, in the order they were opened.
  std::size_t waiting() const;
  // The label (AsyncFileOptions::label) of the i-th waiting file. REQUIRES: i < waiting().
  const std::string& label(std::size_t i) const;
  // Lands the oldest queued buffer of the i-th waiting file: it is appended to that file's
  // underlying file (or dropped after an error there, as the thread does).
  // REQUIRES: i < waiting().
  void land(std::size_t i);

  // What an async file in manual mode offers its queue.
  class File {
   public:
    virtual bool has_queued() const = 0;
    virtual void land_oldest() = 0;
    virtual const std::string& label() const = 0;

   protected:
    ~File() = default;
  };
  void attach(File* f);
  void detach(File* f);

 private:
  File* waiting_file(std::size_t i) const;
  std::vector<File*> files_;  // open files in manual mode, in the order they were opened
};

struct AsyncFileOptions {
  // Bytes gathered before they are handed to the I/O thread. At least 4096 with a thread;
  // at least 1 with `manual_io`, where small buffers make many queued writes to interleave.
  std::size_t buffer_bytes = std::size_t{1} << 20;
  // Buffers in all: the one being filled plus those queued or being written. At least 2.
  std::size_t buffers = 3;
  // Where buffers come from and go back to when the file is closed or destroyed; null: the
  // file allocates its own and frees them.
  AsyncBufferPool* pool = nullptr;
  // Not null: no thread; the queued buffers land when `manual_io` says (ManualIo). It must
  // outlive the file.
  ManualIo* manual_io = nullptr;
  // Names the file to its ManualIo, for traces.
  std::string label{};
};

// Wraps `file` so that its appends are written by a thread of its own: append() copies the
// bytes into a buffer, and a full buffer goes to the I/O thread, which appends the buffers
// to `file` in order while the caller fills the next one (at most options.buffers - 1 wait
// or are being written; the caller blocks when all are). A large write then takes about
// the longer of the two sides (building the bytes, the kernel's copy of them into the page
// cache) instead of their sum, for one more memory copy and a second core.
//
// Errors: the first error of `file` is kept and returned by every later append, sync and
// close. An append that returns ok may have bytes of earlier appends that failed: the error
// surfaces at a later call, at the latest at sync() or close(), which drain the queue
// first. So a caller must check sync() and close(), as PendingCheckpoint::commit() does.
// The destructor without close() drops what is still queued, stops the thread and closes
// `file` silently.
// Thread safety: one caller thread at a time, as for any WritableFile; `file` is used by
// the I/O thread and, while the queue is drained (sync, close), by the caller.
std::unique_ptr<WritableFile> make_async_writable_file(std::unique_ptr<WritableFile> file,
                                                       AsyncFileOptions options = {});

}  // namespace cowstate
