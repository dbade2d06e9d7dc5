// Scenario files: the parser's errors, the printer (parse(print(x)) == x as a RapidCheck
// property), fixed and free schedules, expectations, recorded runs replayed as scenarios,
// and the shrinker.
#include "cowstate/sim/scenario.h"

#include <rapidcheck.h>
#include <rapidcheck/catch.h>

#include <catch2/catch.hpp>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "backend/scenario_lines.h"
#include "cowstate/sim/campaign.h"
#include "cowstate/sim/run.h"
#include "cowstate/sim/shrink.h"

using namespace cowstate::sim;

// RapidCheck prints counterexamples through showValue: a scenario shows as its file text.
namespace cowstate::sim {
void showValue(const Scenario& s, std::ostream& os) { os << "\n" << print_scenario(s); }
}  // namespace cowstate::sim

namespace {

Scenario parse_ok(const std::string& text) {
  ParseError error;
  auto s = parse_scenario(text, "t.scenario", &error);
  INFO(error.to_string());
  REQUIRE(s.has_value());
  return *s;
}

// The same text parsed whole and read as a stream, line by line: the two must agree on the
// scenario or on the error.
std::optional<Scenario> parse_as_stream(const std::string& text, const std::string& file,
                                        ParseError* error) {
  std::istringstream in(text);
  return parse_scenario(in, scenario_items_max(text), file, error);
}

std::string parse_error(const std::string& text) {
  ParseError error, streamed;
  auto s = parse_scenario(text, "t.scenario", &error);
  REQUIRE_FALSE(s.has_value());
  REQUIRE_FALSE(parse_as_stream(text, "t.scenario", &streamed).has_value());
  CHECK(streamed.to_string() == error.to_string());
  return error.to_string();
}

const char* kChainPrefix = R"(# A write after a snapshot start must copy the chain prefix.
config capacity=4 hash=identity
writer: put k=1 v=10 ; put k=5 v=50     # same bucket
writer: snapshot s1
writer: put k=1 v=11
expect copied entries={1, 5} states={1}
s1: step 2
expect s1 = {1:10, 5:50}
expect live = {1:11, 5:50}
)";

}  // namespace

TEST_CASE("the issue's example parses into steps and expectations in file order",
          "[sim][scenario]") {
  const Scenario s = parse_ok(kChainPrefix);
  CHECK(s.config.initial_capacity == 4);
  CHECK(s.config.identity_hash);
  CHECK(s.config.fixed_schedule);
  REQUIRE(s.items.size() == 8);
  const auto& first = std::get<StepLine>(s.items[0]);
  CHECK(first.task == "writer");
  CHECK(first.action.is(OpKind::put));
  CHECK(first.action.entry == EntryKey{1, 0});
  CHECK(first.action.value == StateValue{10});
  CHECK(first.line == 3);
  const auto& second = std::get<StepLine>(s.items[1]);  // after the ';'
  CHECK(second.line == 3);
  CHECK(second.action.entry == EntryKey{5, 0});
  const auto& copied = *expectation_of(s.items[4]);
  CHECK(copied.kind == ExpectKind::copied);
  CHECK(copied.copied_entries == std::set<EntryKey>{{1, 0}, {5, 0}});
  CHECK(copied.copied_states == std::set<EntryKey>{{1, 0}});
  const auto& image = *expectation_of(s.items[6]);
  CHECK(image.target == "s1");
  CHECK(image.image == ScenarioImage{{{1, 0}, {10}}, {{5, 0}, {50}}});
  CHECK(s.step_count() == 5);
}

TEST_CASE("parse errors name file, line and column, what was expected and what was found",
          "[sim][scenario]") {
  CHECK(parse_error("writer: put k=1 w=10\n") == "t.scenario:1:17: expected 'v=', found 'w'");
  CHECK(parse_error("writer: put k=1 v=[1,2\n") ==
        "t.scenario:1:23: expected ']', found end of line");
  CHECK(parse_error("config capacity=4\nwriter: put k=1 v=1\ns2: step 1\n") ==
        "t.scenario:3:1: expected a task: writer, releaser, or a snapshot started above (none "
        "yet), found 's2'");
  CHECK(parse_error("writer: put k=99999999999999999999 v=1\n") ==
        "t.scenario:1:15: expected a key (a number) in range [0, 18446744073709551615], found "
        "number 99999999999999999999");
  CHECK(parse_error("writer: put k=1 v=1\nconfig capacity=2\n") ==
        "t.scenario:2:1: expected config before the first step or expectation, found 'config' "
        "after a step");
  // Found by scenario_parser_fuzz: an expectation read under the map workload, then a config
  // switching to the backend one, printed to text that did not parse (regression 005).
  CHECK(parse_error("expect copied nothing\nconfig workload=backend\n") ==
        "t.scenario:2:1: expected config before the first step or expectation, found 'config' "
        "after an expectation");
  CHECK(parse_error("writer: snapshot s1\nwriter: snapshot s1\n") ==
        "t.scenario:2:18: expected a new snapshot name, found 's1', started at line 1");
  CHECK(parse_error("writer: put k=1 v=1 pause at map.nowhere\n")
            .find("t.scenario:1:30: expected a yield point (map.copy_chain_prefix") == 0);
  CHECK(parse_error("writer: put k=1 v=1 pause at map.insert_new\nwriter: get k=1\n") ==
        "t.scenario:2:9: expected 'continue' (writer paused at line 1), found 'get'");
  CHECK(parse_error("writer: continue\n") ==
        "t.scenario:1:1: expected 'continue' only after a step that paused, found writer is not "
        "paused");
  CHECK(parse_error("config schedule=free\nwriter: put k=1 v=1 pause at map.insert_new\n")
            .find("t.scenario:2:21: expected no `pause at` in a free schedule") == 0);
  CHECK(parse_error("expect s9 = {}\n") ==
        "t.scenario:1:8: expected 'live' or a snapshot started above (none yet), found 's9'");
  CHECK(parse_error("writer: put k=1 v=1 $\n") == "t.scenario:1:21: unexpected character '$'");
  // A byte that is not printable ASCII is shown as two hex digits.
  CHECK(parse_error("writer: put k=1 v=1 \xff\n") ==
        "t.scenario:1:21: unexpected character '\\xff'");
  CHECK(parse_error("\x01") == "t.scenario:1:1: unexpected character '\\x01'");
  CHECK(parse_error(std::string("writer: get k=1\0\n", 17)) ==
        "t.scenario:1:16: expected text, found a NUL byte");
  CHECK(parse_error("writer put k=1 v=1\n") == "t.scenario:1:8: expected ':', found 'put'");
  CHECK(parse_error("kills skip_chain_prefix_copy shrunk_to=3\n") ==
        "t.scenario:1:30: expected shrunk_at_most=STEPS or the end of the line, found "
        "'shrunk_to'");
  CHECK(parse_error("kills skip_chain_prefix_copy shrunk_at_most=0\n").find("t.scenario:1:45:") ==
        0);
}

