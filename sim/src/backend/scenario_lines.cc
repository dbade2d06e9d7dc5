// The backend workload's writer lines: parse, print and simpler variants
// (backend/scenario_lines.h).
#include "backend/scenario_lines.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <map>

namespace cowstate::sim {

const std::vector<BackendStateInfo>& backend_states() {
  static const std::vector<BackendStateInfo> states = {{ActionKind::value_state, "count"},
                                                       {ActionKind::list_state, "events"},
                                                       {ActionKind::map_state, "attrs"},
                                                       {ActionKind::reducing_state, "sum"},
                                                       {ActionKind::aggregating_state, "avg"}};
  return states;
}

const std::vector<std::string>& ttl_states() {
  static const std::vector<std::string> names = {"count", "events", "attrs"};
  return names;
}

bool is_ttl_state(const std::string& name) {
  const auto& names = ttl_states();
  return std::find(names.begin(), names.end(), name) != names.end();
}

bool has_sequence_values(const std::string& name) {
  for (const BackendStateInfo& info : backend_states()) {
    if (info.name == name) {
      return info.kind == ActionKind::list_state || info.kind == ActionKind::map_state ||
             info.kind == ActionKind::aggregating_state;
    }
  }
  return false;
}

}  // namespace cowstate::sim

namespace cowstate::sim::backend_lines {

namespace {

bool names_entry(const Action& a) {
  return a.kind == ActionKind::value_state || a.kind == ActionKind::list_state ||
         a.kind == ActionKind::map_state || a.kind == ActionKind::reducing_state ||
         a.kind == ActionKind::aggregating_state;
}

// `cleanup s=STATE n=N|all`, after the word.
void cleanup_action(ScenarioReader& in, Action* a) {
  a->kind = ActionKind::cleanup;
  in.assignment("s");
  const ScenarioToken t = in.peek();
  a->state = parse_state_name(in);
  if (!is_ttl_state(a->state)) in.fail(t, "a state with TTL (count, events or attrs)");
  in.assignment("n");
  if (in.at_word("all")) {
    in.next();
    a->budget = 0;  // every entry, then nothing expired may remain
  } else {
    a->budget = in.positive("a number of entries to visit or 'all'", ScenarioReader::kAllocatedMax);
  }
}

// `restore NAME into RANGE [and RANGE [then merge]]`, after the word.
void restore_action(ScenarioReader& in, Action* a) {
  a->snapshot = in.started_task("a checkpoint").text;
  in.want_keyword("into");
  ActionExtras& ranges = a->extras.set();
  ranges.into = in.target_range("a key-group range FIRST-LAST");
  if (!in.at_word("and")) return;
  in.next();
  const ScenarioToken second = in.peek();
  ranges.also = in.target_range("a second key-group range FIRST-LAST");
  const GroupRange& into = ranges.into;
  const GroupRange& also = ranges.also;
  if (also.first <= into.last && into.first <= also.last) {
    in.fail(second,
            "a second range apart from the first (" + range_text(into) +
                "): the two backends of a split own distinct key groups",
            "'" + range_text(also) + "'");
  }
  if (in.at_word("then")) {
    in.next();
    in.want_keyword("merge");
    ranges.merge_back = true;
  }
}

// The operations a state of `kind` has, in the order messages list them.
std::vector<StateOp> ops_of(ActionKind kind) {
  switch (kind) {
    case ActionKind::value_state:
      return {StateOp::update, StateOp::get, StateOp::clear};
    case ActionKind::list_state:
      return {StateOp::add, StateOp::add_all, StateOp::update,
              StateOp::get, StateOp::clear,   StateOp::merge};
    case ActionKind::map_state:
      return {StateOp::put, StateOp::remove, StateOp::get, StateOp::clear};
    default:
      return {StateOp::add, StateOp::get, StateOp::clear, StateOp::merge};
  }
}

// The operation word of a state action: one the state's kind has.
StateOp state_op(ScenarioReader& in, ActionKind kind) {
  const ScenarioToken op = in.want_word("an operation");
  std::string names;
  for (StateOp o : ops_of(kind)) {
    if (op.text == state_op_name(o)) return o;
    names += (names.empty() ? "" : ", ") + std::string(state_op_name(o));
  }
  in.fail(op, "an operation of a " + std::string(action_name(kind)) + " state (" + names + ")");
}

// What follows a state action's operation word: its number, values or sources.
void state_operands(ScenarioReader& in, Action* a) {
  switch (a->op) {
    case StateOp::update:
      if (a->kind == ActionKind::list_state) {
        a->value = in.value();
      } else {
        a->x = in.number<std::int64_t>("a number");
      }
      return;
    case StateOp::add:
      a->x = in.number<std::int64_t>("a number");
      return;
    case StateOp::add_all:
      a->value = in.value();
      return;
    case StateOp::put:
      a->x = in.number<std::int64_t>("a user key (a number)");
      a->value = {in.number<std::int64_t>("a user value (a number)")};
      return;
    case StateOp::remove:
      a->x = in.number<std::int64_t>("a user key (a number)");
      return;
    case StateOp::get:
      if (a->kind == ActionKind::map_state) a->x = in.number<std::int64_t>("a user key (a number)");
      return;
    case StateOp::merge:
      a->extras.set().sources = in.namespace_list();
      return;
    case StateOp::clear:
      return;
  }
}

// `s=NAME k=K [ns=N] OP ARGS` of a state action, as printed.
std::string state_action_text(const Action& a) {
  std::string out = " s=" + a.state + " " + keyed_text(a.entry) + " " + state_op_name(a.op);
  switch (a.op) {
    case StateOp::update:
      return out + " " +
             (a.kind == ActionKind::list_state ? value_text(a.value) : std::to_string(a.x));
    case StateOp::add:
    case StateOp::remove:
      return out + " " + std::to_string(a.x);
    case StateOp::add_all:
      return out + " " + value_text(a.value);
    case StateOp::put:
      return out + " " + std::to_string(a.x) + " " +
             std::to_string(a.value.empty() ? 0 : a.value[0]);
    case StateOp::get:
      return a.kind == ActionKind::map_state ? out + " " + std::to_string(a.x) : out;
    case StateOp::merge:
      return out + " " + namespaces_text(a.extras.get().sources);
    case StateOp::clear:
      return out;
  }
  return out;
}

}  // namespace

Name parse_state_name(ScenarioReader& in, const ActionKind* kind) {
  const ScenarioToken t = in.want_word("a state name");
  std::string names;
  for (const BackendStateInfo& info : backend_states()) {
    if (kind != nullptr && *kind != info.kind) continue;
    if (t.text == info.name) return t.text;
    names += (names.empty() ? "" : ", ") + std::string(info.name);
  }
  in.fail(t, kind == nullptr ? "a state name (" + names + ")"
                             : "the " + std::string(action_name(*kind)) + " state (" + names + ")");
}

// `power_loss after=OP|now[-K] keep=SEED [read=FAULT at=N]`, after the word. A crash point
// counted back from the last disk operation is kept as -(K + 1) in `x`.
void power_loss_action(ScenarioReader& in, Action* a) {
  a->kind = ActionKind::power_loss;
  in.assignment("after");
  if (in.at_word("now")) {
    in.next();
    const ScenarioToken& back = in.peek();
    std::int64_t k = 0;
    if (back.kind == TokenKind::number && back.text[0] == '-') {
      // The tokenizer reads "-K" as a negative number.
      k = -in.number<std::int64_t>("'-' and a count of disk operations");
      if (k < 0) in.fail(back, "now-K with K >= 0", "'now" + back.text + "'");
    }
    a->x = crash_point_back(static_cast<std::uint64_t>(k));
  } else {
    a->x = static_cast<std::int64_t>(in.bounded("a disk operation number (or now)", 0,
                                                std::numeric_limits<std::int64_t>::max() - 1));
  }
  in.assignment("keep");
  a->extras.set().salt = in.number<std::uint64_t>("a seed of the power loss's choices");
  if (in.at_end()) return;
  in.assignment("read");
  const ScenarioToken t = in.want_word("a read fault");
  std::string names;
  for (std::size_t i = 1; i < std::size(kReadFaultNames); ++i) {
    if (t.text == kReadFaultNames[i]) a->budget = static_cast<std::uint32_t>(i);
    names += (i == 1 ? "" : ", ") + std::string(kReadFaultNames[i]);
  }
  if (a->budget == 0) in.fail(t, "a read fault (" + names + ")");
  in.assignment("at");
  a->entry.first = in.number<std::uint64_t>("a fault position");
}

// `spill s=STATE g=G` or `load s=STATE g=G`, after the word (config budget=BYTES).
void move_action(ScenarioReader& in, const ScenarioToken& verb, Action* a) {
  if (in.config().budget_bytes == 0) {
    in.fail(verb, "config budget=BYTES before a spill or load line (the spill tier needs one)",
            "'" + verb.text + "'");
  }
  a->kind = verb.text == "spill" ? ActionKind::spill : ActionKind::load;
  in.assignment("s");
  a->state = parse_state_name(in);
  in.assignment("g");
  const GroupRange& r = in.config().key_groups;
  a->x = static_cast<std::int64_t>(in.bounded("a key group of the backend's range " + range_text(r),
                                              static_cast<std::uint64_t>(r.first),
                                              static_cast<std::uint64_t>(r.last)));
}

void parse_writer_action(ScenarioReader& in, const ScenarioToken& verb, Action* a) {
  static const std::map<std::string, ActionKind> kWriter = {
      {"value", ActionKind::value_state},
      {"list", ActionKind::list_state},
      {"map", ActionKind::map_state},
      {"reducing", ActionKind::reducing_state},
      {"aggregating", ActionKind::aggregating_state},
      {"checkpoint", ActionKind::checkpoint},
      {"restore", ActionKind::restore}};
  const bool ttl = in.config().ttl_ms != 0;
  if (ttl && verb.text == "cleanup") return cleanup_action(in, a);
  if (verb.text == "power_loss") return power_loss_action(in, a);
  if (verb.text == "spill" || verb.text == "load") return move_action(in, verb, a);
  auto it = kWriter.find(verb.text);
  if (it == kWriter.end()) {
    in.fail(verb, std::string("a writer action of the backend workload (value, list, map, "
                              "reducing, aggregating, checkpoint, restore, ") +
                      (ttl ? "cleanup, " : "") + "power_loss, spill, load, or continue)");
  }
  a->kind = it->second;
  if (a->kind == ActionKind::checkpoint) {
    const ScenarioToken name = in.want_word("a checkpoint name");
    in.new_task_name(name, "a checkpoint name", "a new checkpoint name");
    a->snapshot = name.text;
    return;
  }
  if (a->kind == ActionKind::restore) return restore_action(in, a);
  in.assignment("s");
  a->state = parse_state_name(in, &a->kind);
  a->entry = in.keyed();
  a->op = state_op(in, a->kind);
  state_operands(in, a);
}

Workload::WriterActionTraits traits(const Action& a) {
  const bool checkpoint = a.kind == ActionKind::checkpoint;
  const bool restore = a.kind == ActionKind::restore;
  const bool power_loss = a.kind == ActionKind::power_loss;
  return {.starts_task = checkpoint ? "c" : nullptr,
          .names_task = restore,
          .can_pause = !checkpoint && !restore && !power_loss,
          .names_entry = names_entry(a)};
}

std::string print_writer_action(const Action& a) {
  switch (a.kind) {
    case ActionKind::checkpoint:
      return " " + a.snapshot;
    case ActionKind::restore: {
      const ActionExtras& r = a.extras.get();
      return " " + a.snapshot + " into " + range_text(r.into) +
             (r.also.empty() ? "" : " and " + range_text(r.also)) +
             (r.merge_back ? " then merge" : "");
    }
    case ActionKind::power_loss: {
      const std::optional<std::uint64_t> back = crash_point_back_of(a.x);
      return " after=" +
             (!back        ? std::to_string(a.x)
              : *back == 0 ? std::string("now")
                           : "now-" + std::to_string(*back)) +
             " keep=" + std::to_string(a.extras.get().salt) +
             (a.budget == 0 ? std::string()
                            : std::string(" read=") + kReadFaultNames[a.budget] +
                                  " at=" + std::to_string(a.entry.first));
    }
    case ActionKind::spill:
    case ActionKind::load:
      return " s=" + a.state.str() + " g=" + std::to_string(a.x);
    case ActionKind::cleanup:
      return " s=" + a.state +
             " n=" + (a.budget == 0 ? std::string("all") : std::to_string(a.budget));
    default:
      return names_entry(a) ? state_action_text(a) : "";
  }
}

std::vector<Action> simpler_writer_actions(const Action& a) {
  if (a.kind == ActionKind::power_loss) {
    ActionVariants v(a);
    if (a.budget != 0)
      v.add([](Action& b) {
        b.budget = 0;
        b.entry.first = 0;
      });
    if (a.budget != 0 && a.entry.first != 0) {
      v.add([](Action& b) { b.entry.first = 0; });
      v.add([](Action& b) { b.entry.first /= 2; });
    }
    // A crash point nearer the end, counted from it (steps dropped before it then leave it
    // where it was), and fewer bits of choice.
    const std::optional<std::uint64_t> back = crash_point_back_of(a.x);
    if (back != 0) v.add([](Action& b) { b.x = crash_point_back(0); });
    if (back > 1) v.add([back](Action& b) { b.x = crash_point_back(*back / 2); });
    for (std::uint64_t seed = 0; seed < std::min<std::uint64_t>(a.extras.get().salt, 8); ++seed)
      v.add([seed](Action& b) { b.extras.set().salt = seed; });
    return v.take();
  }
  if (!names_entry(a)) return {};  // checkpoints, restores and cleanups carry no data to shrink
  ActionVariants v(a);
  // Arities are fixed by the operation: only smaller data.
  v.add([](Action& b) { b.entry.second = 0; });
  if (a.x != 0) v.add([](Action& b) { b.x = 0; });
  if (a.op == StateOp::put && a.value != StateValue{0}) v.add([](Action& b) { b.value = {0}; });
  if (a.op == StateOp::add_all || a.op == StateOp::update) {
    v.add([](Action& b) { b.value.clear(); });
    v.add([](Action& b) { b.value.resize(std::min<std::size_t>(b.value.size(), 1)); });
  }
  if (a.extras.get().sources.size() > 1) {
    v.add([](Action& b) { b.extras.set().sources.resize(1); });
  }
  return v.take();
}

}  // namespace cowstate::sim::backend_lines
