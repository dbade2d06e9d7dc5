#ifndef COWSTATE_MODEL_VERSIONED_MAP_H_
#define COWSTATE_MODEL_VERSIONED_MAP_H_

// VersionedMap<K, N, S> is the reference model of one copy-on-write state map: the oracle the
// simulator and the typed behaviour tests compare CowStateMap<K, N, S> against. It is written
// to be obviously correct; it is slow and that is fine.
//
// What it stores. For every (key, namespace) a *history*: a std::map from version to
// std::optional<S>. A record (v, x) means "from map version v on, the value is x" (nullopt:
// absent). There is no hashing, no sharing and no copy-on-write trick: every version of every
// value the live map or a live snapshot can see is a separate S inside its own record.
//
// How versions work (Flink's stateMapVersion). map_version() starts at 0. Every write is
// recorded at the current map_version(): it overwrites the history's last record if that has
// the same version, else it appends a new one. start_snapshot() increments map_version() by one
// and the new value is the snapshot's version, so snapshot v is taken between the writes at
// version v - 1 and those at version v. Hence:
//   - the live map shows, per key, the last record of its history;
//   - the image of snapshot v shows, per key, the last record with version < v (seen_by()).
// Images are computed on request from the histories; nothing is frozen or shared.
//
// Mutable access. get_mutable() hands out a pointer into the last record. If that record's
// version is older than map_version(), a snapshot started after it was written may see it, so
// get_mutable() first appends a copy at the current version and hands out the copy. A record
// at the current version is seen by no snapshot (they all see versions < their own, which is
// at most map_version()), so mutating it in place changes the live map only.
//
// Garbage collection. After every write and every release, a history keeps only the records
// the live map or a live snapshot sees: its last record and seen_by(v) for each live v, both
// found by the same functions that build the images. A history that shrinks to one absent
// record is dropped. Removing records nobody sees cannot change any image: seen_by(v) of the
// kept records is the record seen_by(v) found before, since it is kept and every kept record
// also existed before. Future snapshots see the last record, which is always kept.
//
// Snapshot handles. snapshot() returns a move-only Snapshot that releases its version when
// released or destroyed. Simulators that manage snapshot lifetimes themselves use the raw
// start_snapshot() / release_snapshot(v) calls the handle is built on.
//
// Thread safety. None: a model and its snapshot handles are used from one thread (the
// simulator runs every task on one thread). A Snapshot points to its model: the model must
// outlive its handles and must not be moved while handles exist. Pointers returned by get()
// and get_mutable() stay valid until the next non-const call on the model (snapshot() and
// release included). for_each callbacks must not modify the model.
//
// Invariants (checked densely by require(), in full by check_invariants()):
//   M1. map_version() only grows, by one per start_snapshot().
//   M2. Every live snapshot version v satisfies 1 <= v <= map_version().
//   M3. Every history is non-empty and its records' versions are <= map_version().
//   M4. Every record is its history's last or is seen_by(v) for some live version v.
//   M5. No history consists of a single absent record.
//   M6. highest_required_version() is the largest live version, or 0 when none is live.
//   M7. size() equals the number of present live records (kept as a count by write()).

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace cowstate::model {

namespace detail {

// Crashes loudly on a programmer error. Stays on in every build: the model is the oracle.
// (__builtin_FILE/LINE rather than std::source_location, which clang 14 lacks.)
inline void require(bool ok, const char* what, const char* file = __builtin_FILE(),
                    int line = __builtin_LINE()) {
  if (ok) return;
  std::fprintf(stderr, "%s:%d: cowstate model: requirement failed: %s\n", file, line, what);
  std::abort();
}

}  // namespace detail

// The contents of a map at one version: (key, namespace) -> state, in key order.
template <class K, class N, class S>
using ImageOf = std::map<std::pair<K, N>, S>;

// ---------------------------------------------------------------------------------------------
// Text for failure messages: short and deterministic (no locale, no addresses). Other value
// kinds can join in with a to_text overload found by argument-dependent lookup.

template <std::integral T>
std::string to_text(T value);
inline std::string to_text(const std::string& value);
template <class T>
std::string to_text(const std::vector<T>& values);
template <class T>
std::string to_text(const std::optional<T>& value);
template <class A, class B>
std::string to_text(const std::pair<A, B>& pair);

// 42, -7, true.
template <std::integral T>
std::string to_text(T value) {
  if constexpr (std::same_as<T, bool>) {
    return value ? "true" : "false";
  } else if constexpr (std::signed_integral<T>) {
    return std::to_string(static_cast<long long>(value));
  } else {
    return std::to_string(static_cast<unsigned long long>(value));
  }
}

// "abc", with \" \\ and \xHH escapes so any byte string prints on one line.
inline std::string to_text(const std::string& value) {
  std::string out = "\"";
  for (const char c : value) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (byte >= 0x20 && byte < 0x7f) {
      out += c;
    } else {
      char escaped[5];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", static_cast<unsigned>(byte));
      out += escaped;
    }
  }
  out += '"';
  return out;
}