namespace {

// A generator of well-formed scenarios: any settings, snapshots started before use,
// `continue` exactly after paused steps (fixed schedules), expectations of every kind.
rc::Gen<Scenario> gen_scenario() {
  return rc::gen::exec([] {
    Scenario s;
    s.config.initial_capacity = *rc::gen::inRange<std::uint32_t>(1, 64);
    s.config.min_capacity = *rc::gen::inRange<std::uint32_t>(1, 16);
    s.config.max_capacity = *rc::gen::inRange<std::uint32_t>(16, 1u << 20);
    s.config.identity_hash = *rc::gen::arbitrary<bool>();
    s.config.fixed_schedule = *rc::gen::arbitrary<bool>();
    s.config.seed = *rc::gen::arbitrary<std::uint64_t>();
    s.config.strategy = *rc::gen::element<std::string>("random", "pct");
    s.config.pct_depth = *rc::gen::inRange<std::uint32_t>(1, 8);
    if (*rc::gen::arbitrary<bool>()) {
      s.kills = "skip_chain_prefix_copy";
      s.shrunk_at_most = *rc::gen::inRange<std::uint32_t>(0, 100);
    }
    std::vector<std::string> snapshots;
    std::set<std::string> paused;
    auto key = [] {
      return EntryKey{*rc::gen::arbitrary<std::uint64_t>(), *rc::gen::arbitrary<std::int32_t>()};
    };
    auto value = [] {
      return *rc::gen::container<StateValue>(*rc::gen::inRange<std::size_t>(0, 4),
                                             rc::gen::arbitrary<std::int64_t>());
    };
    const std::size_t n = *rc::gen::inRange<std::size_t>(0, 30);
    for (std::size_t i = 0; i < n; ++i) {
      const int what = *rc::gen::inRange(0, 10);
      if (what == 0) {  // an expectation
        Expectation e;
        std::vector<ExpectKind> kinds = {ExpectKind::image, ExpectKind::versions,
                                         ExpectKind::retired, ExpectKind::failure};
        if (s.config.fixed_schedule) kinds.push_back(ExpectKind::copied);  // fixed only
        e.kind = *rc::gen::elementOf(kinds);
        switch (e.kind) {
          case ExpectKind::image:
            e.target = snapshots.empty() || *rc::gen::arbitrary<bool>()
                           ? "live"
                           : *rc::gen::elementOf(snapshots);
            for (int j = *rc::gen::inRange(0, 4); j > 0; --j) e.image[key()] = value();
            break;
          case ExpectKind::copied:
            for (int j = *rc::gen::inRange(0, 3); j > 0; --j) e.copied_entries.insert(key());
            for (int j = *rc::gen::inRange(0, 3); j > 0; --j) e.copied_states.insert(key());
            break;
          case ExpectKind::versions:
          case ExpectKind::retired:
            e.a = *rc::gen::inRange<std::uint64_t>(0, 1u << 31);
            e.b = *rc::gen::inRange<std::uint64_t>(0, 1u << 31);
            break;
          case ExpectKind::failure:
            e.target = *rc::gen::element<std::string>("image", "I3", "restore");
            break;
          case ExpectKind::latest:  // backend scenarios only (gen_backend_scenario)
            break;
        }
        s.items.emplace_back(std::move(e));
        continue;
      }
      StepLine l;
      const int task = *rc::gen::inRange(0, 3);
      const std::string name = task == 1 && !snapshots.empty()   ? *rc::gen::elementOf(snapshots)
                               : task == 2 && !snapshots.empty() ? "releaser"
                                                                 : "writer";
      if (paused.count(name)) {  // a paused task's next line is `continue`
        l.task = name;
        l.action.kind = ActionKind::resume;
        paused.erase(l.task);
      } else if (task == 1 && !snapshots.empty()) {
        l.task = name;
        l.action.kind = ActionKind::step;
        l.action.budget = *rc::gen::inRange<std::uint32_t>(0, 100);
      } else if (task == 2 && !snapshots.empty()) {
        l.task = "releaser";
        l.action.kind =
            s.config.fixed_schedule
                ? *rc::gen::element(ActionKind::cancel, ActionKind::keep, ActionKind::release)
                : *rc::gen::element(ActionKind::cancel, ActionKind::keep);
        l.action.snapshot = *rc::gen::elementOf(snapshots);
      } else {
        l.task = "writer";
        Action& a = l.action;
        a.kind = ActionKind::map_op;
        a.map_op = *rc::gen::elementOf(kWriterOps);
        switch (a.map_op) {
          case OpKind::put:
          case OpKind::put_and_get_old:
            a.entry = key();
            a.value = value();
            break;
          case OpKind::get_mutable:
            a.entry = key();
            a.mutation = *rc::gen::element(Mutation::append, Mutation::overwrite, Mutation::pop);
            a.x = *rc::gen::arbitrary<std::int64_t>();
            break;
          case OpKind::transform:
            a.entry = key();
            a.x = *rc::gen::arbitrary<std::int64_t>();
            break;
          case OpKind::snapshot_start:
            a.snapshot = "s" + std::to_string(snapshots.size() + 1);
            snapshots.push_back(a.snapshot);
            break;
          case OpKind::visit:
            a.budget = *rc::gen::arbitrary<std::uint32_t>();
            a.extras.set().salt = *rc::gen::arbitrary<std::uint64_t>();
            break;
          default:
            a.entry = key();
        }
      }
      const bool can_pause =
          !l.action.is(OpKind::snapshot_start) && l.action.kind != ActionKind::cancel &&
          l.action.kind != ActionKind::keep && l.action.kind != ActionKind::release;
      if (s.config.fixed_schedule && can_pause && *rc::gen::inRange(0, 4) == 0) {
        l.pause = *rc::gen::elementOf(yield_points());
        paused.insert(l.task);
      }
      s.items.emplace_back(std::move(l));
    }
    return s;
  });
}

// Well-formed backend scenarios: state actions of every kind and operation, checkpoints
// started before use, serializer steps and faults, cancels, restores and expectations; half
// of them with a TTL, clock steps and cleanup actions.
rc::Gen<Scenario> gen_backend_scenario() {
  return rc::gen::exec([] {
    Scenario s;
    s.config.workload = "backend";
    s.config.fixed_schedule = *rc::gen::arbitrary<bool>();
    s.config.max_parallelism = *rc::gen::inRange<std::int32_t>(2, 1024);
    const auto first = *rc::gen::inRange<std::int32_t>(0, s.config.max_parallelism - 1);
    s.config.key_groups = {first, *rc::gen::inRange<std::int32_t>(first, s.config.max_parallelism)};
    s.config.initial_capacity = *rc::gen::inRange<std::uint32_t>(1, 64);
    if (*rc::gen::arbitrary<bool>()) s.kills = "restore_global_state_ids";
    const bool ttl = *rc::gen::arbitrary<bool>();
    if (ttl) {
      s.config.ttl_ms = *rc::gen::inRange<std::uint64_t>(1, std::uint64_t{1} << 62);
      s.config.ttl_read_refresh = *rc::gen::arbitrary<bool>();
      s.config.ttl_return_expired = *rc::gen::arbitrary<bool>();
      s.config.ttl_cleanup = *rc::gen::inRange<std::uint32_t>(0, 100);
      s.config.ttl_key_switch = s.config.ttl_cleanup != 0 && *rc::gen::arbitrary<bool>();
      s.config.ttl_full_snapshot = *rc::gen::arbitrary<bool>();
    }
    auto range = [&s] {
      const auto a = *rc::gen::inRange<std::int32_t>(0, s.config.max_parallelism);
      return GroupRange{a, *rc::gen::inRange<std::int32_t>(a, s.config.max_parallelism)};
    };
    auto small = [] { return *rc::gen::inRange<std::int64_t>(-1000, 1000); };
    std::vector<std::string> checkpoints;
    const std::size_t n = *rc::gen::inRange<std::size_t>(0, 25);
    for (std::size_t i = 0; i < n; ++i) {
      const int what = *rc::gen::inRange(0, 12);
      if (what == 0) {
        Expectation e;
        if (*rc::gen::arbitrary<bool>() || checkpoints.empty()) {
          e.kind = ExpectKind::image;
          e.target = checkpoints.empty() || *rc::gen::arbitrary<bool>()
                         ? "live"
                         : *rc::gen::elementOf(checkpoints);
          if (e.target != "live" && *rc::gen::arbitrary<bool>()) e.into = range();
          e.state = backend_states()[*rc::gen::inRange<std::size_t>(0, 5)].name;
          for (int j = *rc::gen::inRange(0, 3); j > 0; --j) {
            e.image[{*rc::gen::arbitrary<std::uint64_t>(), *rc::gen::arbitrary<std::int32_t>()}] =
                *rc::gen::container<StateValue>(*rc::gen::inRange<std::size_t>(0, 4),
                                                rc::gen::arbitrary<std::int64_t>());
          }
        } else {
          e.kind = ExpectKind::latest;
          e.target = *rc::gen::arbitrary<bool>() ? "none" : *rc::gen::elementOf(checkpoints);
        }
        s.items.emplace_back(std::move(e));
        continue;
      }
      StepLine l;
      l.task = "writer";
      Action& a = l.action;
      if (what == 1) {
        a.kind = ActionKind::checkpoint;
        a.snapshot = "c" + std::to_string(checkpoints.size() + 1);
        checkpoints.push_back(a.snapshot);
      } else if (what == 2 && !checkpoints.empty()) {
        a.kind = ActionKind::restore;
        a.snapshot = *rc::gen::elementOf(checkpoints);
        a.extras.set().into = range();
        const GroupRange second = range();
        // A split's two ranges are apart (the parser refuses overlapping ones).
        if (*rc::gen::arbitrary<bool>() &&
            (second.first > a.extras.get().into.last || second.last < a.extras.get().into.first)) {
          a.extras.set().also = second;
          a.extras.set().merge_back = *rc::gen::arbitrary<bool>();
        }
      } else if (what == 3 && !checkpoints.empty()) {
        l.task = *rc::gen::elementOf(checkpoints);
        a.kind = *rc::gen::element(ActionKind::step, ActionKind::fail, ActionKind::write_fault);
        a.budget = *rc::gen::inRange<std::uint32_t>(a.kind == ActionKind::fail ? 1 : 0, 50);
        if (a.kind == ActionKind::write_fault && *rc::gen::arbitrary<bool>()) {
          a.x = *rc::gen::inRange<std::int64_t>(1, std::int64_t{1} << 40);  // misdirected
        }
      } else if (what == 5 && ttl) {
        l.task = "clock";
        a.kind = ActionKind::advance;
        a.x = *rc::gen::inRange<std::int64_t>(0, std::int64_t{1} << 40);
      } else if (what == 6 && ttl) {
        a.kind = ActionKind::cleanup;
        a.state = *rc::gen::element<std::string>("count", "events", "attrs");
        a.budget = *rc::gen::inRange<std::uint32_t>(0, 1000);
      } else if (what == 4 && !checkpoints.empty()) {
        l.task = "releaser";
        a.kind = *rc::gen::element(ActionKind::cancel, ActionKind::keep);
        a.snapshot = *rc::gen::elementOf(checkpoints);
      } else {
        const BackendStateInfo& info = backend_states()[*rc::gen::inRange<std::size_t>(0, 5)];
        a.kind = info.kind;
        a.state = info.name;
        a.entry = {*rc::gen::arbitrary<std::uint64_t>(), *rc::gen::arbitrary<std::int32_t>()};
        std::vector<StateOp> ops;
        switch (a.kind) {
          case ActionKind::value_state:
            ops = {StateOp::update, StateOp::get, StateOp::clear};
            break;
          case ActionKind::list_state:
            ops = {StateOp::add, StateOp::add_all, StateOp::update,
                   StateOp::get, StateOp::clear,   StateOp::merge};
            break;
          case ActionKind::map_state:
            ops = {StateOp::put, StateOp::remove, StateOp::get, StateOp::clear};
            break;
          default:
            ops = {StateOp::add, StateOp::get, StateOp::clear, StateOp::merge};
        }
        a.op = *rc::gen::elementOf(ops);
        const bool list = a.kind == ActionKind::list_state;
        if ((a.op == StateOp::update && list) || a.op == StateOp::add_all) {
          a.value = *rc::gen::container<StateValue>(*rc::gen::inRange<std::size_t>(0, 4),
                                                    rc::gen::arbitrary<std::int64_t>());
        } else if (a.op == StateOp::update || a.op == StateOp::add || a.op == StateOp::remove ||
                   (a.op == StateOp::get && a.kind == ActionKind::map_state)) {
          a.x = small();
        } else if (a.op == StateOp::put) {
          a.x = small();
          a.value = {small()};
        } else if (a.op == StateOp::merge) {
          a.extras.set().sources = *rc::gen::container<std::vector<std::int32_t>>(
              *rc::gen::inRange<std::size_t>(0, 3), rc::gen::arbitrary<std::int32_t>());
        }
      }
      s.items.emplace_back(std::move(l));
    }
    return s;
  });
}

}  // namespace

