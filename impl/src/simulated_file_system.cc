// The simulated disk: inodes and directories with durable and current contents, the log of
// pending operations, power loss, faults and the crash-state enumerator. See
// cowstate/simulated_file_system.h.
#include "cowstate/simulated_file_system.h"

#include <algorithm>
#include <string>
#include <utility>

#include "cowstate/assert.h"

namespace cowstate {

namespace {

// The directory and the name of `path`.
std::pair<std::string, std::string> split(const std::string& path) {
  COWSTATE_ASSERT(!path.empty() && path.back() != '/', "REQUIRES",
                  "a simulated path is not empty and has no trailing '/'");
  const std::size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {"", path};
  COWSTATE_ASSERT(slash == 0 || path[slash - 1] != '/', "REQUIRES",
                  "a simulated path has no empty component");
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

std::string join(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir == "/") return "/" + name;
  return dir + "/" + name;
}

bool is_root(const std::string& dir) { return dir.empty() || dir == "/"; }

std::string dir_label(const std::string& dir) { return dir.empty() ? "." : dir; }

std::string byte_range(std::uint64_t from, std::size_t size) {
  return std::to_string(from) + "-" + std::to_string(from + size - 1);
}

class ConstantChoices final : public DiskChoices {
 public:
  explicit ConstantChoices(bool largest) : largest_(largest) {}
  std::uint64_t choose(std::uint64_t n, const char* /*what*/) override {
    COWSTATE_ASSERT(n >= 1, "REQUIRES", "a choice needs at least one answer");
    return largest_ ? n - 1 : 0;
  }

 private:
  bool largest_;
};

// Every sequence of answers, depth first: the first run answers 0 everywhere, and next()
// moves to the following sequence in lexicographic order.
class ExhaustiveChoices final : public DiskChoices {
 public:
  std::uint64_t choose(std::uint64_t n, const char* /*what*/) override {
    COWSTATE_ASSERT(n >= 1, "REQUIRES", "a choice needs at least one answer");
    if (depth_ == path_.size()) path_.push_back({0, n});
    COWSTATE_ASSERT(path_[depth_].second == n, "REQUIRES",
                    "the same answers so far must lead to the same choice");
    return path_[depth_++].first;
  }
  // Moves to the next sequence; false when every one was run.
  bool next() {
    COWSTATE_ASSERT(depth_ == path_.size(), "REQUIRES", "a run asked fewer choices than before");
    depth_ = 0;
    while (!path_.empty() && path_.back().first + 1 == path_.back().second) path_.pop_back();
    if (path_.empty()) return false;
    ++path_.back().first;
    return true;
  }

