// The keyed state behaviour suite, written once and run on two subjects (STYLE.md, "Tests"):
//
//   Model     model::KeyedStateModel, the reference semantics. Running the suite on it
//             first proves the suite: every expectation below is written by hand, not read
//             from the model, and the model must answer exactly the results listed.
//   Backend   KeyedStateBackend's five state kinds on a manual TTL clock. A read returns
//             one result, which must be one of those listed (with
//             ReturnExpiredIfNotCleanedUp an expired value may or may not be returned,
//             depending on whether cleanup removed it first).
//
// Both have the backend simulation's states: count (value, default -1), events (list),
// attrs (map int64 -> int64), sum (reducing, +) and avg (aggregating, integer mean); with
// a TTL, count, events and attrs have it.
#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cowstate/keyed_state_backend.h"
#include "cowstate/model/keyed_state_model.h"
#include "cowstate/serializers.h"
#include "cowstate/ttl.h"

namespace {

using cowstate::model::StateOp;
using Key = std::uint64_t;
using Ns = std::int32_t;
using V = std::vector<std::int64_t>;
using Call = cowstate::model::StateCall<Ns>;
using Result = cowstate::model::StateResult;
using Results = std::vector<Result>;

constexpr std::int64_t kDefault = -1;

struct TtlOptions {
  std::int64_t ttl = 0;  // 0: no TTL
  bool refresh_on_read = false;
  bool return_expired = false;
};

class ModelSubject {
 public:
  static constexpr bool kExact = true;
  explicit ModelSubject(TtlOptions o = {}) : model_(rules(o)) {
    using cowstate::model::StateKind;
    auto reg = [&](const char* name, StateKind kind, bool ttl) {
      cowstate::model::StateSpec spec;
      spec.kind = kind;
      spec.ttl = ttl && o.ttl != 0;
      spec.default_value = kDefault;
      model_.register_state(name, std::move(spec));
    };
    reg("count", StateKind::value, true);
    reg("events", StateKind::list, true);
    reg("attrs", StateKind::map, true);
    reg("sum", StateKind::reducing, false);
    reg("avg", StateKind::aggregating, false);
  }
  void set_key(Key k) { key_ = k; }
  void advance(std::int64_t ms) { now_ += ms; }
  Results call(const std::string& state, Ns ns, const Call& c) {
    return model_.apply(state, key_, ns, c, now_).results;
  }

 private:
  static std::optional<cowstate::model::TtlModel> rules(TtlOptions o) {
    if (o.ttl == 0) return std::nullopt;
    return cowstate::model::TtlModel(o.ttl, o.refresh_on_read, o.return_expired);
  }
  cowstate::model::KeyedStateModel<Key, Ns> model_;
  Key key_ = 0;
  std::int64_t now_ = 0;
};

class BackendSubject {
 public:
  static constexpr bool kExact = false;
  explicit BackendSubject(TtlOptions o = {})
      : backend_(cowstate::KeyGroupRange::all(128), 128, {}, &clock_) {
    using namespace cowstate;
    StateOptions with_ttl;
    if (o.ttl != 0) {
      StateTtlConfig t;
      t.ttl_ms = static_cast<std::uint64_t>(o.ttl);
      t.update_type = o.refresh_on_read ? StateTtlConfig::UpdateType::on_read_and_write
                                        : StateTtlConfig::UpdateType::on_create_and_write;
      t.visibility = o.return_expired ? StateTtlConfig::Visibility::return_expired_if_not_cleaned_up
                                      : StateTtlConfig::Visibility::never_return_expired;
      with_ttl.ttl = t;
    }
    count_ = &backend_.value_state<Int32Serializer, Int64Serializer>("count", kDefault, with_ttl);
    events_ = &backend_.list_state<Int32Serializer, Int64Serializer>("events", with_ttl);
    attrs_ =
        &backend_.map_state<Int32Serializer, Int64Serializer, Int64Serializer>("attrs", with_ttl);
    sum_ = &backend_.reducing_state<Int32Serializer, Int64Serializer>(
        "sum", [](const std::int64_t& x, const std::int64_t& y) { return x + y; });
    avg_ = &backend_.aggregating_state<Int32Serializer, VectorInt64Serializer, std::int64_t,
                                       std::int64_t>("avg", average());
  }
  void set_key(Key k) { REQUIRE(backend_.set_current_key(k).ok()); }
  void advance(std::int64_t ms) { clock_.set(clock_.current_timestamp() + ms); }
  Results call(const std::string& state, Ns ns, const Call& c) {
    if (state == "count") return on_value(ns, c);
    if (state == "events") return on_list(ns, c);
    if (state == "attrs") return on_map(ns, c);
    if (state == "sum") return on_merging(*sum_, ns, c);
    return on_merging(*avg_, ns, c);
  }

