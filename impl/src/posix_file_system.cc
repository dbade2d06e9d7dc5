// The POSIX file system: files written with write(2) and made durable with fsync(2). See
// cowstate/file_system.h.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "cowstate/assert.h"
#include "cowstate/file_system.h"

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

}  // namespace

FileSystem& posix_file_system() {
  static PosixFileSystem fs;
  return fs;
}

}  // namespace cowstate
