// A WritableFile into memory for tests of make_async_writable_file: it records every
// append as it came, can fail a chosen append or sync, and can be slowed down so that the
// caller of an async file has to wait for buffers.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "cowstate/checkpoint_storage.h"

namespace memory_file {

struct Record {
  std::vector<std::vector<std::byte>> appends;  // each append's bytes, in order
  std::vector<std::size_t> synced_at;           // bytes appended when each sync came
  std::uint64_t fail_append = 0;                // this append (from 1) fails; 0: none
  std::uint64_t fail_sync = 0;                  // this sync (from 1) fails; 0: none
  bool slow = false;                            // yield the thread in every append
  const std::atomic<bool>* gate = nullptr;      // when set, appends wait until it is true
  std::uint64_t append_calls = 0;               // appends tried, the failing one included
  std::uint64_t sync_calls = 0;                 // syncs tried, the failing one included
  bool closed = false;                          // close() was called
  bool destroyed = false;  // the file object is gone (closed silently if not before)

  // Whether the chosen failure happened.
  bool failed() const {
    return (fail_append != 0 && append_calls >= fail_append) ||
           (fail_sync != 0 && sync_calls >= fail_sync);
  }

  std::vector<std::byte> bytes() const {
    std::vector<std::byte> all;
    for (const auto& a : appends) all.insert(all.end(), a.begin(), a.end());
    return all;
  }
};

// Writes into `record`, which outlives it.
class MemoryFile final : public cowstate::WritableFile {
 public:
  explicit MemoryFile(Record* record) : r_(record) {}
  ~MemoryFile() override { r_->destroyed = true; }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;
  cowstate::Status append(std::span<const std::byte> bytes) override {
    if (r_->slow) std::this_thread::yield();
    while (r_->gate != nullptr && !r_->gate->load(std::memory_order_acquire)) {
      std::this_thread::yield();
    }
    if (++r_->append_calls == r_->fail_append) {
      return cowstate::Status::error("write memory file: failed append " +
                                     std::to_string(r_->append_calls));
    }
    r_->appends.emplace_back(bytes.begin(), bytes.end());
    return cowstate::Status();
  }
  cowstate::Status sync() override {
    if (++r_->sync_calls == r_->fail_sync)
      return cowstate::Status::error("fsync memory file: failed");
    std::size_t n = 0;
    for (const auto& a : r_->appends) n += a.size();
    r_->synced_at.push_back(n);
    return cowstate::Status();
  }
  cowstate::Status close() override {
    r_->closed = true;
    return cowstate::Status();
  }

 private:
  Record* r_;
};

}  // namespace memory_file
