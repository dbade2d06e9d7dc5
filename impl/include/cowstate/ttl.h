// State time-to-live, after Flink's StateTtlConfig / TtlValue / TtlTimeProvider: the
// configuration, the injected clock, the stored form of a value with its last-access time,
// the expiry rule, and the filters that incremental and full-snapshot cleanup share.
//
// Model
// -----
// A state registered with a StateTtlConfig (StateOptions::ttl, keyed_state_backend.h)
// stores every value with the time it was last accessed: value, reducing and aggregating
// states one TtlValue per (key, namespace); list states one per element; map states one
// per user value. A stored value is expired at `now` iff
//     last_access + ttl <= now
// with the addition saturating at INT64_MAX, so the boundary instant itself is expired and
// a huge ttl never wraps around (TtlUtils.expired in Flink).
//
// UpdateType says which accesses refresh last_access: every write (OnCreateAndWrite), or
// also every successful read (OnReadAndWrite). Visibility says whether a read may return
// a value that is expired but was not cleaned up yet (ReturnExpiredIfNotCleanedUp) or
// never does (NeverReturnExpired). Either way the read removes what it found expired.
//
// Cleanup
// -------
// Lazy: a read removes the expired values it meets. Incremental (default, as in Flink:
// 5 entries, not on every key switch): every access of the state, and optionally every
// key switch of the backend, visits `cleanup_size` more entries of the state's table with
// the map's incremental visitor (whole chains, CowStateMap::visit_incremental) and
// removes expired values. Full snapshot: a checkpoint leaves out expired entries and
// elements, judged by the clock when each is written (async phase); live state is
// untouched. Cleanup never mutates a stored state in place: a snapshot may share it. It
// puts a new, filtered state (ttl_filter below) or removes the entry; an entry whose list
// or map has no live element left is removed, never kept empty.
//
// Clock
// -----
// TtlTimeProvider is injected into the backend. Time is milliseconds as int64; it need
// not be wall time (the simulator's clock is logical) and may even stand still, but it
// must never go backwards while a backend uses it. ManualTtlClock is set by hand (tests,
// simulator, benchmarks).
//
// Thread safety
// -------------
// The clock is read (now(), current_timestamp()) by the backend's writer thread and by checkpoint
// writers on other threads (full-snapshot cleanup), so a provider must be safe to call from any
// thread; AtomicTtlClock's subclasses are (an atomic). Everything else here is a pure function of
// its arguments or a plain value.
//
// Invariants (docs/invariants.md)
//  L1  A TTL is positive and at most INT64_MAX ms.
//  L2  Expired iff saturating(last_access + ttl) <= now.
//  L3  Cleanup never mutates a stored state in place; it puts a filtered copy or removes.
//  L4  No stored list or map of a TTL state is empty: one with no live element is removed.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <stop_token>
#include <thread>
#include <utility>
#include <vector>

#include "cowstate/assert.h"
#include "cowstate/bytes.h"
#include "cowstate/cow_state_map.h"
#include "cowstate/hooks.h"
#include "cowstate/serializers.h"
#include "cowstate/status.h"

namespace cowstate {

// Time-to-live configuration of a state (Flink's StateTtlConfig). Recorded in state
// metadata and checkpoints; the numbering of the enums is stored: never renumber.
struct StateTtlConfig {
  enum class UpdateType : std::uint8_t { on_create_and_write = 0, on_read_and_write = 1 };
  enum class Visibility : std::uint8_t {
    never_return_expired = 0,
    return_expired_if_not_cleaned_up = 1
  };
  // Cleanup on access: visit `cleanup_size` entries per access of the state, and also on
  // every key switch of the backend when `run_on_every_key_switch`.
  struct IncrementalCleanup {
    std::uint32_t cleanup_size = 5;
    bool run_on_every_key_switch = false;
    friend bool operator==(const IncrementalCleanup&, const IncrementalCleanup&) = default;
  };