TEST_CASE("printing any backend scenario and parsing it back gives the same scenario",
          "[sim][scenario][backend][property]") {
  rc::prop("parse(print(x)) == x, or an error when x has no step", [] {
    const Scenario s = *gen_backend_scenario();
    const std::string text = print_scenario(s);
    ParseError error;
    auto back = parse_scenario(text, "printed", &error);
    RC_LOG() << text << "\n" << error.to_string() << "\n";
    ParseError streamed_error;
    auto streamed = parse_as_stream(text, "printed", &streamed_error);
    RC_ASSERT(streamed == back);
    RC_ASSERT(streamed_error.to_string() == error.to_string());
    if (s.step_count() == 0) {
      RC_ASSERT(!back.has_value());
      RC_ASSERT(error.message == "expected at least one step line (TASK: ACTION), found none");
      return;
    }
    RC_ASSERT(back.has_value());
    RC_ASSERT(*back == s);
  });
}

TEST_CASE("backend scenario lines parse into state actions, checkpoints, faults and restores",
          "[sim][scenario][backend]") {
  const Scenario s = parse_ok(R"(config workload=backend max_parallelism=16 key_groups=2-13
writer: list s=events k=3 ns=1 add 7 ; map s=attrs k=3 put 1 -10 ; reducing s=sum k=4 merge [1,2]
writer: checkpoint c1
c1: fail at write 3
c1: step 2
releaser: cancel c1
writer: restore c1 into 2-7 and 8-13 then merge
expect c1 into 8-13 s=avg = {(4,2):[9,3]}
expect latest none
)");
  CHECK(s.config.workload == "backend");
  CHECK(s.config.max_parallelism == 16);
  CHECK(s.config.key_groups == GroupRange{2, 13});
  const auto& add = std::get<StepLine>(s.items[0]).action;
  CHECK(add.kind == ActionKind::list_state);
  CHECK(add.state == "events");
  CHECK(add.entry == EntryKey{3, 1});
  CHECK(add.op == StateOp::add);
  CHECK(add.x == 7);
  const auto& put = std::get<StepLine>(s.items[1]).action;
  CHECK(put.op == StateOp::put);
  CHECK(put.x == 1);
  CHECK(put.value == StateValue{-10});
  CHECK(std::get<StepLine>(s.items[2]).action.extras.get().sources ==
        std::vector<std::int32_t>{1, 2});
  const auto& fault = std::get<StepLine>(s.items[4]);
  CHECK(fault.task == "c1");
  CHECK(fault.action.kind == ActionKind::fail);
  CHECK(fault.action.budget == 3);
  const auto& restore = std::get<StepLine>(s.items[7]).action;
  CHECK(restore.extras.get().into == GroupRange{2, 7});
  CHECK(restore.extras.get().also == GroupRange{8, 13});
  CHECK(restore.extras.get().merge_back);
  const auto& e = *expectation_of(s.items[8]);
  CHECK(e.state == "avg");
  CHECK(e.into == GroupRange{8, 13});
  CHECK(expectation_of(s.items[9])->kind == ExpectKind::latest);
  CHECK(parse_ok(print_scenario(s)) == s);
}

