// `cowstate explain` renderers; see explain.h.
#include "cowstate/sim/explain.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <utility>

#include "core/explain_words.h"
#include "cowstate/assert.h"
#include "cowstate/sim/scenario_reader.h"
#include "cowstate/sim/shrink.h"

namespace cowstate::sim {

ExplainStep to_explain_step(const StepView& view) {
  COWSTATE_ASSERT(view.layout != nullptr || view.backend != nullptr, "REQUIRES",
                  "on_step always passes a layout");
  ExplainStep s;
  s.step = view.step;
  s.task = view.task;
  s.action = view.action;
  s.source_line = view.source_line;
  s.paused_at = view.paused_at;
  s.trace = view.trace;
  s.copied_entries = view.copied_entries;
  s.copied_states = view.copied_states;
  if (view.layout != nullptr) s.layout = *view.layout;
  if (view.backend != nullptr) s.backend = *view.backend;
  return s;
}

namespace {

using explain_words::field_of;
using explain_words::join;
using explain_words::verb_of;
using explain_words::wrap;

// Whether `s` is a scheduler step a reader need not see: a task resumed after its last
// line only to end (every action traces something; the line it shows is the stale one
// `previous_line` of the task began).
bool is_idle_end(const ExplainStep& s, const ExplainStep* previous_line) {
  if (s.action == "continue" || !s.trace.empty() || !s.paused_at.empty()) return false;
  return s.action.empty() ||
         (previous_line != nullptr && previous_line->source_line == s.source_line &&
          previous_line->action == s.action);
}

}  // namespace

std::vector<ExplainStep> reader_steps(const std::vector<ExplainStep>& scheduler_steps) {
  std::vector<ExplainStep> out;
  std::map<std::string, const ExplainStep*> last_of_task;
  for (const ExplainStep& s : scheduler_steps) {
    const ExplainStep* previous = last_of_task[s.task];
    if (s.action != "continue") last_of_task[s.task] = &s;
    if (is_idle_end(s, previous)) continue;
    const bool passes_through =
        !out.empty() && out.back().task == s.task && !out.back().paused_at.empty() &&
        s.action == "continue" &&
        out.back().action.find("pause at " + out.back().paused_at) == std::string::npos;
    if (!passes_through) {
      out.push_back(s);
      out.back().step = out.size();
      continue;
    }
    ExplainStep& merged = out.back();
    merged.paused_at = s.paused_at;
    merged.trace.insert(merged.trace.end(), s.trace.begin(), s.trace.end());
    merged.copied_entries = s.copied_entries;
    merged.copied_states = s.copied_states;
    merged.layout = s.layout;
    merged.backend = s.backend;
  }
  return out;
}

Explanation explain_scenario(const Scenario& scenario) {
  Explanation e;
  e.file = scenario.file;
  e.config = scenario.config;
  std::vector<ExplainStep> steps;
  e.result = run_scenario(
      scenario, false, [&steps](const StepView& view) { steps.push_back(to_explain_step(view)); });
  COWSTATE_ASSERT(steps.size() <= e.result.stats.steps, "REQUIRES",
                  "on_step sees each scheduler step once");
  e.steps = reader_steps(steps);
  e.notes = scenario_notes_of_file(scenario.file);
  return e;
}

std::string comment_lines(const std::vector<std::string>& lines, const std::string& indent) {
  std::string out;
  for (const std::string& l : lines) {
    if (l.rfind("expect ", 0) == 0) {
      out += indent + l + "\n";  // an expectation line, as written
    } else {
      out += indent + (l.empty() ? "#" : "# " + l) + "\n";
    }
  }
  return out;
}

StepNotes notes_of(const Explanation& e, std::size_t i) {
  COWSTATE_ASSERT(i < e.steps.size(), "REQUIRES", "a step of the explanation");
  StepNotes out;
  const int line = e.steps[i].source_line;
  auto it = e.notes.lines.find(line);
  if (line <= 0 || it == e.notes.lines.end()) return out;
  const auto same_line = [&](std::size_t j) { return e.steps[j].source_line == line; };
  bool first = true, last = true;
  for (std::size_t j = 0; j < e.steps.size(); ++j) {
    if (j < i && same_line(j)) first = false;
    if (j > i && same_line(j)) last = false;
  }
  if (first) {
    out.above = &it->second.above;
    out.trailing = it->second.trailing;
  }
  if (last) out.after = &it->second.after;
  return out;
}

namespace {

std::string key_name(const EntryKey& k) {
  std::string s = "k" + std::to_string(k.first);
  if (k.second != 0) s += "/ns" + std::to_string(k.second);
  return s;
}

std::string keys_text(const std::vector<EntryKey>& keys) {
  std::vector<std::string> names;
  for (const EntryKey& k : keys) names.push_back(key_name(k));
  if (names.size() <= 1) return join(names, "");
  const std::string last = names.back();
  names.pop_back();
  return join(names, ", ") + " and " + last;
}

std::string plural(std::size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

const char* yield_point_meaning(const std::string& point) {
  if (point == "map.copy_chain_prefix") return "between two entries of a chain-prefix copy";
  if (point == "map.insert_new") return "after a new entry is linked, before the size is updated";
  if (point == "map.rehash_move") return "between two buckets moved by the incremental rehash";
  if (point == "map.copy_segment") {
    return "after a segment of bucket heads a snapshot shares was copied, before the write "
           "into the copy";
  }

  if (point == "snapshot_writer.entry") return "between two entries of one serializer step";
  if (point == "map.delta_entry") {
    return "between two changed entries a snapshot's delta read hands out";
  }
  return "a yield point inside production code";
}

// Where a live entry sits.
struct Located {
  const LayoutEntry* entry = nullptr;
  std::size_t table = 0;
  std::size_t bucket = 0;
  std::size_t position = 0;  // 0: chain head
};

std::map<EntryKey, Located> live_by_key(const MapLayout& layout) {
  std::map<EntryKey, Located> out;
  for (std::size_t t = 0; t < layout.tables.size(); ++t) {
    for (std::size_t b = 0; b < layout.tables[t].size(); ++b) {
      const auto& chain = layout.tables[t][b];
      for (std::size_t i = 0; i < chain.size(); ++i) out[chain[i].key] = {&chain[i], t, b, i};
    }
  }
  return out;
}

const SnapshotLayout* find_snapshot(const MapLayout& layout, const std::string& name) {
  for (const SnapshotLayout& s : layout.snapshots) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

// The entry a keyed writer step names.
std::optional<EntryKey> target_of(const std::string& action) {
  const auto k = field_of(action, "k");
  if (!k) return std::nullopt;
  const auto ns = field_of(action, "ns");
  try {
    return EntryKey{std::stoull(*k), ns ? static_cast<std::int32_t>(std::stol(*ns)) : 0};
  } catch (...) {
    return std::nullopt;
  }
}

// One step with what the renderers need from the steps before it.
struct StepContext {
  const ExplainStep* step = nullptr;
  const MapLayout* prev = nullptr;      // after the previous step
  const MapLayout* op_start = nullptr;  // before the writer's latest operation began
  std::string op_action;                // that operation's step line
  std::map<std::uint32_t, const LayoutEntry*> by_slot;  // live and retired entries now
  std::set<std::uint32_t> retired_slots;
  std::set<std::uint32_t> reused;  // slots an earlier step freed that hold an entry again
  const std::map<std::uint32_t, std::uint32_t>* next = nullptr;  // slot -> next, as last seen

  const MapLayout& now() const { return step->layout; }
  bool writer_op_ended() const { return step->task == "writer" && step->paused_at.empty(); }
};

// Calls fn(context) for every step in order.
template <class F>
void walk(const Explanation& e, F&& fn) {
  const MapLayout empty;
  const MapLayout* prev = &empty;
  const MapLayout* op_start = &empty;
  std::string op_action;
  std::map<std::uint32_t, std::uint32_t> next;
  std::set<std::uint32_t> freed;
  for (const ExplainStep& s : e.steps) {
    if (s.task == "writer" && s.action != "continue") {
      op_start = prev;
      op_action = s.action;
    }
    StepContext c;
    c.step = &s;
    c.prev = prev;
    c.op_start = op_start;
    c.op_action = op_action;
    for (const auto& table : s.layout.tables) {
      for (const auto& chain : table) {
        for (std::size_t i = 0; i < chain.size(); ++i) {
          next[chain[i].slot] = i + 1 < chain.size() ? chain[i + 1].slot : 0;
          c.by_slot[chain[i].slot] = &chain[i];
        }
      }
    }
    for (const LayoutEntry& r : s.layout.retired) {
      COWSTATE_ASSERT(!c.by_slot.count(r.slot), "I10", "a retired entry is not live");
      c.by_slot[r.slot] = &r;
      c.retired_slots.insert(r.slot);
    }
    c.next = &next;
    // Slots freed by an earlier step (retired, then no longer reachable) that hold a live
    // entry again.
    for (const auto& [slot, entry] : c.by_slot) {
      if (!c.retired_slots.count(slot) && freed.erase(slot) > 0) c.reused.insert(slot);
    }
    fn(static_cast<const StepContext&>(c));
    for (const LayoutEntry& r : prev->retired) {
      if (!c.by_slot.count(r.slot)) freed.insert(r.slot);
    }
    prev = &s.layout;
  }
}

// The chains a snapshot sees: for each non-empty head, the slots from it on.
std::vector<std::pair<std::size_t, std::vector<std::uint32_t>>> snapshot_chains(
    const StepContext& c, const SnapshotLayout& s) {
  std::vector<std::pair<std::size_t, std::vector<std::uint32_t>>> out;
  for (std::size_t h = 0; h < s.heads.size(); ++h) {
    std::vector<std::uint32_t> chain;
    std::uint32_t slot = s.heads[h];
    while (slot != 0 && c.by_slot.count(slot) && chain.size() <= c.by_slot.size()) {
      chain.push_back(slot);
      auto it = c.next->find(slot);
      slot = it == c.next->end() ? 0 : it->second;
    }
    if (!chain.empty()) out.emplace_back(h, std::move(chain));
  }
  return out;
}

// The slots whose entries snapshot `s`'s serializer has written: it scans the snapshot's
// entries in ascending pool slot order (CowStateMapSnapshot::Scan), so the first `emitted`
// of them.
std::set<std::uint32_t> emitted_slots(const StepContext& c, const SnapshotLayout& s) {
  std::set<std::uint32_t> all;
  for (const auto& [h, chain] : snapshot_chains(c, s)) all.insert(chain.begin(), chain.end());
  std::set<std::uint32_t> out;
  for (std::uint32_t slot : all) {
    if (out.size() >= s.emitted) break;
    out.insert(slot);
  }
  return out;
}

// What the incremental rehash did between `p` and `n`, and which freed slots were reused.
std::string narrate_rehash_and_reuse(const StepContext& c) {
  const MapLayout& p = *c.prev;
  const MapLayout& n = c.now();
  std::string text;
  if (p.tables.size() == 1 && n.tables.size() == 2) {
    text += " A rehash starts: the map holds more than 0.75 x " +
            std::to_string(p.tables[0].size()) + " entries, so a table of " +
            std::to_string(n.tables[1].size()) +
            " buckets is allocated beside the primary; from now on every keyed operation "
            "first moves whole old buckets into it (rehash index " +
            std::to_string(n.rehash_index) + ").";
  } else if (p.tables.size() == 2 && n.tables.size() == 2 && n.rehash_index > p.rehash_index) {
    text += " The incremental rehash moved old bucket" +
            (n.rehash_index - p.rehash_index == 1 ? " " + std::to_string(p.rehash_index)
                                                  : "s " + std::to_string(p.rehash_index) + "-" +
                                                        std::to_string(n.rehash_index - 1)) +
            " to the new table (rehash index " + std::to_string(n.rehash_index) + ").";
  } else if (p.tables.size() == 2 && n.tables.size() == 1) {
    text += " The rehash finished: every old bucket has moved, and the table of " +
            std::to_string(n.tables[0].size()) + " buckets is the primary now.";
  }
  for (std::uint32_t slot : c.reused) {
    text += " Slot " + std::to_string(slot) +
            ", retired until no live snapshot could see it and then freed, is reused for " +
            key_name(c.by_slot.at(slot)->key) + ".";
  }
  return text;
}

// ---------------------------------------------------------------------------------------
// What was copied and why.

std::vector<std::string> copy_reasons(const StepContext& c) {
  std::vector<std::string> out;
  const ExplainStep& s = *c.step;
  const auto before = live_by_key(*c.op_start);
  const auto after = live_by_key(c.now());
  const std::uint32_t h = c.op_start->highest_required_version;
  for (const EntryKey& k : s.copied_entries) {
    auto b = before.find(k);
    auto a = after.find(k);
    std::string line = key_name(k) + ": ";
    if (b == before.end()) {
      out.push_back(line + "copied (it was not in the live map before this operation)");
      continue;
    }
    const LayoutEntry& old = *b->second.entry;
    line +=
        "copied because entry_version " + std::to_string(old.entry_version) +
        " < H=" + std::to_string(h) + " (" +
        (old.seen_by.empty() ? std::string("a snapshot") : "snapshot " + join(old.seen_by, ", ")) +
        " may see it): slot " + std::to_string(old.slot);
    if (a != after.end()) line += " -> slot " + std::to_string(a->second.entry->slot);
    out.push_back(line);
  }
  for (const EntryKey& k : s.copied_states) {
    auto b = before.find(k);
    std::string line = key_name(k) + ": state copied";
    if (b != before.end()) {
      line += " because state_version " + std::to_string(b->second.entry->state_version) +
              " < H=" + std::to_string(h);
    }
    out.push_back(line);
  }
  return out;
}

// Why nothing was copied by a finished writer operation.
std::string nothing_copied(const StepContext& c) {
  const std::string verb = verb_of(c.op_action);
  const std::uint32_t h = c.op_start->highest_required_version;
  if (verb == "snapshot") {
    return "nothing copied: a snapshot start copies only the directories of the bucket-head "
           "segments";
  }
  if (verb == "get" || verb == "contains") return "nothing copied: const reads never copy";
  if (h == 0) {
    return "nothing copied: no live snapshot can see any entry (H=0), so the map changed in "
           "place";
  }
  const auto target = target_of(c.op_action);
  if (!target) return "nothing copied: no entry a live snapshot can see was written";
  const auto before = live_by_key(*c.op_start);
  auto b = before.find(*target);
  if (b == before.end()) {
    return "nothing copied: " + key_name(*target) +
           " was not in the map; a new entry goes in at the chain head and no existing entry "
           "changes";
  }
  const LayoutEntry& e = *b->second.entry;
  return "nothing copied: no live snapshot can see " + key_name(*target) + " (entry_version " +
         std::to_string(e.entry_version) + " >= H=" + std::to_string(h) +
         "), so it was written in place";
}

// ---------------------------------------------------------------------------------------
// Narration.

// Long because it is one case per writer action, each a few sentences; explain's renderer
// rewrite (per workload) is where it splits.
std::string narrate_writer(const StepContext& c) {
  const ExplainStep& s = *c.step;
  std::vector<std::string> out;
  const std::string op = c.op_action.substr(0, c.op_action.find(" pause at "));
  const std::string verb = verb_of(op);
  const auto target = target_of(op);
  const auto before = live_by_key(*c.op_start);
  const auto after = live_by_key(c.now());
  const MapLayout& now = c.now();
  if (s.action == "continue") {
    out.push_back(std::string("The writer ") + (s.paused_at.empty() ? "finishes" : "continues") +
                  " the operation it paused (" + op + ").");
  } else if (verb == "snapshot") {
    const std::string name = op.substr(verb.size() + 1);
    const SnapshotLayout* snap = find_snapshot(now, name);
    std::string text = "The writer starts snapshot " + name + ": the map version goes up to " +
                       std::to_string(now.map_version) + ", which is " + name +
                       "'s version, and H becomes " + std::to_string(now.highest_required_version) +
                       ". " + name + " copies the directories of the bucket-head segments";
    if (snap) text += " (" + plural(snap->heads.size(), "bucket", "buckets") + ")";
    text +=
        " and from now on shares every chain and state with the live map: while it is "
        "live, no entry with entry_version < " +
        std::to_string(now.highest_required_version) + " may be written.";
    out.push_back(text);
  } else if (verb == "get" || verb == "contains") {
    out.push_back("The writer reads " + (target ? key_name(*target) : std::string("a key")) +
                  ": a const read, which never copies.");
  } else if (verb == "visit") {
    out.push_back("The writer runs the incremental visitor (" + op +
                  "), which may replace or remove the entries it passes.");
  } else if (target) {
    const std::string name = key_name(*target);
    const auto old = before.find(*target);
    const std::string held =
        old == before.end() ? "" : " (now " + value_text(old->second.entry->state) + ")";
    if (verb == "put" || verb == "put_and_get_old") {
      out.push_back("The writer puts " + name + " = " + field_of(op, "v").value_or("?") +
                    (old == before.end() ? ", a key the map does not hold yet."
                                         : " over " + value_text(old->second.entry->state) + "."));
    } else if (verb == "remove" || verb == "remove_and_get_old") {
      out.push_back("The writer removes " + name +
                    (old == before.end() ? ", which the map does not hold." : held + "."));
    } else if (verb == "get_mutable") {
      out.push_back("The writer asks for " + name + "'s state" + held +
                    " to change it in place (`" + op + "`).");
    } else {
      out.push_back("The writer runs `" + op + "` on " + name + held + ".");
    }
  }
  if (!s.paused_at.empty()) {
    out.push_back("It stopped at yield point " + s.paused_at + " (" +
                  yield_point_meaning(s.paused_at) +
                  "); other tasks may run before the writer's `continue`.");
  } else {
    std::vector<std::string> changes;
    for (const auto& [k, a] : after) {
      auto b = before.find(k);
      if (b == before.end()) {
        changes.push_back(
            key_name(k) + " = " + value_text(a.entry->state) + " is new: slot " +
            std::to_string(a.entry->slot) + ", " +
            (a.position == 0 ? "the head" : "position " + std::to_string(a.position)) +
            " of bucket " + std::to_string(a.bucket));
      } else if (b->second.entry->state != a.entry->state &&
                 !(target && k == *target && verb.starts_with("put"))) {
        changes.push_back(key_name(k) + " goes from " + value_text(b->second.entry->state) +
                          " to " + value_text(a.entry->state));
      }
    }
    for (const auto& [k, b] : before) {
      if (!after.count(k)) changes.push_back(key_name(k) + " is unlinked from the live map");
    }
    if (!changes.empty()) out.push_back("Now " + join(changes, "; ") + ".");
    if (!s.copied_entries.empty()) {
      std::vector<EntryKey> copied(s.copied_entries.begin(), s.copied_entries.end());
      std::string text =
          "A live snapshot may still read " + keys_text(copied) +
          " (entry_version < H=" + std::to_string(c.op_start->highest_required_version) +
          "), so the writer did not touch " + (copied.size() == 1 ? "it" : "them") +
          ": it copied " + (copied.size() == 1 ? "it" : "them") +
          " into new slots with entry_version " + std::to_string(now.map_version) +
          ", linked the copies into the live chain and left the originals to "
          "the snapshots";
      std::vector<EntryKey> prefix;
      for (const EntryKey& k : copied) {
        if (target && k != *target) prefix.push_back(k);
      }
      const MapLayout& start = *c.op_start;
      const bool rehash_moved = start.tables.size() == 2 &&
                                (now.tables.size() != 2 || now.rehash_index != start.rehash_index);
      if (rehash_moved) {
        text +=
            "; the incremental rehash moved them to the new table, and an entry a snapshot "
            "may see moves as a copy";
      } else if (target && !prefix.empty() && s.copied_entries.count(*target)) {
        text += "; " + keys_text(prefix) + (prefix.size() == 1 ? " comes" : " come") + " before " +
                key_name(*target) +
                " in the chain, so its next pointer had to change (the chain-prefix copy)";
      }
      out.push_back(text + ".");
    }
    if (!s.copied_states.empty()) {
      std::vector<EntryKey> states(s.copied_states.begin(), s.copied_states.end());
      out.push_back("The state of " + keys_text(states) +
                    " had state_version < H, so it was copied before it changed" +
                    (s.copied_entries.size() > s.copied_states.size()
                         ? "; the other copies share their state with the originals."
                         : "."));
    }
  }
  return join(out, " ");
}

std::string narrate_serializer(const StepContext& c) {
  const ExplainStep& s = *c.step;
  const SnapshotLayout* before = find_snapshot(*c.prev, s.task);
  const SnapshotLayout* after = find_snapshot(c.now(), s.task);
  const bool cancelled = std::any_of(s.trace.begin(), s.trace.end(), [](const std::string& t) {
    return t.find(" stops: ") != std::string::npos;
  });
  std::string text = "The serializer of " + s.task;
  if (s.action == "continue") {
    text += " continues its paused step";
  } else if (!s.action.empty()) {
    text += " runs `" + s.action + "`";
  } else {
    text += " runs on (no line left for it)";
  }
  if (after) {
    const std::size_t wrote = after->emitted - (before ? before->emitted : 0);
    text += ": it writes " + plural(wrote, "entry", "entries") + ", " +
            std::to_string(after->emitted) + " of " + std::to_string(after->size) + " so far.";
  } else if (before && cancelled) {
    text +=
        ": " + s.task + " was cancelled, so the serializer stops and " + s.task + " is released.";
  } else if (before) {
    text += ": it writes the last " + plural(before->size - before->emitted, "entry", "entries") +
            " (" + std::to_string(before->size) + " in all), releases " + s.task +
            ", restores the bytes into a fresh map and compares them with the model.";
  } else {
    text += ": " + s.task + " is no longer live, so it ends.";
  }
  if (!s.paused_at.empty()) {
    text += " It stopped at yield point " + s.paused_at + " (" + yield_point_meaning(s.paused_at) +
            ").";
  }
  return text;
}

std::string narrate(const StepContext& c) {
  const ExplainStep& s = *c.step;
  std::string text;
  if (s.task == "writer") {
    text = narrate_writer(c);
  } else if (s.task == "releaser") {
    const std::string verb = verb_of(s.action);
    const std::string name = s.action.size() > verb.size() ? s.action.substr(verb.size() + 1) : "";
    if (verb == "keep") {
      text = "The releaser decides to let " + name + " finish; nothing changes.";
    } else if (verb == "release" || verb == "cancel") {
      text = "The releaser " + std::string(verb == "release" ? "releases " : "cancels ") + name;
      const bool was_live = find_snapshot(*c.prev, name) != nullptr;
      const bool is_live = find_snapshot(c.now(), name) != nullptr;
      text += was_live && !is_live ? ": it is no longer live."
              : !was_live          ? ", which was already released: nothing changes."
                                   : " (it stops at the end of its serializer's current step).";
    } else {
      text = "The releaser runs `" + s.action + "`.";
    }
  } else {
    text = narrate_serializer(c);
  }
  const MapLayout& p = *c.prev;
  const MapLayout& n = c.now();
  if (p.highest_required_version != n.highest_required_version && verb_of(s.action) != "snapshot") {
    text += " H goes from " + std::to_string(p.highest_required_version) + " to " +
            std::to_string(n.highest_required_version) +
            (n.highest_required_version == 0
                 ? ": no snapshot is live, so from now on every write happens in place."
                 : ".");
  }
  text += narrate_rehash_and_reuse(c);
  if (n.retired_entries > p.retired_entries || n.retired_states > p.retired_states) {
    text +=
        " Retired now (kept only for snapshots): " + plural(n.retired_entries, "entry", "entries") +
        ", " + plural(n.retired_states, "state", "states") + ".";
  } else if (n.retired_entries < p.retired_entries || n.retired_states < p.retired_states) {
    text += " Freed " +
            plural(p.retired_entries - n.retired_entries, "retired entry", "retired entries") +
            " and " + plural(p.retired_states - n.retired_states, "state", "states") +
            " that no live snapshot can see any more.";
  }
  return text;
}

// ---------------------------------------------------------------------------------------
// Text.

std::string heading(const ExplainStep& s) {
  std::string h = "step " + std::to_string(s.step) + " — " + s.task + ": " +
                  (s.action.empty() ? std::string("runs to its end") : s.action);
  if (!s.paused_at.empty() && s.action.find("pause at") == std::string::npos) {
    h += " (paused at " + s.paused_at + ")";
  }
  h += s.source_line > 0 ? " (line " + std::to_string(s.source_line) + ")"
                         : " (after the last line)";
  return h;
}

std::string entry_text(const LayoutEntry& e, const std::string& mark, bool first_seen) {
  std::string s = "[" + mark + key_name(e.key) + " =" + value_text(e.state) + " slot" +
                  std::to_string(e.slot) + " ev=" + std::to_string(e.entry_version) +
                  " sv=" + std::to_string(e.state_version);
  if (!e.seen_by.empty()) {
    s += std::string(" | ") + (first_seen ? "seen by " : "") + "{" + join(e.seen_by, ",") + "}";
  }
  return s + "]";
}

// Renders one chain; `seen_said` tracks whether "seen by" was spelled out on this line.
std::string chain_text(const std::vector<LayoutEntry>& chain, const ExplainStep& s,
                       const std::map<EntryKey, Located>& before) {
  std::vector<std::string> parts;
  bool seen_said = false;
  for (const LayoutEntry& e : chain) {
    std::string mark;
    if (s.copied_entries.count(e.key) || s.copied_states.count(e.key)) {
      mark = "*";
    } else if (!before.count(e.key)) {
      mark = "+";
    }
    parts.push_back(entry_text(e, mark, !seen_said));
    seen_said = seen_said || !e.seen_by.empty();
  }
  return join(parts, " -> ");
}

void table_text(std::string& out, const std::vector<std::vector<LayoutEntry>>& table,
                const ExplainStep& s, const std::map<EntryKey, Located>& before) {
  std::size_t shown = 0;
  for (std::size_t b = 0; b < table.size(); ++b) {
    if (table[b].empty()) continue;
    out += "    b" + std::to_string(b) + ": " + chain_text(table[b], s, before) + "\n";
    ++shown;
  }
  if (shown == 0) out += "    (every bucket empty)\n";
}

std::string heads_text(const SnapshotLayout& s) {
  std::vector<std::string> parts;
  for (std::uint32_t h : s.heads) parts.push_back(h == 0 ? "-" : "slot" + std::to_string(h));
  return "[" + join(parts, " ") + "]";
}

std::string step_text(const StepContext& c) {
  const ExplainStep& s = *c.step;
  const MapLayout& l = s.layout;
  std::string out = heading(s) + "\n";
  out += wrap(narrate(c), "  ");
  out += "  map=" + std::to_string(l.map_version) +
         " H=" + std::to_string(l.highest_required_version) + "  size=" + std::to_string(l.size) +
         "  retired: " + plural(l.retired_entries, "entry", "entries") + ", " +
         plural(l.retired_states, "state", "states") + "\n";
  const auto before = live_by_key(s.task == "writer" ? *c.op_start : *c.prev);
  for (std::size_t t = 0; t < l.tables.size(); ++t) {
    if (t == 0) {
      out += "  primary table (" + std::to_string(l.tables[t].size()) + " buckets):\n";
    } else {
      out += "  rehash target (" + std::to_string(l.tables[t].size()) + " buckets), rehash index " +
             std::to_string(l.rehash_index) + ": primary buckets below it have moved here:\n";
    }
    table_text(out, l.tables[t], s, before);
  }
  if (!l.retired.empty()) {
    out += "  only snapshots reach:\n";
    for (const LayoutEntry& e : l.retired) out += "    " + entry_text(e, "", true) + "\n";
  }
  if (l.snapshots.empty()) out += "  snapshots: none live\n";
  for (const SnapshotLayout& snap : l.snapshots) {
    out += "  snapshot " + snap.name + ": version " + std::to_string(snap.version) + ", size " +
           std::to_string(snap.size) + ", serializer wrote " + std::to_string(snap.emitted) +
           " of " + std::to_string(snap.size) + (snap.completed ? " (completed)" : "") +
           ", heads " + heads_text(snap) + "\n";
    const std::set<std::uint32_t> written = emitted_slots(c, snap);
    for (const auto& [h, chain] : snapshot_chains(c, snap)) {
      std::vector<std::string> parts;
      for (std::uint32_t slot : chain) {
        const LayoutEntry& e = *c.by_slot.at(slot);
        parts.push_back("[" + key_name(e.key) + " =" + value_text(e.state) + " slot" +
                        std::to_string(slot) + (written.count(slot) ? " written" : "") + "]");
      }
      out += "    sees h" + std::to_string(h) + ": " + join(parts, " -> ") + "\n";
    }
  }
  if (c.writer_op_ended()) {
    const auto reasons = copy_reasons(c);
    if (reasons.empty()) {
      out += wrap(nothing_copied(c), "  ");
    } else {
      out += "  copied:\n";
      for (const std::string& r : reasons) out += "    " + r + "\n";
    }
  }
  // Yield points passed through are noise here; the pause a step ends at is narrated.
  for (const std::string& t : s.trace) {
    if (t.find(" yield ") == std::string::npos) out += "  trace: " + t + "\n";
  }
  return out;
}

const char* kLegend =
    "Legend\n"
    "  step N — TASK: LINE (line L)    what ran; LINE is the step as the scenario writes it\n"
    "  map=M H=H                       map version (one per snapshot start) and highest\n"
    "                                  required version (largest live snapshot version, 0: none)\n"
    "  b1: [..] -> [..]                bucket 1's chain in the live table, head first\n"
    "  [k5 =50 slot2 ev=0 sv=0 | seen by {s1}]\n"
    "                                  key 5 (k5/ns2: namespace 2), state 50, pool slot 2,\n"
    "                                  entry_version 0, state_version 0, and in braces the\n"
    "                                  live snapshots that still see this very entry\n"
    "  # ...                           the scenario file's own comments, beside their steps\n"
    "  wrote k5 (ascending slots)      entries the snapshot's serializer has written\n"
    "  *k5 / +k5                       this step copied the entry or its state / a new key\n"
    "  only snapshots reach            retired entries: unlinked, kept until no snapshot sees "
    "them\n"
    "  heads [- slot2 ..]              the bucket heads a snapshot sees (- : empty)\n"
    "  Rule: an entry with entry_version < H (a state with state_version < H) is never\n"
    "  written; the writer copies it (and the chain in front of it) first.\n";

// ---------------------------------------------------------------------------------------
// DOT.

std::string dot_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out;
}

// Record labels also treat {}|<> and spaces at the edges specially.
std::string record_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '"' || ch == '\\' || ch == '{' || ch == '}' || ch == '|' || ch == '<' || ch == '>') {
      out += '\\';
    }
    out += ch;
  }
  return out;
}