 private:
  using Backend = cowstate::KeyedStateBackend<cowstate::UInt64Serializer>;
  static cowstate::AggregateFunction<std::int64_t, V, std::int64_t> average() {
    return {[] {
              return V{0, 0};
            },
            [](const std::int64_t& in, V acc) {
              acc[0] += in;
              acc[1] += 1;
              return acc;
            },
            [](const V& acc) { return acc[1] == 0 ? 0 : acc[0] / acc[1]; },
            [](V a, const V& b) {
              a[0] += b[0];
              a[1] += b[1];
              return a;
            }};
  }
  template <class T>
  static Results some(const std::optional<T>& v) {
    return {v ? Result(V{*v}) : std::nullopt};
  }
  Results on_value(Ns ns, const Call& c) {
    count_->set_current_namespace(ns);
    if (c.op == StateOp::get) return {V{count_->value()}};
    if (c.op == StateOp::update) count_->update(c.x);
    if (c.op == StateOp::clear) count_->clear();
    return {};
  }
  Results on_list(Ns ns, const Call& c) {
    events_->set_current_namespace(ns);
    if (c.op == StateOp::get) return {events_->get()};
    if (c.op == StateOp::add) events_->add(c.x);
    if (c.op == StateOp::add_all) events_->add_all(c.values);
    if (c.op == StateOp::update) events_->update(c.values);
    if (c.op == StateOp::merge) events_->merge_namespaces(ns, c.sources);
    if (c.op == StateOp::clear) events_->clear();
    return {};
  }
  Results on_map(Ns ns, const Call& c) {
    attrs_->set_current_namespace(ns);
    if (c.op == StateOp::get) return some(attrs_->get(c.x));
    if (c.op == StateOp::put) attrs_->put(c.x, c.y);
    if (c.op == StateOp::remove) attrs_->remove(c.x);
    if (c.op == StateOp::clear) attrs_->clear();
    return {};
  }
  template <class S>
  static Results on_merging(S& s, Ns ns, const Call& c) {
    s.set_current_namespace(ns);
    if (c.op == StateOp::get) return some(s.get());
    if (c.op == StateOp::add) s.add(c.x);
    if (c.op == StateOp::merge) s.merge_namespaces(ns, c.sources);
    if (c.op == StateOp::clear) s.clear();
    return {};
  }

  cowstate::ManualTtlClock clock_;
  Backend backend_;
  cowstate::ValueState<Backend, cowstate::Int32Serializer, cowstate::Int64Serializer>* count_;
  cowstate::ListState<Backend, cowstate::Int32Serializer, cowstate::Int64Serializer>* events_;
  cowstate::MapState<Backend, cowstate::Int32Serializer, cowstate::Int64Serializer,
                     cowstate::Int64Serializer>* attrs_;
  cowstate::ReducingState<Backend, cowstate::Int32Serializer, cowstate::Int64Serializer>* sum_;
  cowstate::AggregatingState<Backend, cowstate::Int32Serializer, cowstate::VectorInt64Serializer,
                             std::int64_t, std::int64_t>* avg_;
};

// The operations, as the suite writes them.
Call op(StateOp o, std::int64_t x = 0, std::int64_t y = 0, V values = {},
        std::vector<Ns> sources = {}) {
  Call c;
  c.op = o;
  c.x = x;
  c.y = y;
  c.values = std::move(values);
  c.sources = std::move(sources);
  return c;
}
Call get(std::int64_t user_key = 0) { return op(StateOp::get, user_key); }
Call update(std::int64_t x) { return op(StateOp::update, x); }
Call update_list(V elements) { return op(StateOp::update, 0, 0, std::move(elements)); }
Call add(std::int64_t x) { return op(StateOp::add, x); }
Call add_all(V elements) { return op(StateOp::add_all, 0, 0, std::move(elements)); }
Call put(std::int64_t user_key, std::int64_t value) { return op(StateOp::put, user_key, value); }
Call remove(std::int64_t user_key) { return op(StateOp::remove, user_key); }
Call clear() { return op(StateOp::clear); }
Call merge_from(std::vector<Ns> sources) {
  return op(StateOp::merge, 0, 0, {}, std::move(sources));
}

const Result kAbsent = std::nullopt;

// Whether `got` answers as `allowed` says: the model with exactly these results (in any
// order), the backend with one of them.
template <class S>
bool answers(const Results& got, const Results& allowed) {
  auto in = [](const Results& set, const Result& r) {
    for (const Result& a : set) {
      if (a == r) return true;
    }
    return false;
  };
  if constexpr (S::kExact) {
    for (const Result& r : got) {
      if (!in(allowed, r)) return false;
    }
    for (const Result& r : allowed) {
      if (!in(got, r)) return false;
    }
    return true;
  } else {
    return got.size() == 1 && in(allowed, got[0]);
  }
}

#define SUBJECTS ModelSubject, BackendSubject

}  // namespace

