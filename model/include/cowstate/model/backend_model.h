#ifndef COWSTATE_MODEL_BACKEND_MODEL_H_
#define COWSTATE_MODEL_BACKEND_MODEL_H_

// BackendModel<K, N, S> is the reference model of a keyed state backend: the oracle the
// backend simulation compares KeyedStateBackend, its checkpoints and its restores against.
// Like VersionedMap it is written to be obviously correct, not fast.
//
// What it stores. Per registered state (by name, with its kind) one VersionedMap<K, N, S>:
// the values by (key, namespace), each with its history by version. There are no key
// groups inside: a backend's key groups are how it *stores* state, not what the state is.
// Key groups appear only where they change what is visible: in restore, which keeps the
// keys whose key group lies in a range.
//
// Checkpoints. start_checkpoint(id) starts a snapshot of every state at once (each state's
// VersionedMap gets its own version; the model remembers which) and image(id) is what the
// checkpoint holds: per state, the image of that version. release_checkpoint(id) releases
// them all. The model does not know about files, steps or failures: a checkpoint either
// completes, and then restores to image(id), or it does not, and then it restores nowhere.
//
// Restore. restrict(image, span, key_group_of) keeps the entries whose key's key group lies
// in an inclusive span; merge(a, b) is the union of two images of disjoint key groups (scale
// in); restored(...) is a fresh model whose live state is an image (versions start at 0).
//
// Key groups. flink_key_group() is Flink's KeyGroupRangeAssignment written out again from
// its definition (Java's Long.hashCode, one Murmur3 mixing round and the Murmur3 finalizer,
// made non-negative, modulo the max parallelism), with no code shared with impl/: a planted
// bug in impl's key-group function cannot hide from a model that computes its own.
//
// Thread safety. None; one thread.
//
// Invariants (checked by require(), cheap ones always):
//   BM1. State names are registered once; every checkpoint covers every state registered
//        before it started.
//   BM2. A live checkpoint's versions are live in their states' maps.
//   BM3. restrict() never adds entries and keeps only keys of the span; merge() requires
//        disjoint inputs.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cowstate/model/state_kind.h"
#include "cowstate/model/versioned_map.h"

namespace cowstate::model {

// ---------------------------------------------------------------------------------------------
// Flink's key-group assignment, from its definition.

// Java's Long.hashCode: (int) (value ^ (value >>> 32)).
inline std::int32_t java_long_hash(std::uint64_t value) {
  const std::uint64_t folded = value ^ (value >> 32);
  return static_cast<std::int32_t>(static_cast<std::uint32_t>(folded & 0xffffffffu));
}

// Flink's MathUtils.murmurHash(int code): Murmur3-32 of the four bytes of `code` with seed 0,
// then made non-negative (Integer.MIN_VALUE becomes 0).
inline std::int32_t flink_murmur_hash(std::int32_t code) {
  auto rotate_left = [](std::uint32_t x, int r) { return (x << r) | (x >> (32 - r)); };
  std::uint32_t k = static_cast<std::uint32_t>(code);
  k *= 0xcc9e2d51u;  // the body: one 4-byte block
  k = rotate_left(k, 15);
  k *= 0x1b873593u;
  std::uint32_t h = 0;  // seed
  h ^= k;
  h = rotate_left(h, 13);
  h = h * 5u + 0xe6546b64u;
  h ^= 4u;  // the finalizer: length in bytes, then fmix32
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  const auto signed_h = static_cast<std::int32_t>(h);
  if (signed_h >= 0) return signed_h;
  if (signed_h == std::numeric_limits<std::int32_t>::min()) return 0;
  return -signed_h;
}

// KeyGroupRangeAssignment.computeKeyGroupForKeyHash.
inline std::int32_t flink_key_group(std::int32_t key_hash, std::int32_t max_parallelism) {
  detail::require(max_parallelism >= 1, "a max parallelism is positive");
  const std::int32_t group = flink_murmur_hash(key_hash) % max_parallelism;
  detail::require(group >= 0 && group < max_parallelism, "a key group is in [0, max)");
  return group;
}

// An inclusive span of key groups [first, last]; empty when last < first.
struct KeyGroupSpan {
  std::int32_t first = 0;
  std::int32_t last = -1;
  bool contains(std::int32_t group) const { return first <= group && group <= last; }
  bool empty() const { return last < first; }
  friend bool operator==(const KeyGroupSpan&, const KeyGroupSpan&) = default;
};

// ---------------------------------------------------------------------------------------------

template <class K, class N, class S>
class BackendModel {
 public:
  using Map = VersionedMap<K, N, S>;
  using Image = ImageOf<K, N, S>;
  using BackendImage = std::map<std::string, Image>;  // state name -> its image
  using KeyGroupOf = std::function<std::int32_t(const K&)>;

  BackendModel() = default;

  // Registers state `name` of `kind`. REQUIRES: a new name (BM1).
  void register_state(const std::string& name, StateKind kind) {
    detail::require(!states_.contains(name), "BM1: a state name is registered once");
    states_[name].kind = kind;
  }
  bool has_state(const std::string& name) const { return states_.contains(name); }
  StateKind kind(const std::string& name) const { return entry(name).kind; }
  // The values of state `name`, by (key, namespace). REQUIRES: registered.
  Map& state(const std::string& name) { return entry(name).map; }
  const Map& state(const std::string& name) const { return entry(name).map; }