// Entries as boxes (key, slot, entry version, the snapshots that see it and whose
// serializer wrote it) and their states as boxes of their own: an entry copy shares its
// state with the original, so two arrows point into one state.
std::string entries_dot(const StepContext& c, const std::map<EntryKey, Located>& before) {
  const ExplainStep& s = *c.step;
  std::map<std::uint32_t, std::vector<std::string>> written_by;
  for (const SnapshotLayout& snap : s.layout.snapshots) {
    for (std::uint32_t slot : emitted_slots(c, snap)) written_by[slot].push_back(snap.name);
  }
  std::map<std::uintptr_t, std::size_t> state_node;  // state identity -> node number
  std::string out;
  for (const auto& [slot, e] : c.by_slot) {
    const bool retired = c.retired_slots.count(slot) > 0;
    std::vector<std::string> lines = {key_name(e->key), "slot " + std::to_string(slot) + "  ev=" +
                                                            std::to_string(e->entry_version)};
    if (!e->seen_by.empty()) lines.push_back("seen by {" + join(e->seen_by, ",") + "}");
    if (written_by.count(slot)) lines.push_back("written by " + join(written_by[slot], ","));
    for (std::string& line : lines) line = dot_escape(line);
    std::string style;
    if (retired) {
      style =
          ", style=\"filled,dashed\", fillcolor=\"grey90\", color=\"grey50\", fontcolor=\"grey40\"";
    } else if (s.copied_entries.count(e->key) || s.copied_states.count(e->key)) {
      style = ", style=filled, fillcolor=\"gold\", penwidth=2";
    } else if (!before.count(e->key)) {
      style = ", style=filled, fillcolor=\"palegreen\"";
    }
    if (written_by.count(slot)) style += ", peripheries=2";
    out += "  e" + std::to_string(slot) + " [shape=box, label=\"" + join(lines, "\\n") + "\"" +
           style + "];\n";
    auto [it, fresh] = state_node.emplace(e->state_id, state_node.size() + 1);
    const std::string st = "st" + std::to_string(it->second);
    if (fresh) {
      const bool copied = s.copied_states.count(e->key) > 0 && !retired;
      out += "  " + st + " [shape=note, label=\"" +
             dot_escape(value_text(e->state) + "\\nsv=" + std::to_string(e->state_version)) + "\"" +
             (copied ? ", style=filled, fillcolor=\"gold\"" : "") +
             (retired ? ", color=\"grey50\", fontcolor=\"grey40\"" : "") + "];\n";
    }
    out += "  e" + std::to_string(slot) + " -> " + st + " [arrowhead=odot, color=\"grey30\"];\n";
  }
  return out;
}