TEMPLATE_TEST_CASE("a value state returns its default until updated, and again after clear",
                   "[keyed-state][value]", SUBJECTS) {
  TestType s;
  s.set_key(1);
  CHECK(answers<TestType>(s.call("count", 0, get()), {V{kDefault}}));
  CHECK(s.call("count", 0, update(42)).empty());  // a write answers nothing
  CHECK(answers<TestType>(s.call("count", 0, get()), {V{42}}));
  CHECK(answers<TestType>(s.call("count", 3, get()), {V{kDefault}}));  // scoped by namespace
  s.set_key(2);
  CHECK(answers<TestType>(s.call("count", 0, get()), {V{kDefault}}));  // scoped by key
  s.set_key(1);
  s.call("count", 0, clear());
  CHECK(answers<TestType>(s.call("count", 0, get()), {V{kDefault}}));
}

TEMPLATE_TEST_CASE("the first add or add_all of a key and namespace makes its list",
                   "[keyed-state][list]", SUBJECTS) {
  TestType s;
  s.set_key(3);
  s.call("events", 0, add_all({5, 6}));
  CHECK(answers<TestType>(s.call("events", 0, get()), {V{5, 6}}));
  s.call("events", 1, add(7));
  CHECK(answers<TestType>(s.call("events", 1, get()), {V{7}}));
  s.set_key(4);
  s.call("events", 0, add_all({8}));
  s.call("events", 0, add_all({9, 10}));
  CHECK(answers<TestType>(s.call("events", 0, get()), {V{8, 9, 10}}));
  s.set_key(3);
  CHECK(answers<TestType>(s.call("events", 0, get()), {V{5, 6}}));
}

TEMPLATE_TEST_CASE("a list state adds, adds all, updates and reads, and an empty update clears it",
                   "[keyed-state][list]", SUBJECTS) {
  TestType s;
  s.set_key(5);
  CHECK(answers<TestType>(s.call("events", 0, get()), {V{}}));
  s.call("events", 0, add(1));
  s.call("events", 0, add(2));
  s.call("events", 0, add_all({3, 4}));
  s.call("events", 0, add_all({}));
  CHECK(answers<TestType>(s.call("events", 0, get()), {V{1, 2, 3, 4}}));
  CHECK(answers<TestType>(s.call("events", 9, get()), {V{}}));
  s.call("events", 9, update_list({7, 8}));
  CHECK(answers<TestType>(s.call("events", 9, get()), {V{7, 8}}));
  s.call("events", 9, update_list({}));
  CHECK(answers<TestType>(s.call("events", 9, get()), {V{}}));
  s.call("events", 0, clear());
  CHECK(answers<TestType>(s.call("events", 0, get()), {V{}}));
}

