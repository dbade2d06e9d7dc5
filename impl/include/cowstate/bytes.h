// ByteWriter and ByteReader: little-endian fixed-width integers and raw bytes, the building
// blocks of every cowstate file format (snapshot files, checkpoints).
//
// Encoding: every integer is stored in little-endian byte order in exactly its width
// (u8 1, u16 2, u32 4, u64/i64 8, i32 4 bytes; signed values in two's complement). Values
// are moved with memcpy, never through a cast pointer, so unaligned positions are fine.
//
// ByteWriter appends to a std::vector<std::byte> that it owns. It keeps the vector's size()
// ahead of what was written (slack, zero-filled), so an append is one compare and one
// memcpy; trim() drops the slack. A caller that knows how much it is about to write calls
// ensure(n) once, after which the next n bytes of appends never grow the vector.
//
// ByteReader reads from a span it does not own. Every read is bounds-checked and returns a
// Status; a failed read leaves the position unchanged and its message names the absolute
// offset, what was expected and what was found:
//   "offset 1234: expected 8 bytes for int64 state, found 3".
// `set_field("state")` names the part of a record being read, appended to each `what`.
// `set_limit(end)` makes bytes from `end` on invisible (e.g. a trailer), while offsets stay
// absolute in the whole input.
//
// Thread safety: none; one object per thread.
#pragma once

#include <algorithm>
#include <bit>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cowstate/assert.h"
#include "cowstate/status.h"

namespace cowstate {

static_assert(std::endian::native == std::endian::little || std::endian::native == std::endian::big,
              "mixed-endian platforms are not supported");

namespace detail {
template <class U>
constexpr U byteswap_if_big(U v) noexcept {
  if constexpr (std::endian::native == std::endian::big && sizeof(U) > 1) {
    U r = 0;
    for (std::size_t i = 0; i < sizeof(U); ++i) {
      r = static_cast<U>((r << 8) | (v & 0xff));
      v = static_cast<U>(v >> 8);
    }
    return r;
  } else {
    return v;
  }
}

template <class U>
inline void store_le(std::byte* p, U v) noexcept {
  v = byteswap_if_big(v);
  std::memcpy(p, &v, sizeof(U));
}

template <class U>
inline U load_le(const std::byte* p) noexcept {
  U v;
  std::memcpy(&v, p, sizeof(U));
  return byteswap_if_big(v);
}

// For error messages: a u64 as 0x + 16 hex digits (checksums).
inline std::string hex64(std::uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%016" PRIx64, v);
  return buf;
}

// For error messages: printable ASCII as is, everything else as \xNN, in double quotes.
inline std::string quoted(std::span<const std::byte> bytes) {
  std::string s = "\"";
  for (std::byte b : bytes) {
    const auto c = static_cast<unsigned char>(b);
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      s += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      s += buf;
    }
  }
  return s + "\"";
}
}  // namespace detail

class ByteWriter {
 public:
  ByteWriter() = default;
  ByteWriter(ByteWriter&& o) noexcept
      : buf_(std::move(o.buf_)),
        cur_(std::exchange(o.cur_, nullptr)),
        lim_(std::exchange(o.lim_, nullptr)) {
    o.buf_.clear();
  }
  ByteWriter& operator=(ByteWriter&& o) noexcept {
    if (this != &o) {
      buf_ = std::move(o.buf_);
      o.buf_.clear();
      cur_ = std::exchange(o.cur_, nullptr);
      lim_ = std::exchange(o.lim_, nullptr);
    }
    return *this;
  }
  ByteWriter(const ByteWriter&) = delete;
  ByteWriter& operator=(const ByteWriter&) = delete;
  ~ByteWriter() = default;

  // Bytes written so far (excludes slack).
  std::size_t size() const noexcept { return static_cast<std::size_t>(cur_ - buf_.data()); }
  // The written bytes; valid until the next append.
  std::span<const std::byte> written() const noexcept { return {buf_.data(), size()}; }

  // Capacity hint for the final size; allocates, does not zero-fill.
  void reserve(std::size_t total_bytes) {
    const std::size_t pos = size();
    buf_.reserve(total_bytes);
    rebase(pos);
  }
  // Makes room for `n` more bytes, so the next n bytes of appends do not grow the vector.
  void ensure(std::size_t n) {
    if (room() < n) resize_to(size() + n);
  }
  // Direct writing, for a caller that stores a batch of fixed-size records itself rather
  // than append by append: room for `n` bytes at the write position. The bytes count as
  // written only once commit(end) moves the write position to `end`.
  // REQUIRES: no other append before the matching commit().
  std::byte* begin_direct(std::size_t n) {
    ensure(n);
    return cur_;
  }
  // REQUIRES: `end` lies in [write position, write position + n] of the last begin_direct(n).
  void commit(std::byte* end) noexcept {
    COWSTATE_ASSERT(end >= cur_ && end <= lim_, "REQUIRES", "ByteWriter::commit out of range");
    cur_ = end;
  }
  // Drops the slack: afterwards vector().size() == size(). Keeps the capacity.
  void trim() { resize_to(size()); }