// In every picture, so each can be read alone.
const char* kDotLegend =
    "  subgraph cluster_legend {\n"
    "    label=\"legend\"; fontsize=9; color=\"grey70\";\n"
    "    legend_new [shape=box, style=filled, fillcolor=\"palegreen\", label=\"new entry\"];\n"
    "    legend_copy [shape=box, style=filled, fillcolor=\"gold\", penwidth=2, "
    "label=\"copied by this step\"];\n"
    "    legend_retired [shape=box, style=\"filled,dashed\", fillcolor=\"grey90\", "
    "color=\"grey50\", label=\"retired: only snapshots reach it\"];\n"
    "    legend_written [shape=box, peripheries=2, label=\"written by a serializer\"];\n"
    "    legend_state [shape=note, label=\"a state (value, sv=state version)\"];\n"
    "    legend_snapshot [shape=record, color=\"blue\", fontcolor=\"blue\", "
    "label=\"snapshot heads|<h> bucket\"];\n"
    "    legend_new -> legend_copy [label=\"next\"];\n"
    "    legend_copy -> legend_state [arrowhead=odot, color=\"grey30\", label=\"its state\"];\n"
    "    legend_snapshot:h -> legend_retired [color=\"blue\", style=dashed, label=\"sees\"];\n"
    "    legend_written -> legend_state [style=invis];\n"
    "  }\n";

