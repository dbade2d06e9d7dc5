// The scenario printer: writes what the parser reads (parse(print(x)) == x), one step per
// line, settings that differ from the defaults only.
#include <sstream>
#include <string>

#include "cowstate/sim/scenario.h"

namespace cowstate::sim {

namespace {

std::string key_text(const EntryKey& k) {
  if (k.second == 0) return std::to_string(k.first);
  return "(" + std::to_string(k.first) + "," + std::to_string(k.second) + ")";
}

std::string value_text(const StateValue& v, bool sequence = false) {
  if (v.size() == 1 && !sequence) return std::to_string(v[0]);
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + std::to_string(v[i]);
  return out + "]";
}

std::string key_set_text(const std::set<EntryKey>& keys) {
  std::string out = "{";
  bool first = true;
  for (const EntryKey& k : keys) {
    out += (first ? "" : ", ") + key_text(k);
    first = false;
  }
  return out + "}";
}

std::string keyed(const Action& a) {
  std::string out = "k=" + std::to_string(a.entry.first);
  if (a.entry.second != 0) out += " ns=" + std::to_string(a.entry.second);
  return out;
}

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

std::string range_text(const GroupRange& r) {
  return std::to_string(r.first) + "-" + std::to_string(r.last);
}

std::string namespaces_text(const std::vector<std::int32_t>& ns) {
  std::string out = "[";
  for (std::size_t i = 0; i < ns.size(); ++i) out += (i ? "," : "") + std::to_string(ns[i]);
  return out + "]";
}

// `s=NAME k=K [ns=N] OP ARGS` of a backend state action.
std::string state_action_text(const Action& a) {
  std::string out = " s=" + a.state + " " + keyed(a) + " " + state_op_name(a.op);
  switch (a.op) {
    case StateOp::update:
      out +=
          a.kind == ActionKind::list_state ? " " + value_text(a.value) : " " + std::to_string(a.x);
      break;
    case StateOp::add:
    case StateOp::remove:
      out += " " + std::to_string(a.x);
      break;
    case StateOp::add_all:
      out += " " + value_text(a.value);
      break;
    case StateOp::put:
      out += " " + std::to_string(a.x) + " " + std::to_string(a.value.empty() ? 0 : a.value[0]);
      break;
    case StateOp::get:
      if (a.kind == ActionKind::map_state) out += " " + std::to_string(a.x);
      break;
    case StateOp::merge:
      out += " " + namespaces_text(a.extras.get().sources);
      break;
    case StateOp::clear:
      break;
  }
  return out;
}

std::string config_text(const ScenarioConfig& c) {
  const ScenarioConfig d;
  std::string out;
  auto add = [&out](const std::string& kv) { out += " " + kv; };
  if (c.initial_capacity != d.initial_capacity)
    add("capacity=" + std::to_string(c.initial_capacity));
  if (c.min_capacity != d.min_capacity) add("min_capacity=" + std::to_string(c.min_capacity));
  if (c.max_capacity != d.max_capacity) add("max_capacity=" + std::to_string(c.max_capacity));
  if (c.identity_hash != d.identity_hash) add("hash=identity");
  if (c.fixed_schedule != d.fixed_schedule) add("schedule=free");
  if (c.seed != d.seed) add("seed=" + std::to_string(c.seed));
  if (c.strategy != d.strategy) add("strategy=" + c.strategy);
  if (c.pct_depth != d.pct_depth) add("pct_depth=" + std::to_string(c.pct_depth));
  if (c.workload != d.workload) add("workload=" + c.workload);
  if (c.max_parallelism != d.max_parallelism) {
    add("max_parallelism=" + std::to_string(c.max_parallelism));
  }
  if (c.key_groups != d.key_groups) add("key_groups=" + range_text(c.key_groups));
  if (c.ttl_ms != d.ttl_ms) add("ttl=" + std::to_string(c.ttl_ms));
  if (c.ttl_read_refresh != d.ttl_read_refresh) add("ttl_update=read");
  if (c.ttl_return_expired != d.ttl_return_expired) add("ttl_visibility=expired");
  if (c.ttl_cleanup != d.ttl_cleanup) {
    add("ttl_cleanup=" +
        (c.ttl_cleanup == 0 ? std::string("none") : std::to_string(c.ttl_cleanup)));
  }
  if (c.ttl_key_switch != d.ttl_key_switch) add("ttl_key_switch=on");
  if (c.ttl_full_snapshot != d.ttl_full_snapshot) add("ttl_full_snapshot=on");
  return out.empty() ? "" : "config" + out;
}

}  // namespace

std::string print_expectation(const Expectation& e) {
  switch (e.kind) {
    case ExpectKind::image:
      if (!e.state.empty()) {
        return "expect " + e.target + (e.into.empty() ? "" : " into " + range_text(e.into)) +
               " s=" + e.state + " = " + print_image(e.image, has_sequence_values(e.state));
      }
      return "expect " + e.target + " = " + print_image(e.image);
    case ExpectKind::latest:
      return "expect latest " + e.target;
    case ExpectKind::copied:
      if (e.copied_entries.empty() && e.copied_states.empty()) return "expect copied nothing";
      return "expect copied entries=" + key_set_text(e.copied_entries) +
             " states=" + key_set_text(e.copied_states);
    case ExpectKind::versions:
      return "expect versions map=" + std::to_string(e.a) + " h=" + std::to_string(e.b);
    case ExpectKind::retired:
      return "expect retired entries=" + std::to_string(e.a) + " states=" + std::to_string(e.b);
    case ExpectKind::failure:
      return "expect failure " + e.target;
  }
  return "";
}

std::string print_image(const ScenarioImage& image, bool sequences) {
  std::string out = "{";
  bool first = true;
  for (const auto& [k, v] : image) {
    out += (first ? "" : ", ") + key_text(k) + ":" + value_text(v, sequences);
    first = false;
  }
  return out + "}";
}

namespace {
// What follows a map operation's word: its key and data.
std::string map_op_text(const Action& a) {
  switch (a.map_op) {
    case OpKind::put:
    case OpKind::put_and_get_old:
      return " " + keyed(a) + " v=" + value_text(a.value);
    case OpKind::remove:
    case OpKind::remove_and_get_old:
    case OpKind::get:
    case OpKind::contains:
      return " " + keyed(a);
    case OpKind::get_mutable:
      return " " + keyed(a) + " then " + mutation_name(a.mutation) + " " + std::to_string(a.x);
    case OpKind::transform:
      return " " + keyed(a) + " append " + std::to_string(a.x);
    case OpKind::snapshot_start:
      return " " + a.snapshot;
    case OpKind::visit:
      return " budget=" + std::to_string(a.budget) + " salt=" + std::to_string(a.extras.get().salt);
    case OpKind::snapshot_release:
      break;
  }
  return "";
}
}  // namespace

std::string print_action(const StepLine& line) {
  const Action& a = line.action;
  std::string out = action_name(a);
  switch (a.kind) {
    case ActionKind::map_op:
      out += map_op_text(a);
      break;
    case ActionKind::cancel:
    case ActionKind::keep:
    case ActionKind::release:
      out += " " + a.snapshot;
      break;
    case ActionKind::step:
      out += a.budget == 0 ? std::string(" all") : " " + std::to_string(a.budget);
      break;
    case ActionKind::resume:
      break;
    case ActionKind::value_state:
    case ActionKind::list_state:
    case ActionKind::map_state:
    case ActionKind::reducing_state:
    case ActionKind::aggregating_state:
      out += state_action_text(a);
      break;
    case ActionKind::checkpoint:
      out += " " + a.snapshot;
      break;
    case ActionKind::restore:
      out += " " + a.snapshot + " into " + range_text(a.extras.get().into);
      if (!a.extras.get().also.empty()) out += " and " + range_text(a.extras.get().also);
      if (a.extras.get().merge_back) out += " then merge";
      break;
    case ActionKind::fail:
      out += " at write " + std::to_string(a.budget);
      break;
    case ActionKind::advance:
      out += " " + std::to_string(a.x);
      break;
    case ActionKind::cleanup:
      out +=
          " s=" + a.state + " n=" + (a.budget == 0 ? std::string("all") : std::to_string(a.budget));
      break;
  }
  if (!line.pause.empty()) out += " pause at " + line.pause;
  return out;
}

std::string print_scenario(const Scenario& s, const std::string& header) {
  std::ostringstream out;
  if (!header.empty()) {
    std::istringstream in(header);
    for (std::string l; std::getline(in, l);) out << (l.empty() ? "#" : "# " + l) << "\n";
    out << "\n";
  }
  const std::string config = config_text(s.config);
  if (!config.empty()) out << config << "\n";
  if (!s.kills.empty()) out << "kills " << s.kills << "\n";
  for (const ScenarioItem& item : s.items) {
    if (const auto* step = std::get_if<StepLine>(&item)) {
      out << step->task << ": " << print_action(*step) << "\n";
    } else {
      out << print_expectation(*expectation_of(item)) << "\n";
    }
  }
  return out.str();
}

}  // namespace cowstate::sim