 private:
  std::vector<std::pair<std::uint64_t, std::uint64_t>> path_;  // (answer, n) per choice
  std::size_t depth_ = 0;
};

// Applies one pending write (or truncation) to `data`.
void apply_write(std::vector<std::byte>& data, bool truncate, std::uint64_t grow_to,
                 std::uint64_t offset, std::span<const std::byte> bytes) {
  if (truncate) {
    data.clear();
    return;
  }
  const std::size_t end = static_cast<std::size_t>(offset) + bytes.size();
  data.resize(std::max({data.size(), static_cast<std::size_t>(grow_to), end}));
  std::copy(bytes.begin(), bytes.end(), data.begin() + static_cast<std::ptrdiff_t>(offset));
}

SimulatedFileSystem::Operation operation(std::uint64_t n, SimulatedFileSystem::Operation::Kind kind,
                                         const std::string& path, std::uint64_t file = 0) {
  SimulatedFileSystem::Operation op;
  op.number = n;
  op.kind = kind;
  op.path = path;
  op.file = file;
  return op;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Choices

std::uint64_t SeededDiskChoices::choose(std::uint64_t n, const char* /*what*/) {
  COWSTATE_ASSERT(n >= 1, "REQUIRES", "a choice needs at least one answer");
  std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return z % n;
}

void SeededDiskChoices::about(std::string_view op) {
  std::string what;
  for (std::size_t i = 0; i < op.size();) {
    std::size_t j = i;
    while (j < op.size() && op[j] >= '0' && op[j] <= '9') ++j;
    if (j == i) {
      what += op[i++];
      continue;
    }
    if (j - i < 8) what.append(op.substr(i, j - i));
    i = j;
  }
  const std::uint64_t before = seen_[what]++;
  what += "#" + std::to_string(before);
  std::uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a 64
  for (const char c : what) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  state_ = seed_ ^ h;
}

DiskChoices& keep_everything() noexcept {
  static ConstantChoices c(true);
  return c;
}

DiskChoices& lose_everything() noexcept {
  static ConstantChoices c(false);
  return c;
}

// ---------------------------------------------------------------------------------------
// SimulatedFile

// A file of a SimulatedFileSystem: appends and syncs go to its inode until it is closed or
// a power loss kills it.
class SimulatedFile final : public WritableFile {
 public:
  SimulatedFile(SimulatedFileSystem* fs, std::uint64_t file, std::uint64_t inode, std::string path)
      : fs_(fs), file_(file), inode_(inode), epoch_(fs->disk_.epoch), path_(std::move(path)) {}

  Status append(std::span<const std::byte> bytes) override {
    COWSTATE_ASSERT(!closed_, "C6", "append to a closed file");
    const std::uint64_t n = fs_->tick();
    if (Status st = alive("append"); !st.ok()) return st;
    SimulatedFileSystem::WriteFault fault;
    const SimulatedFileSystem::WriteFault* armed = nullptr;
    if (auto it = fs_->write_faults_.find(path_); it != fs_->write_faults_.end()) {
      if (it->second.front().skip > 0) {
        --it->second.front().skip;
      } else {
        fault = it->second.front();
        armed = &fault;
        it->second.erase(it->second.begin());
        if (it->second.empty()) fs_->write_faults_.erase(it);
      }
    }
    fs_->do_append(inode_, path_, bytes, armed, n);
    SimulatedFileSystem::Operation op =
        operation(n, SimulatedFileSystem::Operation::Kind::append, path_, file_);
    op.bytes.assign(bytes.begin(), bytes.end());
    op.lost = armed != nullptr && armed->lost;
    op.misdirected =
        armed != nullptr && !armed->lost ? static_cast<std::int64_t>(armed->offset) : -1;
    fs_->history_.push_back(std::move(op));
    return Status();
  }
  Status sync() override {
    COWSTATE_ASSERT(!closed_, "C6", "sync of a closed file");
    const std::uint64_t n = fs_->tick();
    if (Status st = alive("fsync"); !st.ok()) return st;
    fs_->do_sync(inode_);
    SimulatedFileSystem::Operation op =
        operation(n, SimulatedFileSystem::Operation::Kind::sync, path_, file_);
    fs_->history_.push_back(std::move(op));
    return Status();
  }
  Status close() override {
    COWSTATE_ASSERT(!closed_, "C6", "closing a closed file");
    closed_ = true;
    const std::uint64_t n = fs_->tick();
    if (Status st = alive("close"); !st.ok()) return st;
    SimulatedFileSystem::Operation op =
        operation(n, SimulatedFileSystem::Operation::Kind::close, path_, file_);
    fs_->history_.push_back(std::move(op));
    return Status();
  }

 private:
  Status alive(const char* op) const {
    if (epoch_ == fs_->disk_.epoch) return Status();
    return Status::error(std::string(op) + " " + path_ +
                         ": the file was open at a power loss and is gone");
  }

  SimulatedFileSystem* fs_;
  std::uint64_t file_;
  std::uint64_t inode_;
  std::uint64_t epoch_;
  std::string path_;
  bool closed_ = false;
};

// ---------------------------------------------------------------------------------------
// The operations on the disk

SimulatedFileSystem::SimulatedFileSystem() {
  disk_.dirs[""];
  disk_.dirs["/"];
  history_base_ = disk_;
}

SimulatedFileSystem::SimulatedFileSystem(const DiskImage& image) : SimulatedFileSystem() {
  auto link = [this](const std::string& path, std::uint64_t target) {
    const auto [dir, name] = split(path);
    auto d = disk_.dirs.find(dir);
    COWSTATE_ASSERT(d != disk_.dirs.end(), "REQUIRES", "a disk image lists every parent directory");
    d->second.durable[name] = target;
    d->second.current[name] = target;
  };
  for (const std::string& dir : image.dirs) {  // ordered: a parent before its children
    disk_.dirs[dir];
    link(dir, kDirEntry);
  }
  for (const auto& [path, bytes] : image.files) {
    const std::uint64_t ino = disk_.next_inode++;
    disk_.inodes[ino] = Inode{bytes, bytes};
    link(path, ino);
  }
  history_base_ = disk_;
  COWSTATE_ASSERT(durable_image() == image, "REQUIRES", "a disk image that a disk can hold");
}

Result<std::uint64_t> SimulatedFileSystem::do_create(const std::string& path, std::uint64_t n) {
  const auto [dir, name] = split(path);
  auto d = disk_.dirs.find(dir);
  if (d == disk_.dirs.end()) return Status::error("create " + path + ": no such directory");
  if (auto e = d->second.current.find(name); e != d->second.current.end()) {
    if (e->second == kDirEntry) return Status::error("create " + path + ": is a directory");
    Inode& inode = disk_.inodes.at(e->second);
    inode.current.clear();
    Pending p;
    p.inode = e->second;
    p.write.truncate = true;
    p.path = path;
    disk_.pending[n] = std::move(p);
    return e->second;
  }
  const std::uint64_t ino = disk_.next_inode++;
  disk_.inodes[ino];
  d->second.current[name] = ino;
  Pending p;
  p.kind = Pending::Kind::create;
  p.inode = ino;
  p.dir = dir;
  p.name = name;
  p.path = path;
  disk_.pending[n] = std::move(p);
  return ino;
}

void SimulatedFileSystem::do_append(std::uint64_t inode, const std::string& path,
                                    std::span<const std::byte> bytes, const WriteFault* fault,
                                    std::uint64_t n) {
  if (bytes.empty() || (fault != nullptr && fault->lost)) return;
  Inode& ino = disk_.inodes.at(inode);
  Pending p;
  p.inode = inode;
  p.path = path;
  p.write.grow_to = ino.current.size() + bytes.size();
  p.write.offset = ino.current.size();
  if (fault != nullptr) {
    p.write.misdirected = true;
    p.write.offset = fault->offset;
  }
  p.write.bytes.assign(bytes.begin(), bytes.end());
  apply_write(ino.current, false, p.write.grow_to, p.write.offset, p.write.bytes);
  disk_.pending[n] = std::move(p);
}

void SimulatedFileSystem::do_sync(std::uint64_t inode) {
  Inode& ino = disk_.inodes.at(inode);
  ino.durable = ino.current;
  std::erase_if(disk_.pending, [inode](const auto& kv) {
    return kv.second.kind == Pending::Kind::write && kv.second.inode == inode;
  });
}

Status SimulatedFileSystem::do_rename(const std::string& from, const std::string& to,
                                      std::uint64_t n) {
  const auto [dir, name] = split(from);
  const auto [to_dir, to_name] = split(to);
  COWSTATE_ASSERT(dir == to_dir, "REQUIRES", "a simulated rename stays in one directory");
  const std::string what = "rename " + from + " to " + to;
  auto d = disk_.dirs.find(dir);
  if (d == disk_.dirs.end()) return Status::error(what + ": no such directory");
  auto e = d->second.current.find(name);
  if (e == d->second.current.end()) return Status::error(what + ": no such file");
  if (e->second == kDirEntry) return Status::error(what + ": renaming a directory");
  if (auto t = d->second.current.find(to_name);
      t != d->second.current.end() && t->second == kDirEntry) {
    return Status::error(what + ": the target is a directory");
  }
  if (name == to_name) return Status();
  const std::uint64_t ino = e->second;
  d->second.current.erase(e);
  d->second.current[to_name] = ino;
  Pending p;
  p.kind = Pending::Kind::rename;
  p.inode = ino;
  p.dir = dir;
  p.name = name;
  p.to = to_name;
  p.path = from;
  disk_.pending[n] = std::move(p);
  return Status();
}

Status SimulatedFileSystem::do_remove(const std::string& path, std::uint64_t n) {
  const auto [dir, name] = split(path);
  auto d = disk_.dirs.find(dir);
  if (d == disk_.dirs.end()) return Status::error("remove " + path + ": no such directory");
  auto e = d->second.current.find(name);
  if (e == d->second.current.end()) return Status::error("remove " + path + ": no such file");
  if (e->second == kDirEntry) return Status::error("remove " + path + ": is a directory");
  Pending p;
  p.kind = Pending::Kind::remove;
  p.inode = e->second;
  p.dir = dir;
  p.name = name;
  p.path = path;
  d->second.current.erase(e);
  disk_.pending[n] = std::move(p);
  return Status();
}

Status SimulatedFileSystem::do_sync_dir(const std::string& dir) {
  auto d = disk_.dirs.find(dir);
  if (d == disk_.dirs.end()) {
    return Status::error("fsync directory " + dir_label(dir) + ": no such directory");
  }
  d->second.durable = d->second.current;
  std::erase_if(disk_.pending, [&dir](const auto& kv) {
    return kv.second.kind != Pending::Kind::write && kv.second.dir == dir;
  });
  return Status();
}

Status SimulatedFileSystem::do_create_dir(const std::string& path, std::uint64_t n) {
  if (is_root(path)) return Status();
  const auto [dir, name] = split(path);
  auto d = disk_.dirs.find(dir);
  if (d == disk_.dirs.end()) {
    return Status::error("create directory " + path + ": no such directory");
  }
  if (auto e = d->second.current.find(name); e != d->second.current.end()) {
    if (e->second == kDirEntry) return Status();
    return Status::error("create directory " + path + ": a file has that name");
  }
  d->second.current[name] = kDirEntry;
  disk_.dirs[path];
  Pending p;
  p.kind = Pending::Kind::mkdir;
  p.dir = dir;
  p.name = name;
  p.path = path;
  disk_.pending[n] = std::move(p);
  return Status();
}

// ---------------------------------------------------------------------------------------
// FileSystem

Result<std::unique_ptr<WritableFile>> SimulatedFileSystem::create_file(const std::string& path) {
  const std::uint64_t n = tick();
  Result<std::uint64_t> ino = do_create(path, n);
  if (!ino.ok()) return ino.status();
  const std::uint64_t file = ++files_created_;
  history_.push_back(operation(n, Operation::Kind::create, path, file));
  return Result<std::unique_ptr<WritableFile>>(
      std::make_unique<SimulatedFile>(this, file, *ino, path));
}

Result<std::vector<std::byte>> SimulatedFileSystem::read_file(const std::string& path) {
  const auto [dir, name] = split(path);
  auto d = disk_.dirs.find(dir);
  if (d == disk_.dirs.end()) return Status::error("open " + path + ": no such directory");
  auto e = d->second.current.find(name);
  if (e == d->second.current.end()) return Status::error("open " + path + ": no such file");
  if (e->second == kDirEntry) return Status::error("read " + path + ": is a directory");
  std::vector<std::byte> bytes = disk_.inodes.at(e->second).current;
  if (auto f = read_faults_.find(path); f != read_faults_.end()) {
    apply_read_fault(f->second.front(), bytes);
    f->second.erase(f->second.begin());
    if (f->second.empty()) read_faults_.erase(f);
  }
  return Result<std::vector<std::byte>>(std::move(bytes));
}

Status SimulatedFileSystem::rename_file(const std::string& from, const std::string& to) {
  const std::uint64_t n = tick();
  if (Status st = do_rename(from, to, n); !st.ok()) return st;
  Operation op = operation(n, Operation::Kind::rename, from);
  op.to = to;
  history_.push_back(std::move(op));
  return Status();
}

Status SimulatedFileSystem::remove_file(const std::string& path) {
  const std::uint64_t n = tick();
  if (Status st = do_remove(path, n); !st.ok()) return st;
  history_.push_back(operation(n, Operation::Kind::remove, path));
  return Status();
}

Status SimulatedFileSystem::sync_dir(const std::string& path) {
  const std::string dir = path == "." ? std::string() : path;  // "." is the relative root
  const std::uint64_t n = tick();
  if (Status st = do_sync_dir(dir); !st.ok()) return st;
  history_.push_back(operation(n, Operation::Kind::sync_dir, dir));
  return Status();
}

Status SimulatedFileSystem::create_dir(const std::string& dir) {
  const std::uint64_t n = tick();
  if (Status st = do_create_dir(dir, n); !st.ok()) return st;
  history_.push_back(operation(n, Operation::Kind::mkdir, dir));
  return Status();
}

Result<std::vector<std::string>> SimulatedFileSystem::list_dir(const std::string& dir) {
  auto d = disk_.dirs.find(dir);
  if (d == disk_.dirs.end()) {
    return Status::error("list directory " + dir_label(dir) + ": no such directory");
  }
  std::vector<std::string> names;
  for (const auto& [name, ino] : d->second.current) names.push_back(name);
  return Result<std::vector<std::string>>(std::move(names));
}

// ---------------------------------------------------------------------------------------
// Faults

void SimulatedFileSystem::flip_bit_on_read(const std::string& path, std::uint64_t offset,
                                           unsigned bit) {
  COWSTATE_ASSERT(bit < 8, "REQUIRES", "a byte has bits 0 to 7");
  read_faults_[path].push_back({ReadFault::Kind::flip, offset, bit});
}

void SimulatedFileSystem::zero_sector_on_read(const std::string& path, std::uint64_t sector) {
  read_faults_[path].push_back({ReadFault::Kind::zero, sector, 0});
}

void SimulatedFileSystem::misdirect_read(const std::string& path, std::uint64_t sector,
                                         std::uint64_t from_sector) {
  COWSTATE_ASSERT(sector != from_sector, "REQUIRES", "a misdirected read reads another sector");
  read_faults_[path].push_back({ReadFault::Kind::misdirect, sector, from_sector});
}

void SimulatedFileSystem::short_read(const std::string& path, std::uint64_t bytes) {
  read_faults_[path].push_back({ReadFault::Kind::shorten, bytes, 0});
}

void SimulatedFileSystem::lose_write(const std::string& path, std::uint64_t skip) {
  write_faults_[path].push_back({true, 0, skip});
}

void SimulatedFileSystem::misdirect_write(const std::string& path, std::uint64_t offset,
                                          std::uint64_t skip) {
  write_faults_[path].push_back({false, offset, skip});
}

std::size_t SimulatedFileSystem::armed_faults() const noexcept {
  std::size_t n = 0;
  for (const auto& [path, faults] : read_faults_) n += faults.size();
  for (const auto& [path, faults] : write_faults_) n += faults.size();
  return n;
}

void SimulatedFileSystem::apply_read_fault(const ReadFault& f,
                                           std::vector<std::byte>& bytes) const {
  const std::uint64_t size = bytes.size();
  const std::uint64_t start = f.at * kSectorBytes;
  const std::uint64_t end = std::min<std::uint64_t>(start + kSectorBytes, size);
  switch (f.kind) {
    case ReadFault::Kind::flip:
      if (f.at < size) bytes[f.at] ^= std::byte{static_cast<unsigned char>(1u << f.from)};
      return;
    case ReadFault::Kind::zero:
      for (std::uint64_t i = start; i < end; ++i) bytes[i] = std::byte{0};
      return;
    case ReadFault::Kind::misdirect: {
      const std::vector<std::byte> original = bytes;
      for (std::uint64_t i = start; i < end; ++i) {
        const std::uint64_t src = f.from * kSectorBytes + (i - start);
        bytes[i] = src < size ? original[src] : std::byte{0};
      }
      return;
    }
    case ReadFault::Kind::shorten:
      if (f.at < size) bytes.resize(f.at);
      return;
  }
}

// ---------------------------------------------------------------------------------------
// Pending operations and power loss

std::string SimulatedFileSystem::describe(const Pending& p) {
  switch (p.kind) {
    case Pending::Kind::write:
      if (p.write.truncate) return "truncate " + p.path;
      return std::string(p.write.misdirected ? "misdirected write " : "append ") + p.path +
             " bytes " + byte_range(p.write.offset, p.write.bytes.size());
    case Pending::Kind::create:
      return "create " + p.path;
    case Pending::Kind::mkdir:
      return "create directory " + p.path;
    case Pending::Kind::rename:
      return "rename " + p.path + " to " + join(p.dir, p.to);
    case Pending::Kind::remove:
      return "remove " + p.path;
  }
  return "?";
}

std::vector<std::string> SimulatedFileSystem::pending_operations() const {
  std::vector<std::string> lines;
  for (const auto& [n, p] : disk_.pending) {
    const std::string why = p.kind == Pending::Kind::write
                                ? "not synced"
                                : "directory " + dir_label(p.dir) + " not synced";
    lines.push_back("op " + std::to_string(n) + ": " + describe(p) + " (" + why + ")");
  }
  return lines;
}

std::vector<std::string> SimulatedFileSystem::power_loss(DiskChoices& choices,
                                                         PowerLossOptions options) {
  std::vector<std::string> lines = lose_power(disk_, choices, options);
  history_.clear();
  history_base_ = disk_;
  return lines;
}

std::vector<std::string> SimulatedFileSystem::power_loss_after(std::uint64_t op,
                                                               DiskChoices& choices,
                                                               PowerLossOptions options) {
  SimulatedFileSystem replayer;
  replayer.disk_ = history_base_;
  std::map<std::uint64_t, std::uint64_t> file_inodes;
  for (const Operation& o : history_) {
    if (o.number > op) break;
    replayer.replay(o, file_inodes);
  }
  // Files opened on the disk as it is now must die with it.
  replayer.disk_.epoch = std::max(replayer.disk_.epoch, disk_.epoch);
  disk_ = std::move(replayer.disk_);
  return power_loss(choices, options);
}

// One power loss of a disk, step by step (see the header comment for the rules).
struct SimulatedFileSystem::PowerLoss {
  using Entries = std::map<std::string, std::uint64_t>;

  Disk& disk;
  DiskChoices& choices;
  PowerLossOptions options;
  std::vector<std::string> lines;
  std::map<std::string, Entries> entries;                // each directory's entries after the loss
  std::set<std::string> dirs;                            // the directories still reachable
  std::set<std::uint64_t> files;                         // the inodes still named in them
  std::map<std::uint64_t, std::vector<std::byte>> data;  // each such inode's bytes after it

  // The directories reachable from a root through `entries_of`. A parent's path sorts
  // before its children's, so one pass in order sees every parent first.
  static std::set<std::string> reachable_dirs(const std::map<std::string, const Entries*>& of) {
    std::set<std::string> reached;
    for (const auto& [path, e] : of) {
      if (!is_root(path)) {
        const auto [parent, name] = split(path);
        if (!reached.contains(parent)) continue;
        const Entries& pe = *of.at(parent);
        const auto it = pe.find(name);
        if (it == pe.end() || it->second != kDirEntry) continue;
      }
      reached.insert(path);
    }
    return reached;
  }

  // A choice about pending operation `p` (DiskChoices::about).
  std::uint64_t choose_about(const Pending& p, std::uint64_t n, const char* what) {
    choices.about(describe(p));
    return choices.choose(n, what);
  }

  void say(std::uint64_t n, const Pending& p, const std::string& outcome) {
    lines.push_back("op " + std::to_string(n) + ": " + describe(p) + ": " + outcome);
  }

  // 1. Directory operations, in log order, replayed on the durable entries.
  void decide_directory_operations() {
    for (const auto& [path, dir] : disk.dirs) entries[path] = dir.durable;
    for (const auto& [n, p] : disk.pending) {
      if (p.kind == Pending::Kind::write) continue;
      Entries& e = entries.at(p.dir);
      const auto named = e.find(p.name);
      const bool applies = p.kind == Pending::Kind::create || p.kind == Pending::Kind::mkdir
                               ? named == e.end()
                               : named != e.end() && named->second == p.inode;
      if (!applies) {
        say(n, p, "lost (no longer applies)");
        continue;
      }
      if (choose_about(p, 2, "keep a directory operation") == 0) {
        say(n, p, "lost");
      } else {
        apply(p, e);
        say(n, p, "kept");
      }
    }
  }

  static void apply(const Pending& p, Entries& e) {
    switch (p.kind) {
      case Pending::Kind::create:
        e[p.name] = p.inode;
        return;
      case Pending::Kind::mkdir:
        e[p.name] = kDirEntry;
        return;
      case Pending::Kind::rename:
        e.erase(p.name);
        e[p.to] = p.inode;
        return;
      case Pending::Kind::remove:
        e.erase(p.name);
        return;
      case Pending::Kind::write:
        break;
    }
    COWSTATE_ASSERT(false, "REQUIRES", "a directory operation");
  }

  // 2. What is still reachable; the rest vanishes.
  void find_reachable() {
    std::map<std::string, const Entries*> of;
    for (const auto& [path, e] : entries) of[path] = &e;
    dirs = reachable_dirs(of);
    for (const std::string& path : dirs) {
      for (const auto& [name, ino] : entries.at(path)) {
        if (ino != kDirEntry) files.insert(ino);
      }
    }
    for (std::uint64_t ino : files) data[ino] = disk.inodes.at(ino).durable;
  }

  // 3. Each remaining file's writes, in log order: a prefix of them, the last maybe torn.
  void decide_writes() {
    std::set<std::uint64_t> stopped;
    for (const auto& [n, p] : disk.pending) {
      if (p.kind != Pending::Kind::write) continue;
      if (!files.contains(p.inode)) {
        say(n, p, "lost (the file is gone)");
      } else if (stopped.contains(p.inode)) {
        say(n, p, "lost (an earlier write to the file was lost)");
      } else if (choose_about(p, 2, "keep a write") == 0) {
        stopped.insert(p.inode);
        say(n, p, "lost");
      } else if (const std::size_t kept = keep(p.inode, p.write); kept < p.write.bytes.size()) {
        stopped.insert(p.inode);
        say(n, p, "kept bytes " + byte_range(p.write.offset, kept) + " (torn)");
      } else {
        say(n, p, "kept");
      }
    }
  }

  // Applies the part of `w` that survives to `inode`'s data; returns its size.
  std::size_t keep(std::uint64_t inode, const Write& w) {
    std::size_t kept = w.bytes.size();
    if (options.torn_writes && !w.truncate) {
      const std::uint64_t first = (w.offset / kSectorBytes + 1) * kSectorBytes;
      const std::uint64_t end = w.offset + w.bytes.size();
      const std::uint64_t cuts = first < end ? (end - first + kSectorBytes - 1) / kSectorBytes : 0;
      if (cuts > 0) {
        const std::uint64_t c = choices.choose(cuts + 1, "tear a write");
        if (c < cuts) kept = static_cast<std::size_t>(first + c * kSectorBytes - w.offset);
      }
    }
    COWSTATE_ASSERT(kept == w.bytes.size() || (w.offset + kept) % kSectorBytes == 0, "REQUIRES",
                    "a write is torn at a sector boundary");
    // An append's growth is torn with its bytes; a misdirected write's is not.
    const bool append = w.grow_to == w.offset + w.bytes.size();
    const std::uint64_t grow_to = append ? w.offset + kept : w.grow_to;
    apply_write(data.at(inode), w.truncate, grow_to, w.offset,
                std::span<const std::byte>(w.bytes).first(kept));
    return kept;
  }

  // The outcome becomes the whole disk, durable; files open before are dead.
  void install() {
    std::erase_if(disk.inodes, [this](const auto& kv) { return !files.contains(kv.first); });
    for (auto& [ino, inode] : disk.inodes) {
      inode.durable = std::move(data.at(ino));
      inode.current = inode.durable;
    }
    std::erase_if(disk.dirs, [this](const auto& kv) { return !dirs.contains(kv.first); });
    for (auto& [path, dir] : disk.dirs) {
      dir.durable = std::move(entries.at(path));
      dir.current = dir.durable;
    }
    disk.pending.clear();
    ++disk.epoch;
    COWSTATE_ASSERT(disk.dirs.contains("") && disk.dirs.contains("/"), "REQUIRES",
                    "the roots survive every power loss");
  }
};

std::vector<std::string> SimulatedFileSystem::lose_power(Disk& disk, DiskChoices& choices,
                                                         PowerLossOptions options) {
  PowerLoss loss{disk, choices, options, {}, {}, {}, {}, {}};
  loss.decide_directory_operations();
  loss.find_reachable();
  loss.decide_writes();
  loss.install();
  return std::move(loss.lines);
}

// ---------------------------------------------------------------------------------------
// Images and crash states

DiskImage SimulatedFileSystem::image_of(const Disk& disk, bool durable) {
  std::map<std::string, const PowerLoss::Entries*> of;
  for (const auto& [path, dir] : disk.dirs) of[path] = durable ? &dir.durable : &dir.current;
  DiskImage image;
  for (const std::string& path : PowerLoss::reachable_dirs(of)) {
    if (!is_root(path)) image.dirs.insert(path);
    for (const auto& [name, ino] : *of.at(path)) {
      if (ino == kDirEntry) continue;
      const Inode& inode = disk.inodes.at(ino);
      image.files[join(path, name)] = durable ? inode.durable : inode.current;
    }
  }
  return image;
}

DiskImage SimulatedFileSystem::image() const { return image_of(disk_, false); }

DiskImage SimulatedFileSystem::durable_image() const { return image_of(disk_, true); }

void SimulatedFileSystem::replay(const Operation& op,
                                 std::map<std::uint64_t, std::uint64_t>& file_inodes) {
  Status st;
  switch (op.kind) {
    case Operation::Kind::create: {
      Result<std::uint64_t> ino = do_create(op.path, op.number);
      COWSTATE_ASSERT(ino.ok(), "REQUIRES", "a recorded create succeeds again");
      file_inodes[op.file] = *ino;
      break;
    }
    case Operation::Kind::append: {
      WriteFault fault{op.lost,
                       op.misdirected < 0 ? 0 : static_cast<std::uint64_t>(op.misdirected)};
      const bool faulty = op.lost || op.misdirected >= 0;
      do_append(file_inodes.at(op.file), op.path, op.bytes, faulty ? &fault : nullptr, op.number);
      break;
    }
    case Operation::Kind::sync:
      do_sync(file_inodes.at(op.file));
      break;
    case Operation::Kind::close:
      break;
    case Operation::Kind::rename:
      st = do_rename(op.path, op.to, op.number);
      break;
    case Operation::Kind::remove:
      st = do_remove(op.path, op.number);
      break;
    case Operation::Kind::sync_dir:
      st = do_sync_dir(op.path);
      break;
    case Operation::Kind::mkdir:
      st = do_create_dir(op.path, op.number);
      break;
  }
  COWSTATE_ASSERT(st.ok(), "REQUIRES", "a recorded operation succeeds again");
}

std::uint64_t SimulatedFileSystem::visit_crash_states(
    std::size_t prefix_len, std::uint64_t limit,
    const std::function<void(const CrashState&)>& visit) const {
  std::uint64_t visited = 0;
  ExhaustiveChoices choices;
  while (visited < limit) {
    Disk crashed = disk_;
    (void)lose_power(crashed, choices, PowerLossOptions{false});
    if (visit) visit(CrashState{prefix_len, image_of(crashed, true)});
    ++visited;
    if (!choices.next()) break;
  }
  return visited;
}

std::uint64_t SimulatedFileSystem::for_each_crash_state(
    std::uint64_t limit, const std::function<void(const CrashState&)>& visit) const {
  SimulatedFileSystem replayer;
  replayer.disk_ = history_base_;
  std::map<std::uint64_t, std::uint64_t> file_inodes;
  std::uint64_t visited = 0;
  for (std::size_t k = 0; k <= history_.size() && visited < limit; ++k) {
    if (k > 0) replayer.replay(history_[k - 1], file_inodes);
    visited += replayer.visit_crash_states(k, limit - visited, visit);
  }
  return visited;
}

std::uint64_t SimulatedFileSystem::crash_state_count(std::size_t prefix_len,
                                                     std::uint64_t limit) const {
  COWSTATE_ASSERT(prefix_len <= history_.size(), "REQUIRES", "a prefix of the history");
  SimulatedFileSystem replayer;
  replayer.disk_ = history_base_;
  std::map<std::uint64_t, std::uint64_t> file_inodes;
  for (std::size_t k = 0; k < prefix_len; ++k) replayer.replay(history_[k], file_inodes);
  return replayer.visit_crash_states(prefix_len, limit, nullptr);
}

}  // namespace cowstate