// [1,2,3].
template <class T>
std::string to_text(const std::vector<T>& values) {
  std::string out = "[";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ',';
    out += to_text(values[i]);
  }
  out += ']';
  return out;
}

// The value, or "absent".
template <class T>
std::string to_text(const std::optional<T>& value) {
  return value.has_value() ? to_text(*value) : std::string("absent");
}

// (1,0): how a (key, namespace) prints.
template <class A, class B>
std::string to_text(const std::pair<A, B>& pair) {
  return "(" + to_text(pair.first) + "," + to_text(pair.second) + ")";
}

// {(1,0):10, (5,0):50}; after max_entries entries the rest is summarized as "... 3 more".
template <class K, class N, class S>
std::string describe(const ImageOf<K, N, S>& image, std::size_t max_entries = 16) {
  std::string out = "{";
  std::size_t shown = 0;
  for (const auto& [key, state] : image) {
    if (shown > 0) out += ", ";
    if (shown == max_entries) {
      out += "... " + std::to_string(image.size() - shown) + " more";
      break;
    }
    out += to_text(key) + ":" + to_text(state);
    ++shown;
  }
  out += "}";
  return out;
}

// nullopt when the images are equal. Otherwise a summary line followed by the first five
// differences in key order, one per line ("missing", "extra" or "different"), and a count of
// the rest. Needs S == S.
template <class K, class N, class S>
std::optional<std::string> diff(const ImageOf<K, N, S>& expected, const ImageOf<K, N, S>& actual) {
  constexpr std::size_t kMaxLines = 5;
  std::vector<std::string> lines;
  std::size_t differences = 0;
  const auto note = [&](std::string line) {
    ++differences;
    if (lines.size() < kMaxLines) lines.push_back(std::move(line));
  };
  auto e = expected.begin();
  auto a = actual.begin();
  while (e != expected.end() || a != actual.end()) {
    if (a == actual.end() || (e != expected.end() && e->first < a->first)) {
      note("missing " + to_text(e->first) + ": expected " + to_text(e->second));
      ++e;
    } else if (e == expected.end() || a->first < e->first) {
      note("extra " + to_text(a->first) + ": actual " + to_text(a->second));
      ++a;
    } else {
      if (!(e->second == a->second)) {
        note("different " + to_text(e->first) + ": expected " + to_text(e->second) + ", actual " +
             to_text(a->second));
      }
      ++e;
      ++a;
    }
  }
  if (differences == 0) return std::nullopt;
  std::string out = std::to_string(differences) +
                    (differences == 1 ? " difference" : " differences") + " (expected " +
                    std::to_string(expected.size()) + " entries, actual " +
                    std::to_string(actual.size()) + " entries):";
  for (const std::string& line : lines) out += "\n  " + line;
  if (differences > lines.size()) {
    out += "\n  ... " + std::to_string(differences - lines.size()) + " more";
  }
  return out;
}

