// State memory: how many heap bytes a state owns beyond its own object, and the counters a
// map keeps of them, so that memory accounting per (state, key group) is exact and O(1).
//
// The hook
// --------
// StateHeapBytes<S>::of(s) is the number of bytes `s` holds on the heap: a vector's
// capacity times its element size (plus what its elements hold), a std::map's nodes (plus
// what their keys and values hold), a string's buffer when it is not stored inline. A
// trivially copyable type holds none. kHasHeap is false when no value of S can hold any, so a
// map of such states pays nothing for the hook. Users specialize StateHeapBytes for their own
// state types; an unknown type that is not trivially copyable is counted as holding none (its
// accounting is then a lower bound, which is documented at the backend's budget option).
//
// Bytes counted are the bytes requested from the allocator (libstdc++'s node layout for
// std::map: a 32-byte node header and the value pair, rounded up to the pair's alignment);
// the allocator's own headers and rounding are not seen, so "exact" means: equal to a
// recount of the same formula from scratch, at every moment.
//
// The counters
// ------------
// StateHeapCounter is what a CowStateMap keeps: heap bytes of its live boxed states and of
// its retired ones (still readable by a live snapshot). A state handed out mutably (get_mutable)
// changes after the map returns; the counter remembers it and its bytes then, and settles the
// difference before the map's next operation, its next snapshot and every read of the
// counter. So the counter is exact whenever anyone can look at it.
//
// Thread safety: the writer thread only (like the map's other bookkeeping).
//
// Invariants (docs/invariants.md)
//  M1  live() equals the sum of StateHeapBytes over the live boxed states, and retired()
//      over the retired ones, whenever nothing is pending (after settle()).
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "cowstate/assert.h"

namespace cowstate {

template <class S>
struct StateHeapBytes {
  static constexpr bool kHasHeap = false;
  static constexpr std::size_t of(const S&) noexcept { return 0; }
};

template <class C, class T, class A>
struct StateHeapBytes<std::basic_string<C, T, A>> {
  static constexpr bool kHasHeap = true;
  // libstdc++ keeps up to 15 chars inline (the small-string buffer).
  static std::size_t of(const std::basic_string<C, T, A>& s) noexcept {
    constexpr std::size_t kInlineChars = 15 / sizeof(C);
    return s.capacity() > kInlineChars ? (s.capacity() + 1) * sizeof(C) : 0;
  }
};

template <class E, class A>
struct StateHeapBytes<std::vector<E, A>> {
  static constexpr bool kHasHeap = true;
  static std::size_t of(const std::vector<E, A>& v) noexcept {
    std::size_t bytes = v.capacity() * sizeof(E);
    if constexpr (StateHeapBytes<E>::kHasHeap) {
      for (const E& e : v) bytes += StateHeapBytes<E>::of(e);
    }
    return bytes;
  }
};

namespace detail {
// libstdc++'s red-black tree node: color and three links (32 bytes on LP64), then the value.
template <class V>
constexpr std::size_t rb_node_bytes() noexcept {
  constexpr std::size_t header = 32;
  constexpr std::size_t align = alignof(V) > 8 ? alignof(V) : 8;
  return (header + sizeof(V) + align - 1) / align * align;
}
}  // namespace detail

template <class K, class V, class C, class A>
struct StateHeapBytes<std::map<K, V, C, A>> {
  static constexpr bool kHasHeap = true;
  static std::size_t of(const std::map<K, V, C, A>& m) noexcept {
    std::size_t bytes = m.size() * detail::rb_node_bytes<std::pair<const K, V>>();
    if constexpr (StateHeapBytes<K>::kHasHeap || StateHeapBytes<V>::kHasHeap) {
      for (const auto& [k, v] : m) bytes += StateHeapBytes<K>::of(k) + StateHeapBytes<V>::of(v);
    }
    return bytes;
  }
};

// Heap bytes of live and retired boxed states of one map (see the file comment).
template <class S, bool = StateHeapBytes<S>::kHasHeap>
class StateHeapCounter {
 public:
  std::size_t live() const noexcept { return live_; }
  std::size_t retired() const noexcept { return retired_; }
  void on_new(const S& s) noexcept { live_ += StateHeapBytes<S>::of(s); }
  // A live state about to be destroyed.
  void on_free_live(const S& s) noexcept {
    if (pending_ == &s) {
      live_ -= pending_bytes_;  // what it held when handed out, as counted
      pending_ = nullptr;
      return;
    }
    const std::size_t b = StateHeapBytes<S>::of(s);
    COWSTATE_ASSERT(b <= live_, "M1", "a freed state holds more heap than the map counted");
    live_ -= b;
  }
  // A live state becomes retired (a live snapshot may still read it).
  void on_retire(const S& s) noexcept {
    if (pending_ == &s) settle();
    const std::size_t b = StateHeapBytes<S>::of(s);
    COWSTATE_ASSERT(b <= live_, "M1", "a retired state holds more heap than the map counted");
    live_ -= b;
    retired_ += b;
  }
  // A retired state about to be destroyed.
  void on_free_retired(const S& s) noexcept {
    const std::size_t b = StateHeapBytes<S>::of(s);
    COWSTATE_ASSERT(b <= retired_, "M1", "a reclaimed state holds more heap than counted");
    retired_ -= b;
  }
  // `s` (live) may change after this call: count it again at the next settle().
  void hand_out(S* s) noexcept {
    if (pending_ == s) return;
    settle();
    pending_ = s;
    pending_bytes_ = StateHeapBytes<S>::of(*s);
  }
  void settle() noexcept {
    if (pending_ == nullptr) return;
    const std::size_t now = StateHeapBytes<S>::of(*pending_);
    COWSTATE_ASSERT(pending_bytes_ <= live_, "M1", "a pending state counted beyond the live bytes");
    live_ = live_ - pending_bytes_ + now;
    pending_ = nullptr;
  }

 private:
  std::size_t live_ = 0;
  std::size_t retired_ = 0;
  const S* pending_ = nullptr;
  std::size_t pending_bytes_ = 0;
};

// States that hold no heap: nothing to count.
template <class S>
class StateHeapCounter<S, false> {
 public:
  static constexpr std::size_t live() noexcept { return 0; }
  static constexpr std::size_t retired() noexcept { return 0; }
  void on_new(const S&) noexcept {}
  void on_free_live(const S&) noexcept {}
  void on_retire(const S&) noexcept {}
  void on_free_retired(const S&) noexcept {}
  void hand_out(S*) noexcept {}
  void settle() noexcept {}
};

}  // namespace cowstate