// Long because it draws one picture in order (tables, chains, snapshots, states); explain's
// renderer rewrite (per workload) is where it splits.
std::string step_dot(const StepContext& c) {
  const ExplainStep& s = *c.step;
  const MapLayout& l = s.layout;
  char name[32];
  std::snprintf(name, sizeof name, "step_%03llu", static_cast<unsigned long long>(s.step));
  std::string out = "digraph " + std::string(name) + " {\n";
  const std::string versions =
      "map=" + std::to_string(l.map_version) + " H=" + std::to_string(l.highest_required_version) +
      " size=" + std::to_string(l.size) + " retired entries=" + std::to_string(l.retired_entries) +
      " states=" + std::to_string(l.retired_states);
  out += "  graph [rankdir=LR, labelloc=t, labeljust=l, fontname=\"monospace\", label=\"" +
         dot_escape(heading(s)) + "\\l" + versions + "\\l\"];\n";
  out += "  node [fontname=\"monospace\", fontsize=10];\n";
  out += "  edge [fontname=\"monospace\", fontsize=9];\n";
  const auto before = live_by_key(s.task == "writer" ? *c.op_start : *c.prev);
  out += entries_dot(c, before);
  out += kDotLegend;
  // Bucket arrays and their chains.
  for (std::size_t t = 0; t < l.tables.size(); ++t) {
    const std::string id = t == 0 ? "primary" : "rehash";
    std::string fields;
    for (std::size_t b = 0; b < l.tables[t].size(); ++b) {
      fields += (b ? "|" : "") + std::string("<b") + std::to_string(b) + "> b" + std::to_string(b);
    }
    const std::string title_field =
        t == 0 ? "primary table" : "rehash target (index " + std::to_string(l.rehash_index) + ")";
    out += "  " + id + " [shape=record, label=\"" + record_escape(title_field) + "|" + fields +
           "\"];\n";
    for (std::size_t b = 0; b < l.tables[t].size(); ++b) {
      const auto& chain = l.tables[t][b];
      if (chain.empty()) continue;
      out += "  " + id + ":b" + std::to_string(b) + " -> e" + std::to_string(chain[0].slot) + ";\n";
    }
  }
  // `next` edges: live chains and, as last seen, retired entries.
  for (const auto& [slot, e] : c.by_slot) {
    auto it = c.next->find(slot);
    if (it == c.next->end() || it->second == 0 || !c.by_slot.count(it->second)) continue;
    const bool retired = c.retired_slots.count(slot) > 0;
    out += "  e" + std::to_string(slot) + " -> e" + std::to_string(it->second) +
           " [label=\"next\"" + (retired ? ", style=dashed, color=\"grey50\"" : "") + "];\n";
  }
  // The bucket arrays first, at the left edge, so buckets keep their place step to step.
  out +=
      std::string("  { rank=source; primary;") + (l.tables.size() > 1 ? " rehash;" : "") + " }\n";
  // Snapshot head arrays.
  for (std::size_t i = 0; i < l.snapshots.size(); ++i) {
    const SnapshotLayout& snap = l.snapshots[i];
    const std::string id = "snapshot" + std::to_string(i);
    std::string fields =
        record_escape(snap.name + " v" + std::to_string(snap.version) + " wrote " +
                      std::to_string(snap.emitted) + "/" + std::to_string(snap.size));
    for (std::size_t h = 0; h < snap.heads.size(); ++h) {
      fields += "|<h" + std::to_string(h) + "> " +
                (snap.heads[h] == 0 ? std::string("-") : "slot " + std::to_string(snap.heads[h]));
    }
    out += "  " + id + " [shape=record, color=\"blue\", fontcolor=\"blue\", label=\"" + fields +
           "\"];\n";
    for (std::size_t h = 0; h < snap.heads.size(); ++h) {
      if (snap.heads[h] == 0 || !c.by_slot.count(snap.heads[h])) continue;
      out += "  " + id + ":h" + std::to_string(h) + " -> e" + std::to_string(snap.heads[h]) +
             " [color=\"blue\", style=dashed];\n";
    }
  }
  return out + "}\n";
}