  // REQUIRES: trim() since the last append.
  const std::vector<std::byte>& vector() const noexcept {
    COWSTATE_ASSERT(buf_.size() == size(), "REQUIRES", "ByteWriter::vector() without trim()");
    return buf_;
  }
  // Forgets the written bytes but keeps the memory: the next append starts at offset 0.
  void clear() noexcept { cur_ = buf_.data(); }
  // Moves the written bytes out (trimmed) and leaves the writer empty.
  std::vector<std::byte> take() {
    trim();
    std::vector<std::byte> out = std::move(buf_);
    buf_.clear();
    cur_ = lim_ = nullptr;
    return out;
  }

  void put_u8(std::uint8_t v) { put(v); }
  void put_u16(std::uint16_t v) { put(v); }
  void put_u32(std::uint32_t v) { put(v); }
  void put_u64(std::uint64_t v) { put(v); }
  void put_i32(std::int32_t v) { put(static_cast<std::uint32_t>(v)); }
  void put_i64(std::int64_t v) { put(static_cast<std::uint64_t>(v)); }
  void put_bytes(std::span<const std::byte> bytes) {
    if (bytes.empty()) return;  // memcpy from a null data() is UB
    std::memcpy(append(bytes.size()), bytes.data(), bytes.size());
  }

  // Overwrites an already written u32 at `offset` (for fields known only later).
  // REQUIRES: offset + 4 <= size().
  void patch_u32(std::size_t offset, std::uint32_t v) noexcept {
    COWSTATE_ASSERT(offset + 4 <= size(), "REQUIRES", "patch_u32 past the written bytes");
    detail::store_le(buf_.data() + offset, v);
  }
  // Forgets the bytes written from `offset` on: the next append goes there.
  // REQUIRES: offset <= size().
  void truncate(std::size_t offset) noexcept {
    COWSTATE_ASSERT(offset <= size(), "REQUIRES", "truncate past the written bytes");
    cur_ = buf_.data() + offset;
  }
  // Overwrites an already written u64 at `offset` (for fields known only later).
  // REQUIRES: offset + 8 <= size().
  void patch_u64(std::size_t offset, std::uint64_t v) noexcept {
    COWSTATE_ASSERT(offset + 8 <= size(), "REQUIRES", "patch_u64 past the written bytes");
    detail::store_le(buf_.data() + offset, v);
  }

 private:
  template <class U>
  void put(U v) {
    detail::store_le(append(sizeof(U)), v);
  }
  std::size_t room() const noexcept { return static_cast<std::size_t>(lim_ - cur_); }
  // Room for n bytes at the write position; advances it. Two pointers rather than the
  // vector's size and an index: the common case is one compare, one store, one add.
  std::byte* append(std::size_t n) {
    if (room() < n) [[unlikely]]
      grow(n);
    std::byte* p = cur_;
    cur_ += n;
    return p;
  }
  // Grows the slack: up to the current capacity when that is near (zero-filling at most
  // kSlackMax bytes ahead, so trim() + append per step stays linear), else geometrically
  // through vector's own reallocation.
  void grow(std::size_t n) {
    const std::size_t pos = size();
    const std::size_t room_to_capacity = std::min(buf_.capacity(), pos + std::max(n, kSlackMax));
    resize_to(std::max(pos + n, room_to_capacity));
    COWSTATE_ASSERT(room() >= n, "REQUIRES", "ByteWriter failed to grow");
  }
  void resize_to(std::size_t new_size) {
    const std::size_t pos = size();
    buf_.resize(new_size);
    rebase(pos);
  }
  // Re-points cur_/lim_ after the vector may have moved.
  void rebase(std::size_t pos) noexcept {
    cur_ = buf_.data() + pos;
    lim_ = buf_.data() + buf_.size();
  }

  static constexpr std::size_t kSlackMax = 4096;
  std::vector<std::byte> buf_;  // [data, cur_) written, [cur_, lim_ = data + size()) slack
  std::byte* cur_ = nullptr;
  std::byte* lim_ = nullptr;
};

class ByteReader {
 public:
  explicit ByteReader(std::span<const std::byte> bytes) noexcept
      : data_(bytes.data()), end_(bytes.size()), size_(bytes.size()) {}