// The entries of `image` for which keep(key, namespace, state) is true (restore into a
// key-group range, say).
template <class K, class N, class S, class Pred>
ImageOf<K, N, S> filter(const ImageOf<K, N, S>& image, Pred keep) {
  ImageOf<K, N, S> out;
  for (const auto& [key, state] : image) {
    if (keep(key.first, key.second, state)) out.emplace_hint(out.end(), key, state);
  }
  detail::require(out.size() <= image.size(), "filter never adds entries");
  return out;
}

// ---------------------------------------------------------------------------------------------

template <class K, class N, class S>
class VersionedMap {
 public:
  using Key = std::pair<K, N>;
  using Image = ImageOf<K, N, S>;
  class Snapshot;

  VersionedMap() = default;

  // A fresh model (map version 0, no snapshots) whose live map is `image`.
  static VersionedMap restore(const Image& image) {
    VersionedMap model;
    for (const auto& [key, state] : image) model.write(key, state);
    detail::require(model.size() == image.size(), "restore keeps every entry");
    detail::require(model.map_version() == 0, "a restored model starts at version 0");
    return model;
  }

  // --- The live map ----------------------------------------------------------------------------

  // The live state, or nullptr if absent. Never copies.
  const S* get(const K& key, const N& ns) const {
    const std::optional<S>* record = live_record(Key{key, ns});
    return record != nullptr && record->has_value() ? &**record : nullptr;
  }

  // The live state for in-place mutation, or nullptr if absent. Copies the state first when a
  // snapshot may see the live record, so no snapshot image ever changes through the pointer.
  S* get_mutable(const K& key, const N& ns) {
    const Key k{key, ns};
    const std::optional<S>* record = live_record(k);
    if (record == nullptr || !record->has_value()) return nullptr;
    if (history_.at(k).rbegin()->first < map_version_) write(k, *record);
    auto last = history_.at(k).rbegin();
    detail::require(last->first == map_version_, "M4: a mutable state is seen by no snapshot");
    detail::require(last->second.has_value(), "get_mutable hands out a present state");
    return &*last->second;
  }

  bool contains(const K& key, const N& ns) const { return get(key, ns) != nullptr; }

  void put(const K& key, const N& ns, S state) { write(Key{key, ns}, std::move(state)); }

  // Puts `state` and returns the previous live state, if any.
  std::optional<S> put_and_get_old(const K& key, const N& ns, S state) {
    const Key k{key, ns};
    std::optional<S> old = live_value(k);
    write(k, std::move(state));
    return old;
  }

  // Returns whether a state was removed.
  bool remove(const K& key, const N& ns) { return remove_and_get_old(key, ns).has_value(); }

  // Removes the live state and returns it, if any.
  std::optional<S> remove_and_get_old(const K& key, const N& ns) {
    const Key k{key, ns};
    std::optional<S> old = live_value(k);
    if (old.has_value()) write(k, std::nullopt);
    detail::require(!contains(key, ns), "a removed state is absent");
    return old;
  }

  // Puts fn(old_or_null, value), where old_or_null points to the live state or is nullptr.
  template <class T, class F>
  void transform(const K& key, const N& ns, const T& value, F&& fn) {
    S state = std::forward<F>(fn)(get(key, ns), value);
    put(key, ns, std::move(state));
  }

  // Number of live states. O(number of histories).
  // Kept as a count of present live records, updated by the one function that writes
  // (write()); check_invariants() recounts it (M7).
  std::size_t size() const { return live_count_; }

  bool empty() const { return size() == 0; }

  // Calls fn(key, namespace, state) for every live state, in key order.
  template <class F>
  void for_each(F&& fn) const {
    for (const auto& [key, history] : history_) {
      const std::optional<S>& last = history.rbegin()->second;
      if (last.has_value()) fn(key.first, key.second, *last);
    }
  }

  // --- Snapshots -------------------------------------------------------------------------------

  // Starts a snapshot; the handle releases it when released or destroyed.
  Snapshot snapshot() { return Snapshot(this, start_snapshot()); }

