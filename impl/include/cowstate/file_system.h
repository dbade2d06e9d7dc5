// The file system interface checkpoint storage writes through, the POSIX file system, and
// a fault-injecting file system that fails one chosen mutating operation, so tests and the
// simulator can put an I/O error at any write of a checkpoint.
//
// Thread safety: a file system and its files are used by one thread at a time; the POSIX
// file system has no state of its own and may be shared.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cowstate/status.h"

namespace cowstate {

// A file open for appending.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual Status append(std::span<const std::byte> bytes) = 0;
  virtual Status sync() = 0;
  // Closes the file; later calls are errors. The destructor closes an open file silently.
  virtual Status close() = 0;
};

// The file system operations checkpoint storage needs. Paths are plain strings.
class FileSystem {
 public:
  virtual ~FileSystem() = default;
  // Creates (or truncates) `path` for writing.
  virtual Result<std::unique_ptr<WritableFile>> create_file(const std::string& path) = 0;
  virtual Result<std::vector<std::byte>> read_file(const std::string& path) = 0;
  // Atomically replaces `to` with `from`.
  virtual Status rename_file(const std::string& from, const std::string& to) = 0;
  virtual Status remove_file(const std::string& path) = 0;
  virtual Status sync_dir(const std::string& dir) = 0;
  // Creates `dir` (one level) if it does not exist.
  virtual Status create_dir(const std::string& dir) = 0;
  // Names (not paths) of the entries of `dir`, sorted.
  virtual Result<std::vector<std::string>> list_dir(const std::string& dir) = 0;
};

// The process-wide POSIX file system.
FileSystem& posix_file_system();

// Wraps a FileSystem and fails one chosen mutating operation with an injected I/O error.
// Mutating operations (create, append, sync, close, rename, remove, directory sync and
// creation) are numbered from 1 in the order they happen; reads and listings are not
// counted and never fail.
class FaultInjectionFileSystem final : public FileSystem {
 public:
  explicit FaultInjectionFileSystem(FileSystem& base) : base_(&base) {}

  // The `n`-th mutating operation from now fails (0: none).
  void fail_at(std::uint64_t n) noexcept { fail_at_ = n == 0 ? 0 : operations_ + n; }
  // Mutating operations so far.
  std::uint64_t operations() const noexcept { return operations_; }
  // Whether the chosen failure happened.
  bool injected() const noexcept { return injected_; }

  Result<std::unique_ptr<WritableFile>> create_file(const std::string& path) override;
  Result<std::vector<std::byte>> read_file(const std::string& path) override {
    return base_->read_file(path);
  }
  Status rename_file(const std::string& from, const std::string& to) override;
  Status remove_file(const std::string& path) override;
  Status sync_dir(const std::string& dir) override;
  Status create_dir(const std::string& dir) override;
  Result<std::vector<std::string>> list_dir(const std::string& dir) override {
    return base_->list_dir(dir);
  }

  // Counts one mutating operation; the injected error if it is the chosen one.
  Status tick(const char* op, const std::string& path);

 private:
  FileSystem* base_;
  std::uint64_t operations_ = 0;
  std::uint64_t fail_at_ = 0;
  bool injected_ = false;
};

}  // namespace cowstate