  // Absolute offset of the next byte in the whole input.
  std::size_t offset() const noexcept { return pos_; }
  // Bytes readable before the limit.
  std::size_t remaining() const noexcept { return end_ - pos_; }
  bool at_end() const noexcept { return pos_ == end_; }

  // Reads stop at `end` (absolute). REQUIRES: offset() <= end <= input size.
  void set_limit(std::size_t end) noexcept {
    COWSTATE_ASSERT(pos_ <= end && end <= size_, "REQUIRES", "ByteReader limit out of range");
    end_ = end;
  }
  // REQUIRES: offset <= limit.
  void seek(std::size_t offset) noexcept {
    COWSTATE_ASSERT(offset <= end_, "REQUIRES", "ByteReader seek past the limit");
    pos_ = offset;
  }
  // Names the record part being read ("key", "state"); appended to `what` in messages.
  // `field` must outlive the reads (a string literal).
  void set_field(const char* field) noexcept { field_ = field; }
  const char* field() const noexcept { return field_; }

  // Each read: `what` names the value ("int64", "magic"); on failure nothing is consumed.
  Status read_u8(std::uint8_t& v, const char* what) { return get(v, what); }
  Status read_u16(std::uint16_t& v, const char* what) { return get(v, what); }
  Status read_u32(std::uint32_t& v, const char* what) { return get(v, what); }
  Status read_u64(std::uint64_t& v, const char* what) { return get(v, what); }
  Status read_i32(std::int32_t& v, const char* what) {
    std::uint32_t u = 0;
    Status s = get(u, what);
    v = static_cast<std::int32_t>(u);  // two's complement, defined since C++20
    return s;
  }
  Status read_i64(std::int64_t& v, const char* what) {
    std::uint64_t u = 0;
    Status s = get(u, what);
    v = static_cast<std::int64_t>(u);
    return s;
  }
  // The next n bytes, without copying; valid as long as the input.
  Status read_bytes(std::size_t n, std::span<const std::byte>& out, const char* what) {
    const std::byte* p = take(n);
    if (p == nullptr) [[unlikely]]
      return short_read(n, what);
    out = std::span<const std::byte>(p, n);
    return Status();
  }

  // The next n bytes, consumed, if that many remain; else nullptr and nothing consumed
  // (the caller then reads field by field, which names what is missing).
  const std::byte* take(std::size_t n) noexcept {
    if (remaining() < n) [[unlikely]]
      return nullptr;
    const std::byte* p = data_ + pos_;
    pos_ += n;
    return p;
  }

  // "offset <at>: <message>" (the field is not added).
  Status error_at(std::size_t at, const std::string& message) const;
  // A length or count field at `at` that announced more items of `unit_bytes` each than
  // the remaining input can hold: "offset <at>: expected <what> <field> of at most <max>
  // (<remaining> bytes remain), found <length>".
  Status length_error(std::size_t at, const char* what, std::uint64_t length,
                      std::size_t unit_bytes) const;

 private:
  template <class U>
  Status get(U& v, const char* what) {
    const std::byte* p = take(sizeof(U));
    if (p == nullptr) [[unlikely]]
      return short_read(sizeof(U), what);
    v = detail::load_le<U>(p);
    return Status();
  }
  [[gnu::cold]] Status short_read(std::size_t n, const char* what) const;
  std::string describe(const char* what) const;

  const std::byte* data_;
  std::size_t pos_ = 0;
  std::size_t end_;   // limit; <= size_
  std::size_t size_;  // whole input
  const char* field_ = nullptr;
};

inline std::string ByteReader::describe(const char* what) const {
  std::string s = what;
  if (field_ != nullptr && *field_ != '\0') {
    s += ' ';
    s += field_;
  }
  return s;
}

inline Status ByteReader::error_at(std::size_t at, const std::string& message) const {
  return Status::error("offset " + std::to_string(at) + ": " + message);
}

inline Status ByteReader::short_read(std::size_t n, const char* what) const {
  return error_at(pos_, "expected " + std::to_string(n) + (n == 1 ? " byte" : " bytes") + " for " +
                            describe(what) + ", found " + std::to_string(remaining()));
}

inline Status ByteReader::length_error(std::size_t at, const char* what, std::uint64_t length,
                                       std::size_t unit_bytes) const {
  COWSTATE_ASSERT(unit_bytes > 0, "REQUIRES", "length_error with a zero unit");
  return error_at(at, "expected " + describe(what) + " of at most " +
                          std::to_string(remaining() / unit_bytes) + " (" +
                          std::to_string(remaining()) + " bytes remain), found " +
                          std::to_string(length));
}

}  // namespace cowstate