TEST_CASE("backend parse errors name file, line and column, what was expected and what was found",
          "[sim][scenario][backend]") {
  const std::string b = "config workload=backend\n";
  CHECK(parse_error(b + "writer: list s=count k=1 add 1\n") ==
        "t.scenario:2:16: expected the list state (events), found 'count'");
  CHECK(parse_error(b + "writer: value s=count k=1 add 1\n") ==
        "t.scenario:2:27: expected an operation of a value state (update, get, clear), found "
        "'add'");
  CHECK(parse_error(b + "writer: put k=1 v=1\n")
            .find("t.scenario:2:9: expected a writer action of the backend workload") == 0);
  CHECK(parse_error("config workload=backend key_groups=3-1\n") ==
        "t.scenario:1:36: expected a key-group range FIRST-LAST with FIRST <= LAST < 1024, found "
        "3-1");
  CHECK(parse_error("config workload=backend max_parallelism=4 key_groups=0-7\n") ==
        "t.scenario:1:1: expected key_groups within [0, max_parallelism 4), found 0-7");
  CHECK(parse_error(b + "writer: checkpoint c1\nc1: fail at write 0\n") ==
        "t.scenario:3:19: expected a file operation number N >= 1, found 0");
  CHECK(parse_error(b + "writer: checkpoint c1\nreleaser: release c1\n") ==
        "t.scenario:3:11: expected 'cancel' or 'keep' (a checkpoint is stopped by cancelling "
        "it), found 'release'");
  CHECK(parse_error(b + "writer: restore c1 into 0-3\n") ==
        "t.scenario:2:17: expected a checkpoint started above (none yet), found 'c1'");
  CHECK(parse_error(b + "writer: checkpoint c1\nexpect c1 into 0-3 = {}\n") ==
        "t.scenario:3:20: expected 's=', found '='");
  CHECK(parse_error("writer: put k=1 v=1\nexpect latest none\n") ==
        "t.scenario:2:8: expected an expectation of the map workload, found 'latest'");
}

