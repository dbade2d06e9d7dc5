// Serializers: how one key, namespace or state value becomes bytes and back.
//
// A serializer is a stateless struct (concept `Serializer<S, T>` below):
//   static constexpr std::uint16_t id;          stored in file headers; a reader refuses a
//                                                file written with another id. Ids are part
//                                                of the format: never reuse or renumber one.
//   static constexpr const char* name;          for messages ("int64")
//   static constexpr std::size_t fixed_size;    bytes per value, or 0 if the size varies
//   static constexpr std::size_t min_size;      fewest bytes a value can take (optional;
//                                                defaults to fixed_size)
//   static void write(ByteWriter&, const T&);
//   static Status read(ByteReader&, T&);       never crashes on any input; an error names
//                                                the offset, what was expected and found
//   static std::byte* store(std::byte* p, const T&);  optional, fixed-size only: the same
//                                                fixed_size bytes as write(), at p, without a
//                                                bounds check; returns p + fixed_size. Lets a
//                                                writer of fixed-size records fill a buffer
//                                                it made room in once (ByteWriter::begin_direct).
//   static std::size_t stored_size(const T&);  optional, with store(), for a serializer
//                                                whose size varies: the bytes write() would
//                                                append, so a writer can make room for one
//                                                record and store it directly
//   static const std::byte* load(const std::byte* p, T&);  optional, fixed-size only: the
//                                                inverse of store, for a reader that checked
//                                                once that the bytes are there
//                                                (ByteReader::take); returns p + fixed_size.
//
// Wire layouts (all integers little-endian, cowstate/bytes.h):
//   id  name           T                          bytes
//   1   int64          std::int64_t               8, two's complement
//   2   uint64         std::uint64_t              8
//   3   int32          std::int32_t               4, two's complement
//   4   string         std::string                u32 length n, then n raw bytes
//   5   vector<int64>  std::vector<std::int64_t>  u32 count n, then n x 8 bytes (int64)
//   6   void           VoidNamespace              0 bytes (the namespace of un-windowed state)
//   7   list           std::vector<E>             u32 count n, then n elements (ListSerializer<ES>)
//   8   map            std::map<UK, UV>           u32 count n, then n (key, value) pairs in
//                                                 ascending key order (MapSerializer<UKS, UVS>)
//   9   ttl            TtlValue<V>                i64 last-access time, then the value
//                                                 (TtlValueSerializer<VS>, cowstate/ttl.h;
//                                                 never in a file header: a TTL flag is)
//
// The composite serializers (7, 8) record only their own id; files that use them record the
// element serializers' ids next to it (docs/checkpoint-format.md).
//
// A length or count is checked against the bytes remaining BEFORE anything is allocated,
// so a corrupt or hostile length field costs nothing.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "cowstate/assert.h"
#include "cowstate/bytes.h"
#include "cowstate/status.h"