// ---------------------------------------------------------------------------------------
// The model as JSON (the HTML viewer draws it).

nlohmann::json map_json(const StepContext& c, const std::map<EntryKey, Located>& before) {
  const ExplainStep& s = *c.step;
  const MapLayout& l = s.layout;
  nlohmann::json tables = nlohmann::json::array();
  for (const auto& table : l.tables) {
    nlohmann::json buckets = nlohmann::json::array();
    for (const auto& chain : table) {
      nlohmann::json slots = nlohmann::json::array();
      for (const LayoutEntry& e : chain) slots.push_back(e.slot);
      buckets.push_back(slots);
    }
    tables.push_back(buckets);
  }
  nlohmann::json snapshots = nlohmann::json::array();
  std::map<std::uint32_t, std::vector<std::string>> written_by;
  for (const SnapshotLayout& snap : l.snapshots) {
    for (std::uint32_t slot : emitted_slots(c, snap)) written_by[slot].push_back(snap.name);
    snapshots.push_back({{"name", snap.name},
                         {"version", snap.version},
                         {"heads", snap.heads},
                         {"size", snap.size},
                         {"emitted", snap.emitted},
                         {"completed", snap.completed}});
  }
  std::map<std::uintptr_t, std::size_t> state_ids;
  nlohmann::json entries = nlohmann::json::array();
  nlohmann::json states = nlohmann::json::array();
  for (const auto& [slot, e] : c.by_slot) {
    const bool retired = c.retired_slots.count(slot) > 0;
    auto [it, fresh] = state_ids.emplace(e->state_id, state_ids.size() + 1);
    if (fresh) {
      states.push_back({{"id", it->second},
                        {"value", value_text(e->state)},
                        {"sv", e->state_version},
                        {"copied", !retired && s.copied_states.count(e->key) > 0}});
    }
    auto next = c.next->find(slot);
    entries.push_back({{"slot", slot},
                       {"key", key_name(e->key)},
                       {"ev", e->entry_version},
                       {"sv", e->state_version},
                       {"state", it->second},
                       {"retired", retired},
                       {"copied", !retired && (s.copied_entries.count(e->key) > 0 ||
                                               s.copied_states.count(e->key) > 0)},
                       {"new", !retired && !before.count(e->key)},
                       {"seen_by", e->seen_by},
                       {"written_by", written_by[slot]},
                       {"next", next == c.next->end() ? 0 : next->second}});
  }
  return {{"map_version", l.map_version},
          {"H", l.highest_required_version},
          {"size", l.size},
          {"rehash_index", l.rehash_index},
          {"tables", tables},
          {"entries", entries},
          {"states", states},
          {"snapshots", snapshots},
          {"retired_entries", l.retired_entries},
          {"retired_states", l.retired_states}};
}

}  // namespace