TEST_CASE("TTL parse errors name file, line and column, what was expected and what was found",
          "[sim][scenario][backend][ttl]") {
  CHECK(parse_error("config ttl=5\n") ==
        "t.scenario:1:1: expected TTL settings in a workload of keyed state (backend; TTL is a "
        "property of keyed state), found a TTL setting in a map scenario");
  CHECK(parse_error("config workload=backend ttl_update=read\n") ==
        "t.scenario:1:1: expected ttl=MS with the other TTL settings, found TTL settings without "
        "a ttl");
  CHECK(parse_error("config workload=backend ttl=0\n") ==
        "t.scenario:1:29: expected a TTL in ms in [1, 4611686018427387904], found 0");
  CHECK(parse_error("config workload=backend ttl=5 ttl_update=sometimes\n") ==
        "t.scenario:1:42: expected 'write' or 'read', found 'sometimes'");
  CHECK(parse_error("config workload=backend ttl=5 ttl_cleanup=none ttl_key_switch=on\n") ==
        "t.scenario:1:1: expected an incremental cleanup size with ttl_key_switch=on, found "
        "ttl_cleanup=none");
  CHECK(parse_error("config workload=backend\nclock: advance 5\n") ==
        "t.scenario:2:1: expected a task: writer, releaser or a snapshot (a clock task needs "
        "config ttl=MS), found 'clock'");
  const std::string t = "config workload=backend ttl=5\n";
  CHECK(parse_error(t + "clock: advance -1\n") ==
        "t.scenario:2:16: expected a time in ms (a number), found number -1");
  CHECK(parse_error(t + "clock: step 3\n") ==
        "t.scenario:2:8: expected a clock action (advance MS), found 'step'");
  CHECK(parse_error(t + "writer: cleanup s=sum n=3\n") ==
        "t.scenario:2:19: expected a state with TTL (count, events or attrs), found 'sum'");
  CHECK(parse_error(t + "writer: cleanup s=count n=0\n") ==
        "t.scenario:2:27: expected a number of entries to visit or 'all' in [1, 1048576], found 0");
  CHECK(parse_error(t + "clock: advance 5 pause at map.insert_new\n") ==
        "t.scenario:2:18: expected end of line (`advance` has no yield point), found 'pause'");
  // Each workload says which of its writer actions have a yield point.
  CHECK(parse_error("writer: snapshot s1 pause at map.insert_new\n") ==
        "t.scenario:1:21: expected end of line (`snapshot` has no yield point), found 'pause'");
  const std::string b = "config workload=backend\nwriter: checkpoint c1\n";
  CHECK(parse_error(b + "writer: checkpoint c2 pause at checkpoint.commit\n") ==
        "t.scenario:3:23: expected end of line (`checkpoint` has no yield point), found 'pause'");
  CHECK(parse_error(b + "writer: restore c1 into 0-7 pause at map.insert_new\n") ==
        "t.scenario:3:29: expected end of line (`restore` has no yield point), found 'pause'");
  CHECK(parse_ok(b + "writer: value s=count k=1 update 2 pause at map.insert_new\nwriter: "
                     "continue\n")
            .step_count() == 3);
  CHECK(parse_error("config workload=backend\nwriter: checkpoint clock\n") ==
        "t.scenario:2:20: expected a checkpoint name, found the reserved word 'clock'");
}

TEST_CASE("printing any scenario and parsing it back gives the same scenario",
          "[sim][scenario][property]") {
  rc::prop("parse(print(x)) == x, or an error when x has no step", [] {
    const Scenario s = *gen_scenario();
    const std::string text = print_scenario(s, "a header\nof two lines");
    ParseError error;
    auto back = parse_scenario(text, "printed", &error);
    RC_LOG() << text << "\n" << error.to_string() << "\n";
    ParseError streamed_error;
    auto streamed = parse_as_stream(text, "printed", &streamed_error);
    RC_ASSERT(streamed == back);
    RC_ASSERT(streamed_error.to_string() == error.to_string());
    if (s.step_count() == 0) {
      RC_ASSERT(!back.has_value());
      RC_ASSERT(error.message == "expected at least one step line (TASK: ACTION), found none");
      return;
    }
    RC_ASSERT(back.has_value());
    RC_ASSERT(*back == s);
  });
}