TEMPLATE_TEST_CASE("a map state puts, gets and removes user keys", "[keyed-state][map]", SUBJECTS) {
  TestType s;
  s.set_key(3);
  CHECK(answers<TestType>(s.call("attrs", 0, get(7)), {kAbsent}));
  s.call("attrs", 0, put(7, 1));
  s.call("attrs", 0, put(8, 2));
  s.call("attrs", 0, put(7, 10));  // overwrites
  CHECK(answers<TestType>(s.call("attrs", 0, get(7)), {V{10}}));
  CHECK(answers<TestType>(s.call("attrs", 0, get(8)), {V{2}}));
  CHECK(answers<TestType>(s.call("attrs", 1, get(7)), {kAbsent}));
  s.call("attrs", 0, remove(9));  // absent: nothing happens
  s.call("attrs", 0, remove(7));
  CHECK(answers<TestType>(s.call("attrs", 0, get(7)), {kAbsent}));
  CHECK(answers<TestType>(s.call("attrs", 0, get(8)), {V{2}}));
  s.call("attrs", 0, remove(8));  // the last one
  CHECK(answers<TestType>(s.call("attrs", 0, get(8)), {kAbsent}));
  s.call("attrs", 0, put(1, 1));
  s.call("attrs", 0, clear());
  CHECK(answers<TestType>(s.call("attrs", 0, get(1)), {kAbsent}));
}

TEMPLATE_TEST_CASE("a reducing state folds added values, an aggregating state returns its result",
                   "[keyed-state][reducing][aggregating]", SUBJECTS) {
  TestType s;
  s.set_key(3);
  CHECK(answers<TestType>(s.call("sum", 0, get()), {kAbsent}));
  CHECK(answers<TestType>(s.call("avg", 0, get()), {kAbsent}));
  s.call("sum", 0, add(5));
  s.call("sum", 0, add(6));
  CHECK(answers<TestType>(s.call("sum", 0, get()), {V{11}}));
  s.call("sum", 0, clear());
  CHECK(answers<TestType>(s.call("sum", 0, get()), {kAbsent}));
  for (std::int64_t x : {10, 20, 61}) s.call("avg", 0, add(x));
  CHECK(answers<TestType>(s.call("avg", 0, get()), {V{30}}));  // 91 / 3, rounded down
}

TEMPLATE_TEST_CASE("merging namespaces combines the sources into the target, in order",
                   "[keyed-state][merge]", SUBJECTS) {
  TestType s;
  s.set_key(11);
  for (Ns ns : {0, 1, 3}) {
    s.call("events", ns, add(ns * 10));
    s.call("sum", ns, add(ns * 10));
    s.call("avg", ns, add(ns * 10 + 4));
  }
  for (const char* state : {"events", "sum", "avg"}) s.call(state, 0, merge_from({1, 2, 3}));
  CHECK(answers<TestType>(s.call("events", 0, get()), {V{0, 10, 30}}));  // the target first
  CHECK(answers<TestType>(s.call("sum", 0, get()), {V{40}}));
  CHECK(answers<TestType>(s.call("avg", 0, get()), {V{(4 + 14 + 34) / 3}}));
  for (Ns ns : {1, 2, 3}) {  // the sources are gone
    CHECK(answers<TestType>(s.call("events", ns, get()), {V{}}));
    CHECK(answers<TestType>(s.call("sum", ns, get()), {kAbsent}));
    CHECK(answers<TestType>(s.call("avg", ns, get()), {kAbsent}));
  }
  s.call("sum", 5, merge_from({0}));  // into an absent target
  CHECK(answers<TestType>(s.call("sum", 5, get()), {V{40}}));
  s.call("sum", 6, merge_from({8, 9}));  // from absent sources only
  CHECK(answers<TestType>(s.call("sum", 6, get()), {kAbsent}));
}

TEMPLATE_TEST_CASE("a TTL value is live before last access + ttl and expired at that instant",
                   "[keyed-state][ttl]", SUBJECTS) {
  TestType s(TtlOptions{.ttl = 10});
  s.set_key(1);
  s.call("count", 0, update(7));  // at 0
  s.advance(9);
  CHECK(answers<TestType>(s.call("count", 0, get()), {V{7}}));  // OnCreateAndWrite: no refresh
  s.call("count", 1, update(8));                                // at 9
  s.advance(1);
  CHECK(answers<TestType>(s.call("count", 0, get()), {V{kDefault}}));  // 0 + 10 <= 10
  CHECK(answers<TestType>(s.call("count", 1, get()), {V{8}}));
  s.call("count", 1, update(9));  // at 10: an update stamps again
  s.advance(9);
  CHECK(answers<TestType>(s.call("count", 1, get()), {V{9}}));
  s.call("count", 1, clear());
  CHECK(answers<TestType>(s.call("count", 1, get()), {V{kDefault}}));
}