nlohmann::json step_json_base(const Explanation& e, std::size_t i, const std::string& narration) {
  const ExplainStep& s = e.steps[i];
  const StepNotes notes = notes_of(e, i);
  return {{"step", s.step},
          {"task", s.task},
          {"action", s.action},
          {"line", s.source_line},
          {"paused_at", s.paused_at},
          {"notes_above", notes.above ? *notes.above : std::vector<std::string>{}},
          {"notes_after", notes.after ? *notes.after : std::vector<std::string>{}},
          {"trailing", notes.trailing},
          {"narration", narration}};
}

nlohmann::json explanation_json_base(const Explanation& e, const char* workload) {
  const RunResult& r = e.result;
  return {{"file", e.file},
          {"workload", workload},
          {"intro", e.notes.intro},
          {"closing", e.notes.closing},
          {"outcome", outcome_name(r.outcome)},
          {"exit_code", exit_code(r.outcome)},
          {"check", r.check},
          {"message", r.message},
          {"steps", nlohmann::json::array()}};
}

std::string explain_json(const Explanation& e) {
  nlohmann::json doc = explanation_json_base(e, "map");
  walk(e, [&](const StepContext& c) {
    const std::size_t i = static_cast<std::size_t>(c.step - e.steps.data());
    nlohmann::json step = step_json_base(e, i, narrate(c));
    const auto before = live_by_key(c.step->task == "writer" ? *c.op_start : *c.prev);
    step["map"] = map_json(c, before);
    step["copies"] = c.writer_op_ended() ? copy_reasons(c) : std::vector<std::string>{};
    if (c.writer_op_ended() && copy_reasons(c).empty()) step["nothing_copied"] = nothing_copied(c);
    doc["steps"].push_back(std::move(step));
  });
  COWSTATE_ASSERT(doc["steps"].size() == e.steps.size(), "REQUIRES", "one model step per step");
  return doc.dump();
}