  // REQUIRES: 1 <= ttl_ms <= INT64_MAX (L1).
  std::uint64_t ttl_ms = 0;
  UpdateType update_type = UpdateType::on_create_and_write;
  Visibility visibility = Visibility::never_return_expired;
  std::optional<IncrementalCleanup> incremental_cleanup = IncrementalCleanup{};
  bool full_snapshot_cleanup = false;

  friend bool operator==(const StateTtlConfig&, const StateTtlConfig&) = default;

  // A positive TTL within int64 (L1).
  bool valid() const noexcept {
    return ttl_ms >= 1 && ttl_ms <= static_cast<std::uint64_t>(kMaxTimestamp) &&
           (!incremental_cleanup || incremental_cleanup->cleanup_size >= 1);
  }
  std::int64_t ttl() const noexcept { return static_cast<std::int64_t>(ttl_ms); }
  bool refresh_on_read() const noexcept { return update_type == UpdateType::on_read_and_write; }
  bool return_expired() const noexcept {
    return visibility == Visibility::return_expired_if_not_cleaned_up;
  }

  static constexpr std::int64_t kMaxTimestamp = std::numeric_limits<std::int64_t>::max();
};

// Flink's TtlTimeProvider: "now" in milliseconds. Callable from any thread; never goes
// backwards while a backend uses it.
//
// The backend reads the clock through now(), once per access of a state with TTL. A clock
// that keeps its time in an atomic (AtomicTtlClock below) hands it to this base at
// construction, and now() loads it without the virtual call, which would otherwise be a
// large share of a state access (the ttl_bench rows in bench/README.md). Other clocks are
// called through current_timestamp().
class TtlTimeProvider {
 public:
  virtual ~TtlTimeProvider() = default;
  virtual std::int64_t current_timestamp() const noexcept = 0;
  // current_timestamp(), without the virtual call for an AtomicTtlClock.
  std::int64_t now() const noexcept {
    if (time_ != nullptr) return time_->load(std::memory_order_relaxed);
    return current_timestamp();
  }

 protected:
  TtlTimeProvider() = default;
  // `time`: the atomic whose value current_timestamp() returns (AtomicTtlClock's).
  explicit TtlTimeProvider(const std::atomic<std::int64_t>* time) noexcept : time_(time) {}
  TtlTimeProvider(const TtlTimeProvider&) = delete;
  TtlTimeProvider& operator=(const TtlTimeProvider&) = delete;

 private:
  const std::atomic<std::int64_t>* time_ = nullptr;
};

// Milliseconds of the system clock (the default of a backend).
class SystemTtlClock final : public TtlTimeProvider {
 public:
  std::int64_t current_timestamp() const noexcept override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  static SystemTtlClock& instance() noexcept {
    static SystemTtlClock clock;
    return clock;
  }
};

// A clock whose time is an atomic that its subclass stores to: the base's now() loads it
// directly, current_timestamp() through the virtual call. Relaxed is enough: the clock
// orders nothing; a thread that must see a new time is handed work after the store through
// its own synchronization.
class AtomicTtlClock : public TtlTimeProvider {
 public:
  std::int64_t current_timestamp() const noexcept final {
    return time_.load(std::memory_order_relaxed);
  }

 protected:
  // The base gets the address of time_ only; it reads it after construction.
  explicit AtomicTtlClock(std::int64_t start) noexcept : TtlTimeProvider(&time_), time_(start) {}
  void store(std::int64_t now) noexcept { time_.store(now, std::memory_order_relaxed); }

 private:
  std::atomic<std::int64_t> time_;
};

// Milliseconds of the system clock, read by a thread of its own every `period` and kept in
// an atomic, so that the backend's read is one load (TtlTimeProvider::now()), as cheap as
// ManualTtlClock's. For a backend that reads the clock on every access of a state with TTL
// and can take a timestamp up to a period old (more while the ticker thread waits for a
// core). SystemTtlClock reads the time stamp counter through the vDSO, and that ordered read
// waits for the loads before it, so state accesses stop overlapping their cache misses.
// CLOCK_REALTIME_COARSE reads no counter, but its call through glibc and the vDSO is still
// on every access's path. The ttl_bench rows in bench/README.md compare the three clocks.
//
// The time never goes back: a step of the wall clock backwards holds it where it was
// until the wall clock passes it again (a backend's clock must not go backwards).
class TickingTtlClock final : public AtomicTtlClock {
 public:
  // REQUIRES: period >= 1 ms.
  explicit TickingTtlClock(std::chrono::milliseconds period = std::chrono::milliseconds(1))
      : AtomicTtlClock(SystemTtlClock::instance().current_timestamp()),
        period_(checked(period)),
        ticker_([this](std::stop_token stop) { tick_until(stop); }) {}
  // Stops the ticker (within one period) and joins it.
  ~TickingTtlClock() override = default;

