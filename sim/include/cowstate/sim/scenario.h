// Scenario files: a race written down as text (docs/scenario-format.md).
//
// A scenario is a configuration, the steps of its tasks and expectations, in file order:
//
//   config capacity=4 hash=identity
//   writer: put k=1 v=10 ; put k=5 v=50
//   writer: snapshot s1
//   writer: put k=1 v=11 pause at map.copy_chain_prefix
//   s1: step 2
//   writer: continue
//   expect s1 = {1:10, 5:50}
//   expect live = {1:11, 5:50}
//
// Tasks are `writer`, `releaser` and one serializer per snapshot, named after it. Under
// `schedule=fixed` (the default) the step lines are the interleaving: each line runs its
// task for one step (an operation, a serializer step, a releaser decision), up to the
// named yield point when it says `pause at`. Under `schedule=free` each task runs its own
// lines in order and the strategy (or `cowstate explore`) chooses the interleaving.
//
// `config workload=backend` makes a scenario drive a keyed state backend instead (tasks
// writer, releaser and one serializer per checkpoint):
//
//   config workload=backend max_parallelism=8 key_groups=0-7
//   writer: value s=count k=3 update 5 ; list s=events k=1 ns=2 add 7
//   writer: checkpoint c1
//   c1: step all
//   writer: checkpoint c2
//   c2: fail at write 2
//   c2: step all
//   expect latest c1
//   writer: restore c1 into 0-3 and 4-7 then merge
//   expect c1 into 4-7 s=events = {(1,2):7}
//
// The value types here are plain data: the parser fills them, the printer writes them
// back (parse(print(x)) == x), the shrinker edits them and the simulator runs them.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <compare>
#include <cstdint>
#include <initializer_list>
#include <istream>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "cowstate/model/state_kind.h"
#include "cowstate/sim/map_ops.h"

namespace cowstate::sim {

class Workload;

namespace detail {
// The interned names: chunk c holds ids [64 (2^c - 1), 64 (2^(c+1) - 1)); a chunk never
// moves once published, so a name's text is read without a lock.
inline constexpr int kNameChunks = 26;
extern std::atomic<const std::string*> name_chunks[kNameChunks];
struct NameSlot {
  int chunk;
  std::uint32_t index;  // within the chunk
};
constexpr NameSlot name_slot(std::uint32_t id) noexcept {
  const int c = static_cast<int>(std::bit_width(id / 64 + 1)) - 1;
  return {c, id - 64 * ((std::uint32_t{1} << c) - 1)};
}
inline const std::string& name_text(std::uint32_t id) noexcept {
  if (id == 0) {  // also readable during static initialization, before the pool exists
    static const std::string empty;
    return empty;
  }
  const NameSlot at = name_slot(id);
  return name_chunks[at.chunk].load(std::memory_order_acquire)[at.index];
}
}  // namespace detail

// A task, snapshot, checkpoint, state or yield-point name, interned: four bytes wide, so a
// step line stays small (a parsed scenario takes a few times its file's size), and equal
// names are equal ids. Reads like a const std::string; the pool of names only grows (a
// process sees few distinct names) and is safe to use from several threads.
class Name {
 public:
  Name() noexcept = default;
  Name(std::string_view s);                                  // NOLINT(google-explicit-constructor)
  Name(const std::string& s) : Name(std::string_view(s)) {}  // NOLINT
  Name(const char* s) : Name(std::string_view(s)) {}         // NOLINT

  const std::string& str() const noexcept { return detail::name_text(id_); }
  operator const std::string&() const noexcept { return str(); }  // NOLINT
  const char* c_str() const noexcept { return str().c_str(); }
  bool empty() const noexcept { return id_ == 0; }
  std::size_t size() const noexcept { return str().size(); }