std::string explain_text(const Explanation& e) {
  std::string out = "cowstate explain " + e.file + "\n" + kLegend + "\n" +
                    comment_lines(e.notes.intro, "") + (e.notes.intro.empty() ? "" : "\n");
  walk(e, [&](const StepContext& c) {
    const StepNotes notes = notes_of(e, static_cast<std::size_t>(c.step - e.steps.data()));
    if (notes.above != nullptr) out += comment_lines(*notes.above, "");
    std::string text = step_text(c);
    if (!notes.trailing.empty()) text.insert(text.find('\n'), "   # " + notes.trailing);
    out += text;
    if (notes.after != nullptr) out += comment_lines(*notes.after, "  ");
    out += "\n";
  });
  out += comment_lines(e.notes.closing, "");
  const RunResult& r = e.result;
  if (r.outcome == Outcome::pass) {
    out += "outcome: pass (exit 0): every check and expectation held\n";
  } else {
    out += std::string("outcome: ") + outcome_name(r.outcome) + " (exit " +
           std::to_string(exit_code(r.outcome)) + ")\n  check: " + r.check +
           "\n  what:  " + r.message + "\n";
  }
  return out;
}

std::vector<std::string> explain_dot(const Explanation& e) {
  std::vector<std::string> out;
  walk(e, [&out](const StepContext& c) { out.push_back(step_dot(c)); });
  COWSTATE_ASSERT(out.size() == e.steps.size(), "REQUIRES", "one graph per step");
  return out;
}

}  // namespace cowstate::sim