namespace cowstate {

template <class S, class T>
concept Serializer = requires(ByteWriter& w, ByteReader& r, const T& in, T& out) {
  { S::id } -> std::convertible_to<std::uint16_t>;
  { S::name } -> std::convertible_to<const char*>;
  { S::fixed_size } -> std::convertible_to<std::size_t>;
  { S::write(w, in) } -> std::same_as<void>;
  { S::read(r, out) } -> std::same_as<Status>;
};

// S stores values straight into memory (the optional `store` above).
template <class S, class T>
concept DirectSerializer = Serializer<S, T> && requires(std::byte* p, const T& in) {
  { S::store(p, in) } -> std::same_as<std::byte*>;
};

// S loads fixed-size values straight from memory (the optional `load` above).
template <class S, class T>
concept DirectLoader = Serializer<S, T> && requires(const std::byte* p, T& out) {
  { S::load(p, out) } -> std::same_as<const std::byte*>;
};

// S stores variable-size values straight into memory once told their size (the optional
// `stored_size` and `store` above).
template <class S, class T>
concept SizedDirectSerializer = Serializer<S, T> && requires(std::byte* p, const T& in) {
  { S::stored_size(in) } -> std::same_as<std::size_t>;
  { S::store(p, in) } -> std::same_as<std::byte*>;
};

// A record's key, namespace and state serializers all store directly.
template <class KS, class K, class NS, class N, class SS, class S>
concept DirectRecord =
    DirectSerializer<KS, K> && DirectSerializer<NS, N> && DirectSerializer<SS, S>;

// The first byte of a delta record (docs/checkpoint-format.md): a removal of the key and
// namespace that follow, or a put whose state follows them. Stored in checkpoints: never
// renumber.
enum class DeltaRecordKind : std::uint8_t { remove = 0, put = 1 };

// Reads a delta record's kind; an error at its offset when the byte is neither kind.
inline Status read_delta_record_kind(ByteReader& r, DeltaRecordKind& kind) {
  const std::size_t at = r.offset();
  std::uint8_t byte = 0;
  if (Status st = r.read_u8(byte, "delta record kind"); !st.ok()) return st;
  if (byte > static_cast<std::uint8_t>(DeltaRecordKind::put)) {
    return r.error_at(
        at, "expected a delta record kind 0 (remove) or 1 (put), found " + std::to_string(byte));
  }
  kind = static_cast<DeltaRecordKind>(byte);
  return Status();
}

// Fewest bytes a value of serializer S takes: S::min_size if declared, else S::fixed_size.
template <class S>
constexpr std::size_t serializer_min_size() noexcept {
  if constexpr (requires { S::min_size; }) {
    return S::min_size;
  } else {
    return S::fixed_size;
  }
}

namespace detail {
// Bytes per value when a serializer's size never varies (0 for VoidNamespace), else
// SIZE_MAX.
template <class S>
constexpr std::size_t fixed_width() noexcept {
  if constexpr (S::fixed_size > 0) {
    return S::fixed_size;
  } else if constexpr (serializer_min_size<S>() == 0) {
    return 0;  // a serializer that writes nothing (VoidNamespaceSerializer)
  } else {
    return std::numeric_limits<std::size_t>::max();
  }
}
}  // namespace detail

// Bytes of every record of (KS, NS, SS) when each part loads directly at a fixed width, else
// 0: then records are read one by one through read_record.
template <class KS, class NS, class SS, class K, class N, class S>
constexpr std::size_t fixed_record_width() noexcept {
  constexpr std::size_t kVaries = std::numeric_limits<std::size_t>::max();
  constexpr std::size_t kKey = detail::fixed_width<KS>();
  constexpr std::size_t kNs = detail::fixed_width<NS>();
  constexpr std::size_t kState = detail::fixed_width<SS>();
  if constexpr (kKey == kVaries || kNs == kVaries || kState == kVaries || !DirectLoader<KS, K> ||
                !DirectLoader<NS, N> || !DirectLoader<SS, S>) {
    return 0;
  } else {
    return kKey + kNs + kState;
  }
}

// Reads one record, key then namespace then state, as restore does. Where the key's and the
// namespace's serializers load directly at fixed widths, that part (and the state, where it
// qualifies too) comes after one bounds check; otherwise, and when the bytes are short, field
// by field, so that an error names the field that is missing.
template <class KS, class NS, class SS, class K, class N, class S>
Status read_record(ByteReader& r, K& key, N& ns, S& state) {
  constexpr std::size_t kVaries = std::numeric_limits<std::size_t>::max();
  constexpr std::size_t kKeyWidth = detail::fixed_width<KS>();
  constexpr std::size_t kNsWidth = detail::fixed_width<NS>();
  constexpr std::size_t kStateWidth = detail::fixed_width<SS>();
  constexpr bool kPrefix =
      kKeyWidth != kVaries && kNsWidth != kVaries && DirectLoader<KS, K> && DirectLoader<NS, N>;
  constexpr bool kWithState = kPrefix && kStateWidth != kVaries && DirectLoader<SS, S>;
  const std::byte* p = nullptr;
  if constexpr (kPrefix) {
    p = r.take(kKeyWidth + kNsWidth + (kWithState ? kStateWidth : 0));
    if (p != nullptr) {
      p = KS::load(p, key);
      p = NS::load(p, ns);
      if constexpr (kWithState) SS::load(p, state);
    }
  }
  if (p == nullptr) {
    r.set_field("key");
    if (Status st = KS::read(r, key); !st.ok()) return st;
    r.set_field("namespace");
    if (Status st = NS::read(r, ns); !st.ok()) return st;
  }
  if (p == nullptr || !kWithState) {
    r.set_field("state");
    if (Status st = SS::read(r, state); !st.ok()) return st;
  }
  r.set_field(nullptr);
  return Status();
}

namespace detail {
inline constexpr char kInt64Name[] = "int64";
inline constexpr char kUInt64Name[] = "uint64";
inline constexpr char kInt32Name[] = "int32";

// A 32- or 64-bit integer as its little-endian bytes (two's complement when signed).
template <class T, std::uint16_t Id, const char* Name>
struct FixedIntSerializer {
  static_assert(std::is_integral_v<T> && (sizeof(T) == 4 || sizeof(T) == 8));
  using value_type = T;
  using Bits = std::make_unsigned_t<T>;
  static constexpr std::uint16_t id = Id;
  static constexpr const char* name = Name;
  static constexpr std::size_t fixed_size = sizeof(T);
  static constexpr std::size_t min_size = sizeof(T);
  static void write(ByteWriter& w, const T& v) {
    if constexpr (sizeof(T) == 8) {
      w.put_u64(static_cast<Bits>(v));
    } else {
      w.put_u32(static_cast<Bits>(v));
    }
  }
  static std::byte* store(std::byte* p, const T& v) noexcept {
    store_le(p, static_cast<Bits>(v));
    return p + fixed_size;
  }
  static const std::byte* load(const std::byte* p, T& v) noexcept {
    v = static_cast<T>(detail::load_le<Bits>(p));
    return p + fixed_size;
  }
  static Status read(ByteReader& r, T& v) {
    Bits u = 0;
    Status s;
    if constexpr (sizeof(T) == 8) {
      s = r.read_u64(u, name);
    } else {
      s = r.read_u32(u, name);
    }
    v = static_cast<T>(u);  // two's complement, defined since C++20
    return s;
  }
};
}  // namespace detail

using Int64Serializer = detail::FixedIntSerializer<std::int64_t, 1, detail::kInt64Name>;
using UInt64Serializer = detail::FixedIntSerializer<std::uint64_t, 2, detail::kUInt64Name>;
using Int32Serializer = detail::FixedIntSerializer<std::int32_t, 3, detail::kInt32Name>;

struct StringSerializer {
  using value_type = std::string;
  static constexpr std::uint16_t id = 4;
  static constexpr const char* name = "string";
  static constexpr std::size_t fixed_size = 0;
  static constexpr std::size_t min_size = 4;
  // REQUIRES: s.size() < 2^32.
  static void write(ByteWriter& w, const std::string& s) {
    w.commit(store(w.begin_direct(stored_size(s)), s));
  }
  static std::size_t stored_size(const std::string& s) noexcept { return 4 + s.size(); }
  // REQUIRES: s.size() < 2^32; stored_size(s) bytes of room at p.
  static std::byte* store(std::byte* p, const std::string& s) noexcept {
    COWSTATE_ASSERT(s.size() <= std::numeric_limits<std::uint32_t>::max(), "REQUIRES",
                    "string longer than 2^32-1 bytes");
    detail::store_le(p, static_cast<std::uint32_t>(s.size()));
    if (!s.empty()) std::memcpy(p + 4, s.data(), s.size());
    return p + 4 + s.size();
  }
  static Status read(ByteReader& r, std::string& s) {
    const std::size_t at = r.offset();
    std::uint32_t n = 0;
    if (Status st = r.read_u32(n, "length of string"); !st.ok()) return st;
    if (n > r.remaining()) {  // before allocating anything
      Status err = r.length_error(at, "length of string", n, 1);
      r.seek(at);  // a failed read consumes nothing
      return err;
    }
    std::span<const std::byte> bytes;
    Status st = r.read_bytes(n, bytes, name);
    COWSTATE_ASSERT(st.ok(), "REQUIRES", "string bytes checked above");
    const char* chars = reinterpret_cast<const char*>(bytes.data());
    if (n > s.capacity()) {
      s = std::string(chars, n);  // constructing takes fewer steps than assign's general replace
    } else {
      s.assign(chars, n);
    }
    return Status();
  }
};

struct VectorInt64Serializer {
  using value_type = std::vector<std::int64_t>;
  static constexpr std::uint16_t id = 5;
  static constexpr const char* name = "vector<int64>";
  static constexpr std::size_t fixed_size = 0;
  static constexpr std::size_t min_size = 4;
  // REQUIRES: v.size() < 2^32.
  static void write(ByteWriter& w, const std::vector<std::int64_t>& v) {
    COWSTATE_ASSERT(v.size() <= std::numeric_limits<std::uint32_t>::max(), "REQUIRES",
                    "vector longer than 2^32-1 elements");
    w.put_u32(static_cast<std::uint32_t>(v.size()));
    if constexpr (std::endian::native == std::endian::little) {
      w.put_bytes(std::as_bytes(std::span<const std::int64_t>(v)));
    } else {
      for (std::int64_t x : v) w.put_i64(x);
    }
  }
  static Status read(ByteReader& r, std::vector<std::int64_t>& v) {
    const std::size_t at = r.offset();
    std::uint32_t n = 0;
    if (Status st = r.read_u32(n, "count of vector<int64>"); !st.ok()) return st;
    if (n > r.remaining() / 8) {  // before allocating anything
      Status err = r.length_error(at, "count of vector<int64>", n, 8);
      r.seek(at);
      return err;
    }
    std::span<const std::byte> bytes;
    Status st = r.read_bytes(std::size_t{n} * 8, bytes, name);
    COWSTATE_ASSERT(st.ok(), "REQUIRES", "vector bytes checked above");
    v.resize(n);
    if constexpr (std::endian::native == std::endian::little) {
      if (n != 0) std::memcpy(v.data(), bytes.data(), bytes.size());
    } else {
      for (std::size_t i = 0; i < n; ++i)
        v[i] = detail::load_le<std::int64_t>(bytes.data() + 8 * i);
    }
    return Status();
  }
};

// The namespace of state that is not scoped by a window: one value, serialized as nothing.
struct VoidNamespace {
  friend constexpr bool operator==(VoidNamespace, VoidNamespace) noexcept { return true; }
  friend constexpr bool operator<(VoidNamespace, VoidNamespace) noexcept { return false; }
};

struct VoidNamespaceSerializer {
  using value_type = VoidNamespace;
  static constexpr std::uint16_t id = 6;
  static constexpr const char* name = "void";
  static constexpr std::size_t fixed_size = 0;  // 0 bytes, but always 0: see min_size
  static constexpr std::size_t min_size = 0;
  static void write(ByteWriter&, const VoidNamespace&) {}
  static std::byte* store(std::byte* p, const VoidNamespace&) noexcept { return p; }
  static const std::byte* load(const std::byte* p, VoidNamespace&) noexcept { return p; }
  static Status read(ByteReader&, VoidNamespace&) { return Status(); }
};

// std::vector<E> as u32 count + elements.
// REQUIRES (static): elements take at least one byte, so a count is bounded by the input.
template <class ES>
struct ListSerializer {
  using element_type = typename ES::value_type;
  using value_type = std::vector<element_type>;
  static constexpr std::uint16_t id = 7;
  static constexpr const char* name = "list";
  static constexpr std::size_t fixed_size = 0;
  static constexpr std::size_t min_size = 4;
  static constexpr std::size_t kElementMin = serializer_min_size<ES>();
  static_assert(kElementMin > 0, "list elements must take at least one byte");