 private:
  static std::chrono::milliseconds checked(std::chrono::milliseconds period) noexcept {
    COWSTATE_ASSERT(period.count() >= 1, "REQUIRES",
                    "a ticking clock needs a period of 1 ms or more");
    return period;
  }
  void tick_until(const std::stop_token& stop) {
    while (!stop.stop_requested()) {
      std::this_thread::sleep_for(period_);
      // Only this thread stores, so comparing first keeps the time from going back.
      const std::int64_t wall = SystemTtlClock::instance().current_timestamp();
      if (wall > current_timestamp()) store(wall);
    }
  }

  std::chrono::milliseconds period_;
  std::jthread ticker_;  // last: it starts ticking at construction, and stops first
};

// A clock set by hand: tests, the simulator's logical time, benchmarks.
class ManualTtlClock final : public AtomicTtlClock {
 public:
  explicit ManualTtlClock(std::int64_t now = 0) noexcept : AtomicTtlClock(now) {}
  // REQUIRES: now >= current_timestamp() (time never goes backwards).
  void set(std::int64_t now) noexcept {
    COWSTATE_ASSERT(now >= current_timestamp(), "L2", "a TTL clock went backwards");
    store(now);
  }
  // REQUIRES: ms >= 0 and no overflow.
  void advance(std::int64_t ms) noexcept {
    COWSTATE_ASSERT(ms >= 0, "L2", "a TTL clock advanced by a negative amount");
    COWSTATE_ASSERT(current_timestamp() <= StateTtlConfig::kMaxTimestamp - ms, "L2",
                    "a TTL clock advanced beyond INT64_MAX");
    set(current_timestamp() + ms);
  }
};

// last_access + ttl, saturating at INT64_MAX. REQUIRES: ttl >= 1 (L1), so the sum can only
// overflow upwards. (The add and its overflow flag: one instruction and a conditional move,
// where comparing against INT64_MAX - last_access first took five on every TTL read.)
constexpr std::int64_t ttl_expiration(std::int64_t last_access, std::int64_t ttl) noexcept {
  std::int64_t sum = 0;
  return __builtin_add_overflow(last_access, ttl, &sum) ? StateTtlConfig::kMaxTimestamp : sum;
}

// L2: expired iff last_access + ttl <= now (the boundary instant is expired).
inline bool ttl_expired(std::int64_t last_access, std::int64_t ttl, std::int64_t now) noexcept {
  if (COWSTATE_MUTANT(ttl_boundary_lt)) return ttl_expiration(last_access, ttl) < now;
  return ttl_expiration(last_access, ttl) <= now;
}

// A value with the time it was last accessed (Flink's TtlValue).
template <class V>
struct TtlValue {
  V value{};
  std::int64_t last_access = 0;
  friend bool operator==(const TtlValue&, const TtlValue&) = default;
};

// What a TtlValue holds on the heap is what its value holds (state_memory.h).
template <class V>
struct StateHeapBytes<TtlValue<V>> {
  static constexpr bool kHasHeap = StateHeapBytes<V>::kHasHeap;
  static std::size_t of(const TtlValue<V>& v) noexcept { return StateHeapBytes<V>::of(v.value); }
};

// Stored layout: i64 last access, then the value in VS's layout.
template <class VS>
struct TtlValueSerializer {
  using user_type = typename VS::value_type;
  using value_type = TtlValue<user_type>;
  static constexpr std::uint16_t id = 9;
  static constexpr const char* name = "ttl";
  static constexpr std::size_t fixed_size = VS::fixed_size > 0 ? VS::fixed_size + 8 : 0;
  static constexpr std::size_t min_size = serializer_min_size<VS>() + 8;
  static void write(ByteWriter& w, const value_type& v) {
    w.put_i64(v.last_access);
    VS::write(w, v.value);
  }
  static Status read(ByteReader& r, value_type& v) {
    if (Status st = r.read_i64(v.last_access, "last-access timestamp"); !st.ok()) return st;
    return VS::read(r, v.value);
  }
};

namespace detail {

// What TTL wraps in a stored state: the serializer a TTL state of user serializer SS stores
// with (value-like: TtlValueSerializer<SS>; list: elements wrapped; map: user values
// wrapped).
template <class SS>
struct TtlStored {
  using type = TtlValueSerializer<SS>;
};
template <class ES>
struct TtlStored<ListSerializer<ES>> {
  using type = ListSerializer<TtlValueSerializer<ES>>;
};
template <class UKS, class UVS>
struct TtlStored<MapSerializer<UKS, UVS>> {
  using type = MapSerializer<UKS, TtlValueSerializer<UVS>>;
};

// Whether a stored serializer is a TTL one, i.e. its states carry last-access times.
template <class SS>
inline constexpr bool kIsTtlStored = false;
template <class VS>
inline constexpr bool kIsTtlStored<TtlValueSerializer<VS>> = true;
template <class ES>
inline constexpr bool kIsTtlStored<ListSerializer<TtlValueSerializer<ES>>> = true;
template <class UKS, class UVS>
inline constexpr bool kIsTtlStored<MapSerializer<UKS, TtlValueSerializer<UVS>>> = true;

template <class V>
const TtlValue<V>& ttl_element(const TtlValue<V>& e) noexcept {
  return e;
}
template <class UK, class V>
const TtlValue<V>& ttl_element(const std::pair<const UK, TtlValue<V>>& e) noexcept {
  return e.second;
}

}  // namespace detail

// Elements of a stored list or map that are live at `now`.
template <class C>
std::size_t ttl_live_count(const C& elements, std::int64_t ttl, std::int64_t now) {
  std::size_t live = 0;
  for (const auto& e : elements) {
    if (!ttl_expired(detail::ttl_element(e).last_access, ttl, now)) ++live;
  }
  return live;
}

// The live part of a stored state at `now`, as an incremental-visitor decision: keep it
// (nothing expired), remove the entry (nothing live: L4) or replace it by a new, filtered
// copy (L3: the stored state itself is never changed). A time `refresh` >= 0 also sets the
// live elements' last access to it (a read under OnReadAndWrite); the state then always
// counts as changed.
template <class V>
VisitResult<TtlValue<V>> ttl_filter(const TtlValue<V>& v, std::int64_t ttl, std::int64_t now,
                                    std::int64_t refresh = -1) {
  if (ttl_expired(v.last_access, ttl, now)) return VisitResult<TtlValue<V>>::remove();
  if (refresh < 0) return VisitResult<TtlValue<V>>::keep();
  return VisitResult<TtlValue<V>>::replace(TtlValue<V>{v.value, refresh});
}

template <class E>
VisitResult<std::vector<TtlValue<E>>> ttl_filter(const std::vector<TtlValue<E>>& list,
                                                 std::int64_t ttl, std::int64_t now,
                                                 std::int64_t refresh = -1) {
  using R = VisitResult<std::vector<TtlValue<E>>>;
  const std::size_t live = ttl_live_count(list, ttl, now);
  if (live == list.size() && refresh < 0) return R::keep();
  if (COWSTATE_MUTANT(ttl_cleanup_in_place) && refresh < 0) {
    // Planted bug: filters the stored (possibly snapshot-shared) list where it lies.
    auto& shared = const_cast<std::vector<TtlValue<E>>&>(list);
    std::erase_if(shared,
                  [&](const TtlValue<E>& e) { return ttl_expired(e.last_access, ttl, now); });
    return live == 0 ? R::remove() : R::keep();
  }
  if (live == 0 && !COWSTATE_MUTANT(ttl_empty_list_kept)) return R::remove();  // L4
  std::vector<TtlValue<E>> out;
  out.reserve(live);
  for (const TtlValue<E>& e : list) {
    if (ttl_expired(e.last_access, ttl, now)) continue;
    out.push_back(refresh < 0 ? e : TtlValue<E>{e.value, refresh});
  }
  COWSTATE_ASSERT(out.size() == live, "L3", "a filtered list differs from its live count");
  return R::replace(std::move(out));
}

template <class UK, class UV>
VisitResult<std::map<UK, TtlValue<UV>>> ttl_filter(const std::map<UK, TtlValue<UV>>& m,
                                                   std::int64_t ttl, std::int64_t now,
                                                   std::int64_t refresh = -1) {
  using R = VisitResult<std::map<UK, TtlValue<UV>>>;
  const std::size_t live = ttl_live_count(m, ttl, now);
  if (live == m.size() && refresh < 0) return R::keep();
  if (live == 0 && !COWSTATE_MUTANT(ttl_empty_list_kept)) return R::remove();  // L4
  std::map<UK, TtlValue<UV>> out;
  for (const auto& [k, v] : m) {
    if (ttl_expired(v.last_access, ttl, now)) continue;
    out.emplace_hint(out.end(), k, refresh < 0 ? v : TtlValue<UV>{v.value, refresh});
  }
  COWSTATE_ASSERT(out.size() == live, "L3", "a filtered map differs from its live count");
  return R::replace(std::move(out));
}

// Full-snapshot cleanup: writes the live part of a stored state with serializer SS and
// returns true, or writes nothing and returns false when nothing of it is live.
template <class SS>
bool ttl_write_live(ByteWriter& w, const typename SS::value_type& s, std::int64_t ttl,
                    std::int64_t now);

template <class VS>
struct TtlLiveWriter;
template <class VS>
struct TtlLiveWriter<TtlValueSerializer<VS>> {
  static bool write(ByteWriter& w, const TtlValue<typename VS::value_type>& v, std::int64_t ttl,
                    std::int64_t now) {
    if (ttl_expired(v.last_access, ttl, now)) return false;
    TtlValueSerializer<VS>::write(w, v);
    return true;
  }
};
template <class ES>
struct TtlLiveWriter<ListSerializer<TtlValueSerializer<ES>>> {
  static bool write(ByteWriter& w, const std::vector<TtlValue<typename ES::value_type>>& list,
                    std::int64_t ttl, std::int64_t now) {
    const std::size_t live = ttl_live_count(list, ttl, now);
    if (live == 0) return false;
    COWSTATE_ASSERT(live <= std::numeric_limits<std::uint32_t>::max(), "REQUIRES",
                    "list longer than 2^32-1 elements");
    w.put_u32(static_cast<std::uint32_t>(live));
    for (const auto& e : list) {
      if (!ttl_expired(e.last_access, ttl, now)) TtlValueSerializer<ES>::write(w, e);
    }
    return true;
  }
};
template <class UKS, class UVS>
struct TtlLiveWriter<MapSerializer<UKS, TtlValueSerializer<UVS>>> {
  template <class M>
  static bool write(ByteWriter& w, const M& m, std::int64_t ttl, std::int64_t now) {
    const std::size_t live = ttl_live_count(m, ttl, now);
    if (live == 0) return false;
    COWSTATE_ASSERT(live <= std::numeric_limits<std::uint32_t>::max(), "REQUIRES",
                    "map larger than 2^32-1 entries");
    w.put_u32(static_cast<std::uint32_t>(live));
    for (const auto& [k, v] : m) {
      if (ttl_expired(v.last_access, ttl, now)) continue;
      UKS::write(w, k);
      TtlValueSerializer<UVS>::write(w, v);
    }
    return true;
  }
};

template <class SS>
bool ttl_write_live(ByteWriter& w, const typename SS::value_type& s, std::int64_t ttl,
                    std::int64_t now) {
  return TtlLiveWriter<SS>::write(w, s, ttl, now);
}

}  // namespace cowstate