  // Starts a snapshot and returns its version, the new map version.
  // REQUIRES: map_version() < UINT32_MAX.
  std::uint32_t start_snapshot() {
    detail::require(map_version_ < std::numeric_limits<std::uint32_t>::max(),
                    "M1: map version overflow");
    ++map_version_;
    const bool inserted = live_versions_.insert(map_version_).second;
    detail::require(inserted, "M1: every snapshot gets a new version");
    return map_version_;
  }

  // Releases snapshot `version`; releasing it again does nothing.
  // REQUIRES: 1 <= version <= map_version() (the snapshot was started).
  void release_snapshot(std::uint32_t version) {
    detail::require(version >= 1, "M2: snapshot versions start at 1");
    detail::require(version <= map_version_, "M2: only a started snapshot can be released");
    if (live_versions_.erase(version) == 0) return;
    std::vector<Key> keys;
    for (const auto& [key, history] : history_) keys.push_back(key);
    for (const Key& key : keys) collect(key);
  }

  // --- Versions and images, for checkers ---------------------------------------------------------

  std::uint32_t map_version() const { return map_version_; }

  // M6: the largest live snapshot version, or 0 if none is live.
  std::uint32_t highest_required_version() const {
    return live_versions_.empty() ? 0 : *live_versions_.rbegin();
  }

  // Live snapshot versions, ascending.
  std::vector<std::uint32_t> live_versions() const {
    return std::vector<std::uint32_t>(live_versions_.begin(), live_versions_.end());
  }

  bool is_live(std::uint32_t version) const { return live_versions_.contains(version); }

  // The live map.
  Image live() const {
    Image out;
    for_each([&out](const K& key, const N& ns, const S& state) {
      out.emplace_hint(out.end(), Key{key, ns}, state);
    });
    return out;
  }

  // What snapshot `version` sees: per key, the last write before that snapshot started.
  // REQUIRES: `version` is live.
  Image image(std::uint32_t version) const {
    detail::require(is_live(version), "image() of a version that is not live");
    Image out;
    for (const auto& [key, history] : history_) {
      const auto seen = seen_by(history, version);
      if (seen != history.end() && seen->second.has_value()) {
        out.emplace_hint(out.end(), key, *seen->second);
      }
    }
    return out;
  }

  // Deep check of M2..M5; prints the first broken invariant to stderr. O(histories x live).
  bool check_invariants() const {
    std::size_t present = 0;
    for_each([&present](const K&, const N&, const S&) { ++present; });
    if (present != live_count_) return broken("M7: the live count differs from the live records");
    for (const std::uint32_t v : live_versions_) {
      if (v < 1 || v > map_version_) return broken("M2: live version out of [1, map_version]");
    }
    for (const auto& [key, history] : history_) {
      if (history.empty()) return broken("M3: empty history");
      if (history.rbegin()->first > map_version_) return broken("M3: record from the future");
      if (history.size() == 1 && !history.begin()->second.has_value()) {
        return broken("M5: history of a single absent record");
      }
      for (auto record = history.begin(); record != history.end(); ++record) {
        bool seen = std::next(record) == history.end();
        for (const std::uint32_t v : live_versions_) seen = seen || seen_by(history, v) == record;
        if (!seen) return broken("M4: record seen by neither the live map nor a snapshot");
      }
    }
    return true;
  }

 private:
  // Version -> value from that version on (nullopt: absent). Never empty (M3).
  using History = std::map<std::uint32_t, std::optional<S>>;

  // The record snapshot `version` sees: the last one with a smaller version, or end().
  static typename History::const_iterator seen_by(const History& history, std::uint32_t version) {
    const auto first_not_seen = history.lower_bound(version);
    return first_not_seen == history.begin() ? history.end() : std::prev(first_not_seen);
  }

  static bool broken(const char* what) {
    std::fprintf(stderr, "cowstate model: invariant broken: %s\n", what);
    return false;
  }

  // The last record of `key`'s history, or nullptr if it has none.
  const std::optional<S>* live_record(const Key& key) const {
    const auto it = history_.find(key);
    return it == history_.end() ? nullptr : &it->second.rbegin()->second;
  }