  static void write(ByteWriter& w, const value_type& v) {
    COWSTATE_ASSERT(v.size() <= std::numeric_limits<std::uint32_t>::max(), "REQUIRES",
                    "list longer than 2^32-1 elements");
    w.put_u32(static_cast<std::uint32_t>(v.size()));
    for (const element_type& e : v) ES::write(w, e);
  }
  static Status read(ByteReader& r, value_type& v) {
    const std::size_t at = r.offset();
    std::uint32_t n = 0;
    if (Status st = r.read_u32(n, "count of list"); !st.ok()) return st;
    if (n > r.remaining() / kElementMin) {  // before allocating anything
      Status err = r.length_error(at, "count of list", n, kElementMin);
      r.seek(at);
      return err;
    }
    v.clear();
    v.reserve(n);
    for (std::uint32_t i = 0; i < n; ++i) {
      element_type e{};
      if (Status st = ES::read(r, e); !st.ok()) return st;
      v.push_back(std::move(e));
    }
    return Status();
  }
};

// std::map<UK, UV> as u32 count + (key, value) pairs in ascending key order. The reader
// refuses keys that are not strictly ascending (a duplicate or reordered key is corruption).
template <class UKS, class UVS>
struct MapSerializer {
  using key_type = typename UKS::value_type;
  using mapped_type = typename UVS::value_type;
  using value_type = std::map<key_type, mapped_type>;
  static constexpr std::uint16_t id = 8;
  static constexpr const char* name = "map";
  static constexpr std::size_t fixed_size = 0;
  static constexpr std::size_t min_size = 4;
  static constexpr std::size_t kPairMin = serializer_min_size<UKS>() + serializer_min_size<UVS>();
  static_assert(kPairMin > 0, "map entries must take at least one byte");