TEMPLATE_TEST_CASE("OnReadAndWrite refreshes a TTL value on every live read", "[keyed-state][ttl]",
                   SUBJECTS) {
  TestType s(TtlOptions{.ttl = 10, .refresh_on_read = true});
  s.set_key(1);
  s.call("count", 0, update(7));
  s.call("attrs", 0, put(1, 70));
  s.advance(9);
  CHECK(answers<TestType>(s.call("count", 0, get()), {V{7}}));  // refreshed to 9
  CHECK(answers<TestType>(s.call("attrs", 0, get(1)), {V{70}}));
  s.advance(9);
  CHECK(answers<TestType>(s.call("count", 0, get()), {V{7}}));  // 9 + 10 > 18
  CHECK(answers<TestType>(s.call("attrs", 0, get(1)), {V{70}}));
  s.advance(10);
  CHECK(answers<TestType>(s.call("count", 0, get()), {V{kDefault}}));
  CHECK(answers<TestType>(s.call("attrs", 0, get(1)), {kAbsent}));
}

TEMPLATE_TEST_CASE("ReturnExpiredIfNotCleanedUp may return an expired value once",
                   "[keyed-state][ttl]", SUBJECTS) {
  TestType s(TtlOptions{.ttl = 10, .return_expired = true});
  s.set_key(1);
  s.call("count", 0, update(7));
  s.call("attrs", 0, put(1, 70));
  s.advance(10);
  CHECK(answers<TestType>(s.call("count", 0, get()), {V{kDefault}, V{7}}));
  CHECK(answers<TestType>(s.call("attrs", 0, get(1)), {kAbsent, V{70}}));
  // The read removed it: never again.
  CHECK(answers<TestType>(s.call("count", 0, get()), {V{kDefault}}));
  CHECK(answers<TestType>(s.call("attrs", 0, get(1)), {kAbsent}));
}

TEMPLATE_TEST_CASE("TTL list elements and map user keys expire one by one", "[keyed-state][ttl]",
                   SUBJECTS) {
  TestType s(TtlOptions{.ttl = 10});
  s.set_key(2);
  s.call("events", 0, add(1));  // at 0
  s.call("attrs", 0, put(1, 10));
  s.advance(5);
  s.call("events", 0, add_all({2, 3}));  // at 5
  s.call("attrs", 0, put(2, 20));
  s.advance(5);
  CHECK(answers<TestType>(s.call("events", 0, get()), {V{2, 3}}));
  CHECK(answers<TestType>(s.call("attrs", 0, get(1)), {kAbsent}));
  CHECK(answers<TestType>(s.call("attrs", 0, get(2)), {V{20}}));
  s.call("events", 0, update_list({4}));  // at 10: replaces all, stamped now
  s.advance(9);
  CHECK(answers<TestType>(s.call("events", 0, get()), {V{4}}));
  s.advance(1);
  CHECK(answers<TestType>(s.call("events", 0, get()), {V{}}));
  CHECK(answers<TestType>(s.call("attrs", 0, get(2)), {kAbsent}));
}

TEMPLATE_TEST_CASE("merged TTL list elements keep their last-access times",
                   "[keyed-state][ttl][merge]", SUBJECTS) {
  TestType s(TtlOptions{.ttl = 10});
  s.set_key(4);
  s.call("events", 1, add(1));  // at 0, in namespace 1
  s.advance(5);
  s.call("events", 0, add(2));  // at 5, in the target
  s.call("events", 0, merge_from({1}));
  CHECK(answers<TestType>(s.call("events", 0, get()), {V{2, 1}}));
  s.advance(5);  // the merged element was stamped 0, not 5: expired now
  CHECK(answers<TestType>(s.call("events", 0, get()), {V{2}}));
  CHECK(answers<TestType>(s.call("events", 1, get()), {V{}}));
}