TEST_CASE("a fixed schedule pauses a put at a yield point and lets the serializer run inside it",
          "[sim][scenario]") {
  const Scenario s = parse_ok(R"(config capacity=4 hash=identity
writer: put k=1 v=10 ; put k=5 v=50
writer: snapshot s1
writer: put k=9 v=90 pause at map.insert_new
s1: step all
writer: continue
expect s1 = {1:10, 5:50}
expect live = {1:10, 5:50, 9:90}
expect versions map=1 h=0
expect retired entries=0 states=0
)");
  const RunResult r = run_scenario(s, true);
  INFO(r.message);
  CHECK(r.outcome == Outcome::pass);
  CHECK(r.stats.snapshots_checked == 1);
  // The serializer's step ran between the writer's pause and its continuation.
  std::vector<std::string> order;
  for (const std::string& line : r.trace) {
    if (line.find("yield map.insert_new") != std::string::npos && order.empty()) {
      order.push_back("pause");
    }
    if (line.find("ser1 step all") != std::string::npos) order.push_back("step");
  }
  CHECK(order == std::vector<std::string>{"pause", "step"});
}

TEST_CASE("a wrong expectation fails with check `expect` and names its line", "[sim][scenario]") {
  const Scenario s = parse_ok(kChainPrefix + std::string("expect live = {1:12}\n"));
  const RunResult r = run_scenario(s);
  CHECK(r.outcome == Outcome::failure);
  CHECK(r.check == "expect");
  CHECK(r.failed_line == 10);
  CHECK(r.message.find("t.scenario:10: the live map is {1:11, 5:50}, expected {1:12}") == 0);
}

TEST_CASE("a step the scenario cannot run is invalid input naming its line", "[sim][scenario]") {
  const RunResult never_paused =
      run_scenario(parse_ok("writer: put k=1 v=1 pause at map.copy_chain_prefix\n"));
  CHECK(never_paused.outcome == Outcome::invalid);
  CHECK(exit_code(never_paused.outcome) == 2);
  CHECK(never_paused.message ==
        "t.scenario:1: writer's step ended without reaching yield point map.copy_chain_prefix");
  const RunResult finished =
      run_scenario(parse_ok("writer: snapshot s1\ns1: step all\ns1: step 1\n"));
  CHECK(finished.outcome == Outcome::invalid);
  CHECK(finished.failed_line == 3);
}

TEST_CASE("`expect failure` passes exactly when the run fails at that check", "[sim][scenario]") {
  const std::string wrong = "writer: put k=1 v=1\nexpect live = {}\n";
  CHECK(run_scenario(parse_ok(wrong + "expect failure expect\n")).outcome == Outcome::pass);
  const RunResult other = run_scenario(parse_ok(wrong + "expect failure I3\n"));
  CHECK(other.outcome == Outcome::failure);
  CHECK(other.check == "expect");
  const RunResult passed = run_scenario(parse_ok("writer: get k=1\nexpect failure image\n"));
  CHECK(passed.outcome == Outcome::failure);
  CHECK(passed.message.find("expected the run to fail check image, it passed") !=
        std::string::npos);
}

TEST_CASE("a free schedule runs each task's lines in order under its strategy", "[sim][scenario]") {
  const Scenario s = parse_ok(R"(config capacity=2 min_capacity=2 hash=identity schedule=free
writer: put k=1 v=10 ; put k=3 v=30 ; put k=5 v=50
writer: snapshot s1
writer: put k=1 v=11
writer: remove k=5
s1: step 1
releaser: cancel s1
expect live = {1:11, 3:30}
expect s1 = {1:10, 3:30, 5:50}
)");
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    Scenario t = s;
    t.config.seed = seed;
    const RunResult r = run_scenario(t);
    INFO("seed " << seed << ": " << r.message);
    CHECK(r.outcome == Outcome::pass);
  }
}

namespace {
// The trace without the step numbers and without the first (header) line.
std::vector<std::string> trace_body(const RunResult& r) {
  std::vector<std::string> out;
  for (std::size_t i = 1; i < r.trace.size(); ++i) {
    out.push_back(r.trace[i].substr(r.trace[i].find(' ') + 1));
  }
  return out;
}
}  // namespace

TEST_CASE("a recorded fuzz run written as a scenario replays the same trace",
          "[sim][scenario][shrink]") {
  for (const char* strategy : {"random", "pct"}) {
    for (std::uint64_t seed = 1; seed <= 15; ++seed) {
      CampaignOptions campaign;
      campaign.seed = seed;
      campaign.ops = 120;
      campaign.strategy = strategy;
      const CaseSpec spec = case_for_run(campaign, 0);
      RunConfig config = config_for_case(spec);
      config.record = true;
      config.keep_trace = true;
      auto s = make_strategy(spec.strategy, spec.pct_depth, case_ops(spec));
      const RunResult recorded = run_once(config, *s);
      REQUIRE(recorded.outcome == Outcome::pass);
      const std::optional<Scenario> scenario = to_scenario(config, recorded);
      REQUIRE(scenario.has_value());
      // Through text and back, as a user would get it.
      ParseError error;
      auto parsed = parse_scenario(print_scenario(*scenario), "recorded", &error);
      INFO(strategy << " seed " << seed << ": " << error.to_string());
      REQUIRE(parsed.has_value());
      const RunResult replayed = run_scenario(*parsed, true);
      INFO(replayed.message);
      REQUIRE(replayed.outcome == Outcome::pass);
      CHECK(replayed.stats.ops == recorded.stats.ops);
      CHECK(replayed.stats.snapshots_checked == recorded.stats.snapshots_checked);
      const std::vector<std::string> want = trace_body(recorded), got = trace_body(replayed);
      std::size_t same = 0;
      while (same < want.size() && same < got.size() && want[same] == got[same]) ++same;
      INFO("traces agree for " << same << " lines; then recorded: "
                               << (same < want.size() ? want[same] : "(end)")
                               << " / replayed: " << (same < got.size() ? got[same] : "(end)"));
      CHECK(got == want);
    }
  }
}

