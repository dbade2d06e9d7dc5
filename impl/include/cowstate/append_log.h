// AppendLog<T>: a growable array of small, trivially copyable records, for the map's
// retirement records.
//
// An append that finds room is a compare, a store and an add. Growing is a separate,
// out-of-line call, so a hot path can check has_room() once and append_unchecked() without
// carrying std::vector::push_back's reallocation code (and the registers it needs) along.
//
// Thread safety: none; the owner's thread only.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <type_traits>

#include "cowstate/assert.h"

namespace cowstate {

template <class T>
class AppendLog {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>,
                "records are copied and dropped bytewise");

 public:
  AppendLog() = default;
  AppendLog(const AppendLog&) = delete;
  AppendLog& operator=(const AppendLog&) = delete;

  bool has_room() const noexcept { return end_ != cap_; }
  // REQUIRES: has_room().
  void append_unchecked(const T& record) noexcept { *end_++ = record; }
  void append(const T& record) {
    if (!has_room()) [[unlikely]]
      grow();
    append_unchecked(record);
  }
  // Makes room for at least one more record (doubling).
  [[gnu::noinline]] void grow() {
    const std::size_t size = this->size();
    const std::size_t capacity = std::max<std::size_t>(64, 2 * this->capacity());
    std::unique_ptr<T[]> data(new T[capacity]);
    if (size > 0) std::memcpy(data.get(), data_.get(), size * sizeof(T));
    data_ = std::move(data);
    end_ = data_.get() + size;
    cap_ = data_.get() + capacity;
  }

  std::size_t size() const noexcept { return static_cast<std::size_t>(end_ - data_.get()); }
  bool empty() const noexcept { return end_ == data_.get(); }
  std::size_t capacity() const noexcept { return static_cast<std::size_t>(cap_ - data_.get()); }
  T& operator[](std::size_t i) noexcept { return data_[i]; }
  const T& operator[](std::size_t i) const noexcept { return data_[i]; }
  const T* begin() const noexcept { return data_.get(); }
  const T* end() const noexcept { return end_; }
  // Keeps the first `n` records. REQUIRES: n <= size().
  void truncate(std::size_t n) noexcept {
    COWSTATE_ASSERT(n <= size(), "REQUIRES", "AppendLog::truncate beyond the size");
    end_ = data_.get() + n;
  }

 private:
  std::unique_ptr<T[]> data_;
  // One past the last record, and one past the room: pointers rather than counts, so that
  // an append stores through end_ and bumps it, with no index to scale by sizeof(T).
  T* end_ = nullptr;
  T* cap_ = nullptr;
};

}  // namespace cowstate