  std::optional<S> live_value(const Key& key) const {
    const std::optional<S>* record = live_record(key);
    return record == nullptr ? std::nullopt : *record;
  }

  // The only write path: from map_version_ on, `key` holds `value`.
  void write(const Key& key, std::optional<S> value) {
    History& history = history_[key];
    const bool was_present = !history.empty() && history.rbegin()->second.has_value();
    const bool is_present = value.has_value();
    live_count_ = live_count_ + (is_present ? 1u : 0u) - (was_present ? 1u : 0u);
    detail::require(history.empty() || history.rbegin()->first <= map_version_,
                    "M3: records are written at the current version");
    history[map_version_] = std::move(value);  // overwrites a record of this version, or appends
    detail::require(history.rbegin()->first == map_version_, "a write is the live record");
    collect(key);
  }

  // Drops the records of `key` that neither the live map nor a live snapshot sees (M4, M5).
  void collect(const Key& key) {
    const auto it = history_.find(key);
    detail::require(it != history_.end(), "collect() of a key without history");
    History& history = it->second;
    std::set<std::uint32_t> seen = {history.rbegin()->first};
    for (const std::uint32_t v : live_versions_) {
      const auto record = seen_by(history, v);
      if (record != history.end()) seen.insert(record->first);
    }
    std::erase_if(history, [&seen](const auto& record) { return !seen.contains(record.first); });
    detail::require(!history.empty(), "M3: the live record is kept");
    if (history.size() == 1 && !history.begin()->second.has_value()) history_.erase(it);
  }

  // --- Touched by the owning thread only ---
  std::map<Key, History> history_;
  std::size_t live_count_ = 0;  // present live records (M7)
  std::uint32_t map_version_ = 0;
  std::set<std::uint32_t> live_versions_;
};

// A started snapshot of a VersionedMap. Move-only; releases its version when released or
// destroyed. The model must outlive it.
template <class K, class N, class S>
class VersionedMap<K, N, S>::Snapshot {
 public:
  Snapshot() = default;  // holds no snapshot: released() and !valid()
  Snapshot(const Snapshot&) = delete;
  Snapshot& operator=(const Snapshot&) = delete;

  Snapshot(Snapshot&& other) noexcept
      : model_(std::exchange(other.model_, nullptr)), version_(other.version_) {}

  Snapshot& operator=(Snapshot&& other) noexcept {
    if (this != &other) {
      release();
      model_ = std::exchange(other.model_, nullptr);
      version_ = other.version_;
    }
    return *this;
  }

  ~Snapshot() { release(); }

  std::uint32_t version() const { return version_; }

  // Entries in the image. REQUIRES: !released().
  std::size_t size() const { return image().size(); }

  // Calls fn(key, namespace, state) for every entry of the image, in key order.
  // REQUIRES: !released().
  template <class F>
  void for_each(F&& fn) const {
    for (const auto& [key, state] : image()) fn(key.first, key.second, state);
  }

  // Idempotent; also safe after the model released this version through release_snapshot().
  void release() {
    if (model_ != nullptr) std::exchange(model_, nullptr)->release_snapshot(version_);
    detail::require(released(), "a released handle stays released");
  }

  // True once released (by this handle or by the model), or moved from.
  bool released() const { return model_ == nullptr || !model_->is_live(version_); }

  // Holds a live snapshot that may be iterated.
  bool valid() const { return !released(); }

 private:
  friend class VersionedMap;

  Snapshot(VersionedMap* model, std::uint32_t version) : model_(model), version_(version) {
    detail::require(model_->is_live(version_), "a new handle holds a live version");
  }

  Image image() const {
    detail::require(!released(), "snapshot used after release");
    return model_->image(version_);
  }

  VersionedMap* model_ = nullptr;  // nullptr when empty, released or moved from
  std::uint32_t version_ = 0;
};

}  // namespace cowstate::model

#endif  // COWSTATE_MODEL_VERSIONED_MAP_H_
