// The scenario printer: writes what the parser reads (parse(print(x)) == x), one step per
// line, settings that differ from the defaults only.
#include <sstream>
#include <string>

#include "cowstate/sim/scenario.h"
#include "cowstate/sim/scenario_reader.h"
#include "cowstate/sim/workload.h"

namespace cowstate::sim {

namespace {

std::string config_text(const ScenarioConfig& c) {
  const ScenarioConfig d;
  std::string out;
  auto add = [&out](const std::string& kv) { out += " " + kv; };
  if (c.initial_capacity != d.initial_capacity)
    add("capacity=" + std::to_string(c.initial_capacity));
  if (c.min_capacity != d.min_capacity) add("min_capacity=" + std::to_string(c.min_capacity));
  if (c.max_capacity != d.max_capacity) add("max_capacity=" + std::to_string(c.max_capacity));
  if (c.identity_hash != d.identity_hash) add("hash=identity");
  if (c.track_changes != d.track_changes) add("changes=tracked");
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
  if (c.async_io != d.async_io) add("async_io=on");
  if (c.io_buffer_bytes != d.io_buffer_bytes) add("io_buffer=" + std::to_string(c.io_buffer_bytes));
  if (c.budget_bytes != d.budget_bytes) add("budget=" + std::to_string(c.budget_bytes));
  if (c.spill_check != d.spill_check) add("spill_check=" + std::to_string(c.spill_check));
  if (c.cold_cache_percent != d.cold_cache_percent) {
    add("cold_cache=" + std::to_string(c.cold_cache_percent));
  }
  if (c.incremental != d.incremental) add("incremental=" + std::to_string(c.incremental));
  return out.empty() ? "" : "config" + out;
}

}  // namespace

std::string print_expectation(const Expectation& e, const Workload& workload) {
  switch (e.kind) {
    case ExpectKind::image:
      if (!e.state.empty()) {
        return "expect " + e.target + (e.into.empty() ? "" : " into " + range_text(e.into)) +
               " s=" + e.state + " = " +
               print_image(e.image, workload.state_values_are_sequences(e.state));
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

std::string print_action(const StepLine& line, const Workload& workload) {
  const Action& a = line.action;
  std::string out = action_name(a);
  if (line.task == "writer" && a.kind != ActionKind::resume) {
    out += workload.print_writer_action(a);
  } else {
    switch (a.kind) {
      case ActionKind::cancel:
      case ActionKind::keep:
      case ActionKind::release:
      case ActionKind::land:
        out += " " + a.snapshot;
        break;
      case ActionKind::step:
        out += a.budget == 0 ? std::string(" all") : " " + std::to_string(a.budget);
        break;
      case ActionKind::fail:
        out += " at write " + std::to_string(a.budget);
        break;
      case ActionKind::write_fault:
        out += a.budget == 0 ? std::string(" manifest") : " write " + std::to_string(a.budget);
        if (a.x != 0) out += " to " + std::to_string(a.x - 1);
        break;
      case ActionKind::advance:
        out += " " + std::to_string(a.x);
        break;
      default:  // continue, and writer actions on no writer line
        break;
    }
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
  if (!s.kills.empty()) {
    out << "kills " << s.kills;
    if (s.shrunk_at_most != 0) out << " shrunk_at_most=" << s.shrunk_at_most;
    out << "\n";
  }
  const Workload& workload = workload_of(s);
  for (const ScenarioItem& item : s.items) {
    if (const auto* step = std::get_if<StepLine>(&item)) {
      out << step->task << ": " << print_action(*step, workload) << "\n";
    } else {
      out << print_expectation(*expectation_of(item), workload) << "\n";
    }
  }
  return out.str();
}

}  // namespace cowstate::sim