namespace {
// Shrinks `text`, which must fail at a wrong expectation; the result must too.
ShrinkResult shrink_wrong_expectation(const std::string& text) {
  const Scenario s = parse_ok(text);
  const RunResult first = run_scenario(s);
  REQUIRE(first.outcome == Outcome::failure);
  REQUIRE(first.check == "expect");
  ShrinkResult shrunk = shrink(s, first.signature());
  CHECK(shrunk.reproduced);
  const RunResult again = run_scenario(shrunk.scenario);
  CHECK(again.outcome == Outcome::failure);
  CHECK(again.check == "expect");
  CHECK(again.signature() == shrunk.signature);
  return shrunk;
}
}  // namespace

TEST_CASE("the shrinker reduces a failing backend scenario to the steps the failure needs",
          "[sim][scenario][backend][shrink]") {
  std::string text = "config workload=backend\n";
  for (int i = 0; i < 12; ++i) {
    text += "writer: list s=events k=" + std::to_string(i % 5) + " add " + std::to_string(i) + "\n";
    text += "writer: reducing s=sum k=" + std::to_string(i % 3) + " add 1\n";
    if (i == 6) text += "writer: checkpoint c1\nc1: step 2\n";
  }
  text += "expect live s=events = {}\n";  // wrong: every key has events
  const ShrinkResult shrunk = shrink_wrong_expectation(text);
  CHECK(shrunk.steps_before == 26);
  // The failure is five keys the expectation does not have: the shrunk case keeps all five
  // (one add each, the smallest data), not just one of them.
  CHECK(shrunk.signature.difference.to_string() == "extra {0, 1, 2, 3, 4}; in production");
  CHECK(shrunk.steps_after == 5);
  CHECK(print_scenario(shrunk.scenario) ==
        "config capacity=1 min_capacity=1 max_capacity=1 workload=backend\n"
        "writer: list s=events k=0 add 0\nwriter: list s=events k=1 add 0\n"
        "writer: list s=events k=2 add 0\nwriter: list s=events k=3 add 0\n"
        "writer: list s=events k=4 add 0\nexpect live s=events = {}\n");
}

TEST_CASE("the shrinker turns off the backend features a failure does not need",
          "[sim][scenario][backend][shrink]") {
  const ShrinkResult shrunk = shrink_wrong_expectation(
      "config workload=backend ttl=50 ttl_key_switch=on ttl_full_snapshot=on async_io=on "
      "io_buffer=128 budget=1000000 spill_check=4 cold_cache=10\n"
      "writer: list s=events k=2 add 7\n"
      "writer: reducing s=sum k=1 add 1\n"
      "writer: checkpoint c1\nc1: step all\n"
      "expect live s=events = {}\n");  // wrong: key 2 has an event
  CHECK(print_scenario(shrunk.scenario) ==
        "config capacity=1 min_capacity=1 max_capacity=1 workload=backend\n"
        "writer: list s=events k=0 add 0\nexpect live s=events = {}\n");
}

TEST_CASE("the shrinker turns put_and_get_old into put with no values and renames its key",
          "[sim][scenario][shrink]") {
  // A wrong claim that the map is empty: one entry of any value shows it, and the map
  // workload's simpler variants turn put_and_get_old into put and drop its values, and the
  // key is renamed to 0 (the namespace stays: the difference names the entry).
  const ShrinkResult shrunk = shrink_wrong_expectation(
      "writer: put_and_get_old k=3 ns=2 v=[5,6]\n"
      "writer: get_mutable k=3 ns=2 then pop 9\n"
      "writer: remove_and_get_old k=8\n"
      "expect live = {}\n");
  CHECK(shrunk.steps_before == 3);
  CHECK(print_scenario(shrunk.scenario) ==
        "config capacity=1 min_capacity=1 max_capacity=1\nwriter: put k=0 ns=2 v=[]\n"
        "expect live = {}\n");
}

TEST_CASE("the shrinker reduces a failing scenario to the steps the failure needs",
          "[sim][scenario][shrink]") {
  // Forty operations, one snapshot, then a wrong claim about the versions: only the
  // snapshot start matters for that claim.
  std::string text = "config capacity=2 hash=identity\n";
  for (int i = 0; i < 20; ++i) {
    text += "writer: put k=" + std::to_string(i % 7) + " v=[" + std::to_string(i) + ",3]\n";
    if (i == 10) text += "writer: snapshot s1\ns1: step 2\n";
    text += "writer: remove k=" + std::to_string((i * 3) % 7) + "\n";
  }
  text += "expect versions map=0 h=0\n";
  const ShrinkResult shrunk = shrink_wrong_expectation(text);
  CHECK(shrunk.steps_before == 42);
  CHECK(shrunk.steps_after == 1);
  CHECK(print_scenario(shrunk.scenario) ==
        "config capacity=1 min_capacity=1 max_capacity=1\nwriter: snapshot s1\n"
        "expect versions map=0 h=0\n");  // smaller tables and the default hash are simpler
}