  static void write(ByteWriter& w, const value_type& m) {
    COWSTATE_ASSERT(m.size() <= std::numeric_limits<std::uint32_t>::max(), "REQUIRES",
                    "map larger than 2^32-1 entries");
    w.put_u32(static_cast<std::uint32_t>(m.size()));
    for (const auto& [k, v] : m) {
      UKS::write(w, k);
      UVS::write(w, v);
    }
  }
  static Status read(ByteReader& r, value_type& m) {
    const std::size_t at = r.offset();
    std::uint32_t n = 0;
    if (Status st = r.read_u32(n, "count of map"); !st.ok()) return st;
    if (n > r.remaining() / kPairMin) {
      Status err = r.length_error(at, "count of map", n, kPairMin);
      r.seek(at);
      return err;
    }
    m.clear();
    for (std::uint32_t i = 0; i < n; ++i) {
      const std::size_t key_at = r.offset();
      key_type k{};
      mapped_type v{};
      if (Status st = UKS::read(r, k); !st.ok()) return st;
      if (Status st = UVS::read(r, v); !st.ok()) return st;
      if (!m.empty() && !(std::prev(m.end())->first < k)) {
        return r.error_at(key_at, "expected map keys in strictly ascending order, found key " +
                                      std::to_string(i + 1) + " of " + std::to_string(n) +
                                      " not above its predecessor");
      }
      m.emplace_hint(m.end(), std::move(k), std::move(v));
    }
    return Status();
  }
};

// The name of a built-in serializer id, or "unknown" (for messages about foreign files).
inline const char* serializer_name(std::uint16_t id) noexcept {
  switch (id) {
    case Int64Serializer::id:
      return Int64Serializer::name;
    case UInt64Serializer::id:
      return UInt64Serializer::name;
    case Int32Serializer::id:
      return Int32Serializer::name;
    case StringSerializer::id:
      return StringSerializer::name;
    case VectorInt64Serializer::id:
      return VectorInt64Serializer::name;
    case VoidNamespaceSerializer::id:
      return VoidNamespaceSerializer::name;
    case 7:
      return "list";
    case 8:
      return "map";
    default:
      return "unknown";
  }
}

static_assert(Serializer<Int64Serializer, std::int64_t>);
static_assert(Serializer<UInt64Serializer, std::uint64_t>);
static_assert(Serializer<Int32Serializer, std::int32_t>);
static_assert(Serializer<StringSerializer, std::string>);
static_assert(Serializer<VectorInt64Serializer, std::vector<std::int64_t>>);
static_assert(Serializer<VoidNamespaceSerializer, VoidNamespace>);
static_assert(Serializer<ListSerializer<Int64Serializer>, std::vector<std::int64_t>>);
static_assert(Serializer<MapSerializer<StringSerializer, Int64Serializer>,
                         std::map<std::string, std::int64_t>>);

}  // namespace cowstate

// VoidNamespace is a map namespace: the map's DefaultHash hashes it through std::hash.
template <>
struct std::hash<cowstate::VoidNamespace> {
  std::size_t operator()(cowstate::VoidNamespace) const noexcept { return 0; }
};