  friend bool operator==(const Name& a, const Name& b) noexcept { return a.id_ == b.id_; }
  friend bool operator==(const Name& a, std::string_view b) noexcept { return a.str() == b; }
  friend bool operator==(const Name& a, const char* b) noexcept { return a.str() == b; }
  friend bool operator==(const Name& a, const std::string& b) noexcept { return a.str() == b; }
  friend std::strong_ordering operator<=>(const Name& a, const Name& b) noexcept {
    return a.id_ == b.id_ ? std::strong_ordering::equal : a.str() <=> b.str();
  }
  friend std::string operator+(const std::string& a, const Name& b) { return a + b.str(); }
  friend std::string operator+(const Name& a, const std::string& b) { return a.str() + b; }
  friend std::string operator+(const char* a, const Name& b) { return a + b.str(); }
  friend std::string operator+(const Name& a, const char* b) { return a.str() + b; }
  friend std::ostream& operator<<(std::ostream& out, const Name& n) { return out << n.str(); }

 private:
  std::uint32_t id_ = 0;  // 0: the empty name
};

// The entry a step or an expectation names: (key, namespace).
using EntryKey = std::pair<std::uint64_t, std::int32_t>;
using StateValue = std::vector<std::int64_t>;
using ScenarioImage = std::map<EntryKey, StateValue>;

enum class ActionKind : std::uint8_t {
  // map workload, writer: one operation of the map, Action::map_op says which (the writer
  // kinds of cowstate/sim/map_ops.h, each written as its name, snapshot_start as `snapshot`)
  map_op,
  // serializer
  step,
  // releaser
  cancel,
  keep,
  release,
  // any task: finish the step a `pause at` interrupted
  resume,
  // backend workload, writer: an operation on the named state of this kind
  value_state,
  list_state,
  map_state,
  reducing_state,
  aggregating_state,
  checkpoint,  // the sync phase of a checkpoint; its serializer task is named after it
  restore,     // restore a complete checkpoint into fresh backends and compare
  // backend workload, serializer: arm an I/O error at the N-th file operation from now
  fail,
  // backend workload, serializer: the N-th append (budget, from 1) to its data file from now,
  // or (budget 0) its manifest's, is acknowledged but lost (x = 0) or lands at byte x - 1 of
  // the file instead of its end (`lose write 2`, `misdirect manifest to 8`)
  write_fault,
  // backend workload with TTL, clock: move logical time forward by N ms (`advance N`)
  advance,
  // backend workload with async_io, io: the oldest queued buffer of checkpoint `snapshot`'s
  // data file lands on the disk (`land c1`)
  land,
  // backend workload with TTL, writer: incremental cleanup of N entries of a state
  // (`cleanup s=events n=8`)
  cleanup,
  // backend workload, writer, with no checkpoint in flight: power loss right after disk
  // operation x (the later ones never happened), the pending operations decided by a
  // stream seeded with extras.salt; then the restart, which may meet read fault `budget`
  // (kReadFaultNames) at position entry.first (`power_loss after=40 keep=7 read=flip at=9`)
  power_loss,
  // backend workload with a memory budget, writer: move one (state, key group) to the cold
  // tier, or back to the heap (`spill s=count g=3`, `load s=count g=3`; key group in `x`)
  spill,
  load,
};
// The read faults a restart may meet, kept in Action::budget: a flipped bit, a zeroed
// sector, a sector read from another, a short read of the newest checkpoint's data file, or
// a flipped bit of its manifest. kReadFaultNames is indexed by them.
enum class ReadFault : std::uint32_t { none, flip, zero, misdirect, short_read, manifest };
inline constexpr const char* kReadFaultNames[] = {"none",      "flip",  "zero",
                                                  "misdirect", "short", "manifest"};
inline ReadFault read_fault_of(std::uint32_t budget) noexcept {
  return static_cast<ReadFault>(budget);
}
// A power loss's crash point counted back from the last disk operation (`after=now-K`) is
// kept in Action::x as -(K + 1); x >= 0 is an operation number.
constexpr std::int64_t crash_point_back(std::uint64_t k) noexcept {
  return -static_cast<std::int64_t>(k) - 1;
}
constexpr std::optional<std::uint64_t> crash_point_back_of(std::int64_t x) noexcept {
  return x < 0 ? std::optional<std::uint64_t>(static_cast<std::uint64_t>(-(x + 1))) : std::nullopt;
}
// The writer's map operations: every one but snapshot_release, which the releaser task
// does. A generated operation is written down as a scenario step unchanged.
inline constexpr std::array<OpKind, kOpKindCount - 1> kWriterOps = [] {
  std::array<OpKind, kOpKindCount - 1> ops{};
  std::size_t n = 0;
  for (const OpKind kind : kOpKinds) {
    if (kind != OpKind::snapshot_release) ops[n++] = kind;
  }
  return ops;
}();

// As written in files ("continue"); "a map operation" for map_op, whose words op_word() gives.
const char* action_name(ActionKind kind) noexcept;
// The word of a map operation in files: its name, `snapshot` for snapshot_start.
const char* op_word(OpKind kind) noexcept;

// What `get_mutable ... then M` does to the state it was handed.
enum class Mutation : std::uint8_t {
  append,     // push x
  overwrite,  // s[x mod size] = -x (append x when empty)
  pop,        // drop the last element (append x when empty)
};

// What a backend writer action does to its state (`list s=events k=3 add 7`).
using StateOp = model::StateOp;  // the keyed-state model's list (get, update, ...)
const char* state_op_name(StateOp op) noexcept;

// An inclusive key-group range as a scenario writes it (`0-3`); empty when last < first.
struct GroupRange {
  std::int32_t first = 0;
  std::int32_t last = -1;
  bool empty() const { return last < first; }
  bool operator==(const GroupRange&) const = default;
};

// The numbers one step carries (put's value, a list's elements): one inline, more on the
// heap, sixteen bytes either way. Reads like a std::vector<std::int64_t>; converts to and
// compares with a StateValue.
class StepValues {
 public:
  StepValues() noexcept : one_(0) {}
  StepValues(std::initializer_list<std::int64_t> v) : StepValues() { assign(v.begin(), v.size()); }
  StepValues(const StateValue& v) : StepValues() { assign(v.data(), v.size()); }  // NOLINT
  StepValues(const StepValues& o) : StepValues() { assign(o.begin(), o.size_); }
  StepValues(StepValues&& o) noexcept : one_(o.one_), size_(o.size_) { o.release(); }
  StepValues& operator=(const StepValues& o) {
    if (this != &o) assign(o.begin(), o.size_);
    return *this;
  }
  StepValues& operator=(StepValues&& o) noexcept {
    if (this != &o) {
      free();
      one_ = o.one_;
      size_ = o.size_;
      o.release();
    }
    return *this;
  }
  ~StepValues() { free(); }