namespace {
// A generated failing case: a few writes to a small key space, maybe a snapshot with
// serializer steps, maybe a checkpoint (backend), and one expectation drawn at random, so
// that it is almost always wrong, in any of the ways an expectation can be.
std::string gen_failing_case() {
  const bool backend = *rc::gen::arbitrary<bool>();
  std::string text = backend ? "config workload=backend\n" : "config capacity=2 hash=identity\n";
  const int writes = *rc::gen::inRange(1, 9);
  bool snapshot = false;
  int checkpoints = 0;
  for (int i = 0; i < writes; ++i) {
    const int k = *rc::gen::inRange(0, 5);
    const int v = *rc::gen::inRange(0, 4);
    const bool remove = *rc::gen::inRange(0, 4) == 0;
    if (backend) {
      text += remove ? "writer: value s=count k=" + std::to_string(k) + " clear\n"
                     : "writer: value s=count k=" + std::to_string(k) + " update " +
                           std::to_string(v) + "\n";
      if (*rc::gen::inRange(0, 4) == 0) {
        ++checkpoints;
        text += "writer: checkpoint c" + std::to_string(checkpoints) + "\n";
        if (*rc::gen::arbitrary<bool>()) text += "c" + std::to_string(checkpoints) + ": step all\n";
      }
    } else {
      text += remove ? "writer: remove k=" + std::to_string(k) + "\n"
                     : "writer: put k=" + std::to_string(k) + " v=" + std::to_string(v) + "\n";
      if (!snapshot && *rc::gen::inRange(0, 3) == 0) {
        snapshot = true;
        text += "writer: snapshot s1\ns1: step 1\n";
      }
    }
  }
  auto image = [] {
    std::string out = "{";
    const int n = *rc::gen::inRange(0, 4);
    std::set<int> keys;
    for (int i = 0; i < n; ++i) keys.insert(*rc::gen::inRange(0, 5));
    for (int k : keys) {
      out += (out.size() > 1 ? ", " : "") + std::to_string(k) + ":" +
             std::to_string(*rc::gen::inRange(0, 4));
    }
    return out + "}";
  };
  const int kind = *rc::gen::inRange(0, 3);
  if (backend) {
    if (kind == 0 && checkpoints > 0) {
      text += "expect latest c" + std::to_string(*rc::gen::inRange(1, checkpoints + 1)) + "\n";
    } else if (kind == 1 && checkpoints > 0) {
      text += "expect c" + std::to_string(*rc::gen::inRange(1, checkpoints + 1)) +
              " s=count = " + image() + "\n";
    } else {
      text += "expect live s=count = " + image() + "\n";
    }
  } else if (kind == 0 && snapshot) {
    text += "expect s1 = " + image() + "\n";
  } else if (kind == 1) {
    text += "expect versions map=" + std::to_string(*rc::gen::inRange(0, 3)) +
            " h=" + std::to_string(*rc::gen::inRange(0, 2)) + "\n";
  } else {
    text += "expect live = " + image() + "\n";
  }
  return text;
}

// The same kind of difference: the same named key sets of the same sizes (keys may have
// been renamed), and the same shape.
bool same_kind(const Difference& a, const Difference& b) {
  if (a.shape != b.shape || a.keys.size() != b.keys.size()) return false;
  for (const auto& [name, keys] : a.keys) {
    auto it = b.keys.find(name);
    if (it == b.keys.end() || it->second.size() != keys.size()) return false;
  }
  return true;
}
}  // namespace

TEST_CASE("a shrunk failing case written out and read back fails the same way",
          "[sim][scenario][shrink][property]") {
  rc::prop("same signature, same kind of difference", [] {
    const std::string text = gen_failing_case();
    ParseError error;
    const auto s = parse_scenario(text, "case.scenario", &error);
    RC_LOG() << text << error.to_string() << "\n";
    RC_ASSERT(s.has_value());
    const RunResult first = run_scenario(*s);
    RC_PRE(first.outcome == Outcome::failure);  // the drawn expectation happened to hold
    RC_ASSERT(first.check == "expect");
    ShrinkOptions options;
    options.max_runs = 400;
    const ShrinkResult shrunk = shrink(*s, first.signature(), options);
    RC_ASSERT(shrunk.reproduced);
    // The original's failure: the same check, a renamed copy of the same expectation, the
    // same kind of difference.
    RC_LOG() << "original: " << first.signature().to_string() << "\n"
             << "shrunk:   " << shrunk.signature.to_string() << "\n";
    RC_ASSERT(shrunk.signature.outcome == first.outcome);
    RC_ASSERT(shrunk.signature.check == first.check);
    RC_ASSERT(same_kind(shrunk.signature.difference, first.difference));
    RC_ASSERT(shrunk.steps_after <= shrunk.steps_before);
    // Written as a file and read back, it fails exactly as the shrinker said.
    const std::string written = print_scenario(shrunk.scenario, "shrunk");
    const auto back = parse_scenario(written, "shrunk.scenario", &error);
    RC_LOG() << written << error.to_string() << "\n";
    RC_ASSERT(back.has_value());
    const RunResult replayed = run_scenario(*back);
    RC_ASSERT(replayed.signature() == shrunk.signature);
  });
}

TEST_CASE(
    "the shrinker does not rename a key to one the expectation names, which would merge two "
    "keys of the failure into one",
    "[sim][scenario][shrink]") {
  // Found by the property above (RC seed 234480453026774105): both clears were dropped, then
  // key 3 was renamed to 0, which only the expectation used, and "missing {0, 3}" became
  // "missing {0}" with the renamed signature still matching.
  const Scenario s = parse_ok(
      "config workload=backend\nwriter: value s=count k=3 clear\nwriter: value s=count k=0 "
      "clear\nexpect live s=count = {0:0, 3:0}\n");
  const RunResult first = run_scenario(s);
  REQUIRE(first.signature().to_string() ==
          "failure at `expect live s=count = {0:0, 3:0}`: missing {0, 3}; in production");
  const ShrinkResult shrunk = shrink(s, first.signature());
  CHECK(shrunk.signature.difference.keys.at("missing").size() == 2);
  CHECK(run_scenario(shrunk.scenario).signature() == shrunk.signature);
}

TEST_CASE("names keep their text and identity across every chunk of the pool", "[sim][scenario]") {
  // 70,000 distinct names fill the pool's first ten chunks (64, 128, ... names each).
  std::vector<Name> names;
  for (int i = 0; i < 70000; ++i) names.emplace_back("name-" + std::to_string(i));
  for (int i = 0; i < 70000; i += 997) {
    CHECK(names[static_cast<std::size_t>(i)] == "name-" + std::to_string(i));
    CHECK(Name("name-" + std::to_string(i)) == names[static_cast<std::size_t>(i)]);
  }
  CHECK(Name() == Name(""));
  CHECK(Name().empty());
  CHECK(Name("b") > Name("a"));
  CHECK_FALSE(names[1] == names[2]);
}
