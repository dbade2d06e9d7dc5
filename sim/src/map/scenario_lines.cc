// The map workload's writer lines: parse, print and simpler variants (map/scenario_lines.h).
#include "map/scenario_lines.h"

#include <algorithm>

namespace cowstate::sim::map_lines {

namespace {

const char* mutation_name(Mutation m) {
  switch (m) {
    case Mutation::append:
      return "append";
    case Mutation::overwrite:
      return "overwrite";
    case Mutation::pop:
      return "pop";
  }
  return "?";
}

// `then append|overwrite|pop N` of get_mutable.
void mutation(ScenarioReader& in, Action* a) {
  in.want_keyword("then");
  const ScenarioToken m = in.want_word("'append', 'overwrite' or 'pop'");
  bool known = false;
  for (const Mutation kind : {Mutation::append, Mutation::overwrite, Mutation::pop}) {
    if (m.text == mutation_name(kind)) {
      a->mutation = kind;
      known = true;
    }
  }
  if (!known) in.fail(m, "'append', 'overwrite' or 'pop'");
  a->x = in.number<std::int64_t>("a number");
}

}  // namespace

void parse_writer_action(ScenarioReader& in, const ScenarioToken& verb, Action* a) {
  const auto it = std::find_if(kWriterOps.begin(), kWriterOps.end(),
                               [&verb](OpKind k) { return verb.text == op_word(k); });
  if (it == kWriterOps.end()) {
    std::string words;
    for (const OpKind k : kWriterOps) words += std::string(op_word(k)) + ", ";
    words.resize(words.size() - 2);
    in.fail(verb, "a writer action (" + words + " or continue)");
  }
  a->kind = ActionKind::map_op;
  a->map_op = *it;
  if (names_key(a->map_op)) a->entry = in.keyed();
  switch (a->map_op) {
    case OpKind::put:
    case OpKind::put_and_get_old:
      in.assignment("v");
      a->value = in.value();
      return;
    case OpKind::get_mutable:
      return mutation(in, a);
    case OpKind::transform:
      in.want_keyword("append");
      a->x = in.number<std::int64_t>("a number");
      return;
    case OpKind::snapshot_start: {
      const ScenarioToken name = in.want_word("a snapshot name");
      in.new_task_name(name, "a snapshot name", "a new snapshot name");
      a->snapshot = name.text;
      return;
    }
    case OpKind::visit:
      in.assignment("budget");
      a->budget = in.number<std::uint32_t>("a number of buckets");
      in.assignment("salt");
      a->extras.set().salt = in.number<std::uint64_t>("a number");
      return;
    case OpKind::remove:
    case OpKind::remove_and_get_old:
    case OpKind::get:
    case OpKind::contains:
    case OpKind::snapshot_release:  // not a writer operation: kWriterOps has none
      return;
  }
}

std::string print_writer_action(const Action& a) {
  const std::string key = names_key(a.map_op) ? " " + keyed_text(a.entry) : "";
  switch (a.map_op) {
    case OpKind::put:
    case OpKind::put_and_get_old:
      return key + " v=" + value_text(a.value);
    case OpKind::get_mutable:
      return key + " then " + mutation_name(a.mutation) + " " + std::to_string(a.x);
    case OpKind::transform:
      return key + " append " + std::to_string(a.x);
    case OpKind::snapshot_start:
      return " " + a.snapshot;
    case OpKind::visit:
      return " budget=" + std::to_string(a.budget) + " salt=" + std::to_string(a.extras.get().salt);
    case OpKind::remove:
    case OpKind::remove_and_get_old:
    case OpKind::get:
    case OpKind::contains:
    case OpKind::snapshot_release:
      return key;
  }
  return key;
}

namespace {
bool names_entry(const Action& a) { return a.kind == ActionKind::map_op && names_key(a.map_op); }
}  // namespace

Workload::WriterActionTraits traits(const Action& a) {
  const bool start = a.is(OpKind::snapshot_start);
  return {.starts_task = start ? "s" : nullptr,
          .can_pause = !start,
          .names_entry = names_entry(a),
          .weight = a.is(OpKind::put_and_get_old) || a.is(OpKind::remove_and_get_old) ? 1U : 0U};
}

std::vector<Action> simpler_writer_actions(const Action& a) {
  ActionVariants v(a);
  if (names_entry(a)) v.add([](Action& b) { b.entry.second = 0; });
  if (!a.value.empty()) {
    v.add([](Action& b) { b.value = {}; });
    v.add([](Action& b) { b.value.resize(1); });
    v.add([](Action& b) { b.value.pop_back(); });
    v.add([](Action& b) {
      for (auto& x : b.value) x = 0;
    });
    v.add([](Action& b) {
      for (std::size_t i = 0; i < b.value.size(); ++i)
        b.value[i] = static_cast<std::int64_t>(i + 1);
    });
  }
  if (a.is(OpKind::get_mutable)) v.add([](Action& b) { b.mutation = Mutation::append; });
  if (a.x != 0) v.add([](Action& b) { b.x = 0; });
  if (a.is(OpKind::visit)) {
    v.add([](Action& b) { b.budget = 1; });
    v.add([](Action& b) { b.extras.set().salt = 0; });
  }
  if (a.is(OpKind::put_and_get_old)) v.add([](Action& b) { b.map_op = OpKind::put; });
  if (a.is(OpKind::remove_and_get_old)) v.add([](Action& b) { b.map_op = OpKind::remove; });
  return v.take();
}

}  // namespace cowstate::sim::map_lines