  // The live contents of every state.
  BackendImage live() const {
    BackendImage out;
    for (const auto& [name, s] : states_) out[name] = s.map.live();
    return out;
  }

  // --- Checkpoints -----------------------------------------------------------------------------

  // Starts checkpoint `id`: a snapshot of every state. REQUIRES: a new id.
  void start_checkpoint(std::uint64_t id) {
    detail::require(!checkpoints_.contains(id), "a checkpoint id is started once");
    std::map<std::string, std::uint32_t>& versions = checkpoints_[id];
    for (auto& [name, s] : states_) versions[name] = s.map.start_snapshot();
    detail::require(versions.size() == states_.size(), "BM1: a checkpoint covers every state");
  }
  bool is_live(std::uint64_t id) const { return checkpoints_.contains(id); }
  // What checkpoint `id` holds. REQUIRES: live.
  BackendImage image(std::uint64_t id) const {
    const auto it = checkpoints_.find(id);
    detail::require(it != checkpoints_.end(), "image() of a checkpoint that is not live");
    BackendImage out;
    for (const auto& [name, version] : it->second) {
      detail::require(state(name).is_live(version), "BM2: a live checkpoint's version is live");
      out[name] = state(name).image(version);
    }
    return out;
  }
  // Releases checkpoint `id`; releasing it again does nothing.
  void release_checkpoint(std::uint64_t id) {
    const auto it = checkpoints_.find(id);
    if (it == checkpoints_.end()) return;
    for (const auto& [name, version] : it->second) state(name).release_snapshot(version);
    checkpoints_.erase(it);
  }
  std::size_t live_checkpoints() const { return checkpoints_.size(); }

  // --- Restore ---------------------------------------------------------------------------------

  // The part of `image` whose keys fall in `span` (restore into a backend owning `span`).
  static BackendImage restrict(const BackendImage& image, KeyGroupSpan span,
                               const KeyGroupOf& key_group_of) {
    BackendImage out;
    for (const auto& [name, entries] : image) {
      out[name] = filter(entries, [&](const K& key, const N&, const S&) {
        return span.contains(key_group_of(key));
      });
      detail::require(out[name].size() <= entries.size(), "BM3: restrict never adds entries");
    }
    return out;
  }

  // The union of images of disjoint key groups (restoring several checkpoints into one
  // backend). REQUIRES: no (state, key, namespace) in both (BM3).
  static BackendImage merge(const BackendImage& a, const BackendImage& b) {
    BackendImage out = a;
    for (const auto& [name, entries] : b) {
      for (const auto& [key, value] : entries) {
        const bool fresh = out[name].emplace(key, value).second;
        detail::require(fresh, "BM3: merged images are disjoint");
      }
    }
    return out;
  }

  // A fresh backend model (no checkpoints) whose states `kinds` hold `image`.
  static BackendModel restored(const std::map<std::string, StateKind>& kinds,
                               const BackendImage& image) {
    BackendModel out;
    for (const auto& [name, kind] : kinds) out.register_state(name, kind);
    for (const auto& [name, entries] : image) {
      for (const auto& [key, value] : entries) out.state(name).put(key.first, key.second, value);
    }
    detail::require(out.live() == with_states(kinds, image), "restored() holds the image");
    return out;
  }

  // `image` with an (empty) entry for every state of `kinds`, for comparisons.
  static BackendImage with_states(const std::map<std::string, StateKind>& kinds,
                                  BackendImage image) {
    for (const auto& [name, kind] : kinds) image[name];
    return image;
  }

  // The registered states and their kinds.
  std::map<std::string, StateKind> kinds() const {
    std::map<std::string, StateKind> out;
    for (const auto& [name, s] : states_) out[name] = s.kind;
    return out;
  }

  // Deep check of every state's VersionedMap and of BM2.
  bool check_invariants() const {
    for (const auto& [name, s] : states_) {
      if (!s.map.check_invariants()) return false;
    }
    for (const auto& [id, versions] : checkpoints_) {
      for (const auto& [name, version] : versions) {
        if (!state(name).is_live(version)) return false;
      }
    }
    return true;
  }

 private:
  struct StateEntry {
    StateKind kind = StateKind::value;
    Map map;
  };
  StateEntry& entry(const std::string& name) {
    const auto it = states_.find(name);
    detail::require(it != states_.end(), "a registered state");
    return it->second;
  }
  const StateEntry& entry(const std::string& name) const {
    const auto it = states_.find(name);
    detail::require(it != states_.end(), "a registered state");
    return it->second;
  }

  // --- Touched by the owning thread only ---
  std::map<std::string, StateEntry> states_;
  std::map<std::uint64_t, std::map<std::string, std::uint32_t>> checkpoints_;  // id -> versions
};

}  // namespace cowstate::model

#endif  // COWSTATE_MODEL_BACKEND_MODEL_H_
