// The fault-injecting file system: numbers the mutating operations and fails the chosen
// one. See cowstate/file_system.h.
#include <string>
#include <utility>

#include "cowstate/file_system.h"

namespace cowstate {

namespace {

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
}  // namespace

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

}  // namespace cowstate