  bool empty() const noexcept { return size_ == 0; }
  std::size_t size() const noexcept { return size_; }
  std::int64_t* begin() noexcept { return size_ <= 1 ? &one_ : many_; }
  std::int64_t* end() noexcept { return begin() + size_; }
  const std::int64_t* begin() const noexcept { return size_ <= 1 ? &one_ : many_; }
  const std::int64_t* end() const noexcept { return begin() + size_; }
  std::int64_t& operator[](std::size_t i) noexcept { return begin()[i]; }
  const std::int64_t& operator[](std::size_t i) const noexcept { return begin()[i]; }
  void clear() noexcept { resize(0); }
  void pop_back() noexcept { resize(size_ - 1); }
  void resize(std::size_t n) {  // new elements are 0
    StateValue v(begin(), end());
    v.resize(n);
    assign(v.data(), v.size());
  }
  operator StateValue() const { return StateValue(begin(), end()); }  // NOLINT

  friend bool operator==(const StepValues& a, const StepValues& b) noexcept {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator==(const StepValues& a, const StateValue& b) noexcept {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  void assign(const std::int64_t* p, std::size_t n) {
    if (n > 0xffffffffu) throw std::length_error("StepValues: too many values");
    std::int64_t* many = n > 1 ? new std::int64_t[n] : nullptr;
    if (many != nullptr) std::copy_n(p, n, many);
    const std::int64_t one = n == 1 ? *p : 0;
    free();
    if (many != nullptr) {
      many_ = many;
    } else {
      one_ = one;
    }
    size_ = static_cast<std::uint32_t>(n);
  }
  void free() noexcept {
    if (size_ > 1) delete[] many_;
  }
  void release() noexcept {
    one_ = 0;
    size_ = 0;
  }

  union {
    std::int64_t one_;    // size_ <= 1
    std::int64_t* many_;  // size_ > 1: size_ elements
  };
  std::uint32_t size_ = 0;
};

// What only a few actions carry: visit's salt, restore's ranges, merge's sources.
struct ActionExtras {
  std::uint64_t salt = 0;             // visit: which entries the visitor replaces or removes
  GroupRange into, also;              // restore: one target range, or two (a split)
  bool merge_back = false;            // restore: then merge the two halves' checkpoints
  std::vector<std::int32_t> sources;  // merge: the source namespaces
  bool operator==(const ActionExtras&) const = default;
};

// A T that most values leave at its default, kept on the heap only when set: one pointer wide
// otherwise. Copies deeply; compares as T (an unset value equals a default T).
template <class T>
class Sparse {
 public:
  Sparse() = default;
  Sparse(const Sparse& o) : p_(o.p_ ? std::make_unique<T>(*o.p_) : nullptr) {}
  Sparse(Sparse&&) noexcept = default;
  Sparse& operator=(const Sparse& o) {
    if (this != &o) p_ = o.p_ ? std::make_unique<T>(*o.p_) : nullptr;
    return *this;
  }
  Sparse& operator=(Sparse&&) noexcept = default;
  ~Sparse() = default;
  const T& get() const noexcept { return p_ ? *p_ : default_value(); }
  T& set() {  // the value to change, allocated on first use
    if (!p_) p_ = std::make_unique<T>();
    return *p_;
  }
  friend bool operator==(const Sparse& a, const Sparse& b) { return a.get() == b.get(); }

 private:
  static const T& default_value() noexcept {
    static const T value{};
    return value;
  }
  std::unique_ptr<T> p_;
};

struct Action {
  // Packed without holes: a scenario holds one Action per step line.
  ActionKind kind = ActionKind::map_op;
  OpKind map_op = OpKind::get;           // map_op
  Mutation mutation = Mutation::append;  // get_mutable
  StateOp op = StateOp::get;             // backend state actions
  std::uint32_t budget = 0;  // visit: buckets; step: entries, 0 = all that are left; cleanup
  Name snapshot;             // snapshot, cancel, keep, release; checkpoint, restore
  Name state;                // backend state actions: the state's name
  EntryKey entry{0, 0};      // keyed writer operations
  std::int64_t x = 0;        // get_mutable, transform (append x); advance: ms
  StepValues value;          // put, put_and_get_old; backend: values and list elements
  Sparse<ActionExtras> extras;
  bool operator==(const Action&) const = default;

  // Whether this is the map operation `k`.
  bool is(OpKind k) const noexcept { return kind == ActionKind::map_op && map_op == k; }
};
// As written in files: the action's word ("put", "snapshot", "continue").
const char* action_name(const Action& a) noexcept;

// The simpler variants of an action the shrinker tries: each change applied to a copy of
// the action, kept when it changed something.
class ActionVariants {
 public:
  explicit ActionVariants(const Action& a) : a_(a) {}
  template <class Change>
  void add(Change&& change) {
    Action b = a_;
    change(b);
    if (!(b == a_)) out_.push_back(std::move(b));
  }
  std::vector<Action> take() { return std::move(out_); }

 private:
  const Action& a_;
  std::vector<Action> out_;
};

// One step line (or one `;`-separated part of it).
struct StepLine {
  Name task;     // writer, releaser, or a snapshot's name
  Name pause;    // yield point the step stops at; empty: the step runs to its end
  int line = 0;  // source position, not part of equality
  int column = 0;
  Action action;
  bool operator==(const StepLine& o) const {
    return task == o.task && action == o.action && pause == o.pause;
  }
};

enum class ExpectKind : std::uint8_t {
  image,     // expect NAME = {...} / expect live = {...}
  copied,    // expect copied entries={...} states={...}: what the last writer step copied
  versions,  // expect versions map=M h=H
  retired,   // expect retired entries=E states=S
  failure,   // expect failure CHECK: the run must fail at this check
  latest,    // expect latest NAME|none: the storage's newest complete checkpoint
};

struct Expectation {
  ExpectKind kind = ExpectKind::image;
  Name target;  // image: snapshot name or "live"; failure: the check id
  ScenarioImage image;
  std::set<EntryKey> copied_entries, copied_states;
  std::uint64_t a = 0, b = 0;  // versions: map, h; retired: entries, states
  Name state;                  // backend image: the state it is about
  GroupRange into;             // backend image of a checkpoint: restored into this range
  int line = 0;                // not part of equality
  int column = 0;
  bool operator==(const Expectation& o) const {
    return kind == o.kind && target == o.target && image == o.image &&
           copied_entries == o.copied_entries && copied_states == o.copied_states && a == o.a &&
           b == o.b && state == o.state && into == o.into;
  }
};

// A value that lives on the heap and copies deeply: what keeps a rare, large alternative
// (an Expectation) from making every item of a scenario as large as itself.
template <class T>
class Boxed {
 public:
  Boxed(T value) : p_(std::make_unique<T>(std::move(value))) {}  // NOLINT(google-explicit-*)
  Boxed(const Boxed& o) : p_(std::make_unique<T>(*o.p_)) {}
  Boxed(Boxed&&) noexcept = default;
  Boxed& operator=(const Boxed& o) {
    if (this != &o) *p_ = *o.p_;
    return *this;
  }
  Boxed& operator=(Boxed&&) noexcept = default;
  ~Boxed() = default;
  T& operator*() noexcept { return *p_; }
  const T& operator*() const noexcept { return *p_; }
  T* operator->() noexcept { return p_.get(); }
  const T* operator->() const noexcept { return p_.get(); }
  friend bool operator==(const Boxed& a, const Boxed& b) { return *a.p_ == *b.p_; }

 private:
  std::unique_ptr<T> p_;  // never null (a moved-from Boxed is only destroyed or assigned)
};

using ScenarioItem = std::variant<StepLine, Boxed<Expectation>>;
// The item as a step line or an expectation; nullptr when it is the other.
inline const StepLine* step_of(const ScenarioItem& item) { return std::get_if<StepLine>(&item); }
inline StepLine* step_of(ScenarioItem& item) { return std::get_if<StepLine>(&item); }
inline const Expectation* expectation_of(const ScenarioItem& item) {
  const auto* b = std::get_if<Boxed<Expectation>>(&item);
  return b != nullptr ? &**b : nullptr;
}
inline Expectation* expectation_of(ScenarioItem& item) {
  auto* b = std::get_if<Boxed<Expectation>>(&item);
  return b != nullptr ? &**b : nullptr;
}

struct ScenarioConfig {
  std::uint32_t initial_capacity = 4;
  std::uint32_t min_capacity = 4;
  std::uint32_t max_capacity = 1u << 30;
  bool identity_hash = false;  // bucket = (key + ns) mod capacity: collisions on demand
  bool track_changes = false;  // changes=tracked: the map workload's change tracking
  bool fixed_schedule = true;
  std::uint64_t seed = 1;           // free schedules: the strategy's seed
  std::string strategy = "random";  // free schedules: random or pct
  std::uint32_t pct_depth = 3;
  // workload=NAME (cowstate/sim/workload.h): which simulation runs the scenario, and which
  // language its lines are in; backend: a keyed backend instead of one map (capacities apply
  // to its maps, and the settings below are the backend's)
  Name workload = "map";
  std::int32_t max_parallelism = 8;
  GroupRange key_groups{0, 7};  // the backend's own range
  // ttl=MS: the count, events and attrs states have a TTL of MS on a logical clock that a
  // `clock` task advances (0: no TTL). The other settings are its StateTtlConfig.
  std::uint64_t ttl_ms = 0;
  bool ttl_read_refresh = false;    // ttl_update=read (OnReadAndWrite); write by default
  bool ttl_return_expired = false;  // ttl_visibility=expired (ReturnExpiredIfNotCleanedUp)
  std::uint32_t ttl_cleanup = 5;    // incremental cleanup size; 0 = none (ttl_cleanup=none)
  bool ttl_key_switch = false;      // ttl_key_switch=on: incremental cleanup on key switches
  bool ttl_full_snapshot = false;   // ttl_full_snapshot=on: full-snapshot cleanup
  // async_io=on: checkpoints' data files are written through async files whose queued
  // buffers land when an `io` task says (cowstate/async_file.h, ManualIo)
  bool async_io = false;
  std::uint32_t io_buffer_bytes = 64;  // io_buffer=BYTES: their buffers' size
  // budget=BYTES: the backend's memory budget (SpillOptions::memory_budget_bytes), which
  // gives it a cold tier and FLIP-50's spill/load manager; 0: neither. spill_check=N: the
  // manager checks every N key switches (0: never by itself, only `spill`/`load` steps
  // move key groups); cold_cache=PERCENT: the cold cache's share of the budget.
  std::uint64_t budget_bytes = 0;
  std::uint32_t spill_check = 1;
  std::uint32_t cold_cache_percent = 25;
  // incremental=N: the backend writes incremental checkpoints, every N-th of a chain full
  // (IncrementalCheckpointOptions::full_every); 0: full checkpoints only.
  std::uint32_t incremental = 0;
  bool operator==(const ScenarioConfig&) const = default;
};

struct Scenario {
  ScenarioConfig config;
  std::string kills;  // negative scenarios: the mutant this scenario must kill
  // Negative scenarios: the most steps `cowstate mutants` accepts of a shrunk kill of that
  // mutant (0: twice this scenario's steps).
  std::uint32_t shrunk_at_most = 0;
  std::vector<ScenarioItem> items;
  std::string file;  // where it was read from (messages only; not part of equality)
  bool operator==(const Scenario& o) const {
    return config == o.config && kills == o.kills && shrunk_at_most == o.shrunk_at_most &&
           items == o.items;
  }

  // Number of step lines (the size the shrinker minimizes).
  std::size_t step_count() const;
};

struct ParseError {
  std::string file;
  int line = 0;
  int column = 0;
  std::string message;            // "expected X, found Y"
  std::string to_string() const;  // file:line:col: message
};

// Parses a scenario; on failure returns nullopt and fills *error. A scenario without a
// step line is an error: there would be nothing to run.
std::optional<Scenario> parse_scenario(std::string_view text, const std::string& file,
                                       ParseError* error);
// The same from a stream read line by line, so the text is never held whole; `items_max`
// bounds the items it can make (scenario_items_max() of its text) and sizes the item array
// once.
std::optional<Scenario> parse_scenario(std::istream& in, std::size_t items_max,
                                       const std::string& file, ParseError* error);
// Lines plus `;` separators plus one: no scenario of this text has more items.
std::size_t scenario_items_max(std::string_view text);
// Writes a scenario in the same format; `header` lines are written first as comments.
std::string print_scenario(const Scenario& scenario, const std::string& header = "");
// One step line of a `workload` scenario as written after `task:` ("put k=1 v=10 pause at
// map.insert_new"); the workload writes what follows a writer action's word.
std::string print_action(const StepLine& line, const Workload& workload);
// An image as written in an expectation; `sequences` writes every value in brackets, as a
// list state's values are (`{2:[1]}`), instead of a one-element value bare (`{2:1}`).
std::string print_image(const ScenarioImage& image, bool sequences = false);
// One expectation line as written ("expect s1 = {1:10}").
std::string print_expectation(const Expectation& e, const Workload& workload);

// The yield points production code names (COWSTATE_YIELD), for validating `pause at`.
const std::vector<std::string>& yield_points();

}  // namespace cowstate::sim
