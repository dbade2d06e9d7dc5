// `cowstate explain` of a backend scenario (cowstate/sim/explain.h): the keyed backend as key
// groups x states, one copy-on-write map per cell, narrated step by step.
//
// What a step says, from the layouts before and after it (BackendLayout):
//   - a state operation: the key's key group, the value before and after, and whether the
//     writer copied the entry or its state because a checkpoint's map snapshot still needs
//     it (entry_version or state_version below the map's highest required version H);
//   - a checkpoint's sync phase: which (state, key group) map snapshots it took, and the map
//     versions they froze; its async phase: which key groups' blocks were written, which map
//     snapshots were released with them, bytes written, and the commit;
//   - a restore: which key groups (and entries) each target range receives;
//   - the clock: logical time before and after, and which stored values reached their
//     expiry instant (last access + ttl <= now); every value or element that leaves the live
//     backend without being written away is named with the reason (expired at logical time:
//     lazy expiry on read, incremental cleanup, or a `cleanup` line);
//   - the map snapshots still held, per checkpoint, and the versions of maps that have one.
// Values read as the backend workload's canonical form: count 7, events [7,8], attrs {2:20},
// sum 11, avg [sum,count]; with TTL each value or element carries "@t", its last access.
#include "cowstate/sim/explain.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "backend/scenario_lines.h"
#include "core/explain_words.h"
#include "cowstate/assert.h"

namespace cowstate::sim {

namespace {

using explain_words::field_of;
using explain_words::join;
using explain_words::verb_of;
using explain_words::wrap;

using Cell = std::pair<std::string, std::int32_t>;       // (state, key group)
using EntryId = std::pair<std::uint64_t, std::int32_t>;  // (key, namespace)

ActionKind kind_of_state(const std::string& state) {
  for (const BackendStateInfo& info : backend_states()) {
    if (state == info.name) return info.kind;
  }
  return ActionKind::value_state;
}

std::size_t stride_of(const BackendLayout& l, const std::string& state) {
  auto it = l.ttl_stride.find(state);
  return it == l.ttl_stride.end() ? 0 : it->second;
}

// A canonical value as a learner reads it (see the file comment).
std::string value_text_of(const BackendLayout& l, const std::string& state,
                          const std::vector<std::int64_t>& v) {
  const ActionKind kind = kind_of_state(state);
  const std::size_t stride = stride_of(l, state);
  const std::size_t per = stride != 0 ? stride : kind == ActionKind::map_state ? 2 : 1;
  std::vector<std::string> parts;
  for (std::size_t i = 0; i + per <= v.size(); i += per) {
    std::string p = kind == ActionKind::map_state
                        ? std::to_string(v[i]) + ":" + std::to_string(v[i + 1])
                        : std::to_string(v[i]);
    if (stride != 0) p += "@" + std::to_string(v[i + per - 1]);
    parts.push_back(p);
  }
  if (kind == ActionKind::map_state) return "{" + join(parts, ",") + "}";
  if (kind == ActionKind::list_state) return "[" + join(parts, ",") + "]";
  if (kind == ActionKind::aggregating_state) return "[" + join(parts, ",") + "]";
  return parts.empty() ? "-" : parts.front();
}

std::string entry_name(std::uint64_t key, std::int32_t ns) {
  return "k" + std::to_string(key) + (ns != 0 ? "/ns" + std::to_string(ns) : "");
}

std::map<Cell, const BackendMapView*> cells_of(const BackendLayout& l) {
  std::map<Cell, const BackendMapView*> out;
  for (const BackendMapView& m : l.maps) out[{m.state, m.key_group}] = &m;
  return out;
}

std::map<EntryId, const BackendEntryView*> entries_of(const BackendMapView* m) {
  std::map<EntryId, const BackendEntryView*> out;
  if (m == nullptr) return out;
  for (const BackendEntryView& e : m->entries) out[{e.key, e.ns}] = &e;
  return out;
}

const CheckpointView* checkpoint_named(const BackendLayout& l, const std::string& name) {
  for (const CheckpointView& c : l.checkpoints) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

// "count@kg1, events@kg1": map snapshots grouped by key group.
std::string snapshots_text(const std::vector<MapSnapshotId>& ids) {
  std::map<std::int32_t, std::vector<std::string>> by_group;
  for (const auto& [state, g] : ids) by_group[g].push_back(state);
  std::vector<std::string> parts;
  for (const auto& [g, states] : by_group) {
    parts.push_back("key group " + std::to_string(g) + " (" + join(states, ", ") + ")");
  }
  return parts.empty() ? "none" : join(parts, "; ");
}

// ---------------------------------------------------------------------------------------
// What changed in the live backend, and why.

struct Change {
  Cell cell;
  EntryId id;
  const BackendEntryView* before = nullptr;
  const BackendEntryView* after = nullptr;
};

std::vector<Change> changes(const BackendLayout& p, const BackendLayout& n) {
  std::vector<Change> out;
  const auto pc = cells_of(p);
  const auto nc = cells_of(n);
  std::set<Cell> cells;
  for (const auto& [c, m] : pc) cells.insert(c);
  for (const auto& [c, m] : nc) cells.insert(c);
  for (const Cell& c : cells) {
    const auto pe = entries_of(pc.count(c) ? pc.at(c) : nullptr);
    const auto ne = entries_of(nc.count(c) ? nc.at(c) : nullptr);
    std::set<EntryId> ids;
    for (const auto& [id, e] : pe) ids.insert(id);
    for (const auto& [id, e] : ne) ids.insert(id);
    for (const EntryId& id : ids) {
      const auto* b = pe.count(id) ? pe.at(id) : nullptr;
      const auto* a = ne.count(id) ? ne.at(id) : nullptr;
      if (b && a && b->value == a->value && b->entry_version == a->entry_version &&
          b->state_version == a->state_version) {
        continue;
      }
      out.push_back({c, id, b, a});
    }
  }
  return out;
}

// The elements of `before` (a TTL state's canonical value) that are gone from `after` and
// had expired at `now`: "7@0".
std::vector<std::string> expired_elements(const BackendLayout& n, const std::string& state,
                                          const std::vector<std::int64_t>& before,
                                          const std::vector<std::int64_t>* after) {
  const std::size_t stride = stride_of(n, state);
  std::vector<std::string> out;
  if (stride == 0) return out;
  for (std::size_t i = 0; i + stride <= before.size(); i += stride) {
    const std::vector<std::int64_t> element(
        before.begin() + static_cast<std::ptrdiff_t>(i),
        before.begin() + static_cast<std::ptrdiff_t>(i + stride));
    bool kept = false;
    for (std::size_t j = 0; after && j + stride <= after->size(); j += stride) {
      kept = kept || std::equal(element.begin(), element.end(),
                                after->begin() + static_cast<std::ptrdiff_t>(j));
    }
    const std::int64_t last_access = element.back();
    const auto ttl = static_cast<std::int64_t>(n.ttl_ms);
    if (!kept && last_access + ttl <= n.now) {
      out.push_back(join({std::to_string(element.front()), std::to_string(last_access)}, "@"));
    }
  }
  return out;
}

std::string change_text(const BackendLayout& p, const BackendLayout& n, const Change& c) {
  const std::string& state = c.cell.first;
  const std::string where = state + " " + entry_name(c.id.first, c.id.second) + " (key group " +
                            std::to_string(c.cell.second) + ")";
  if (!c.before) return where + " is new: " + value_text_of(n, state, c.after->value);
  std::string text = where + " ";
  if (!c.after) {
    text += "is gone (was " + value_text_of(p, state, c.before->value) + ")";
  } else {
    text += "goes from " + value_text_of(p, state, c.before->value) + " to " +
            value_text_of(n, state, c.after->value);
  }
  const auto gone =
      expired_elements(n, state, c.before->value, c.after ? &c.after->value : nullptr);
  if (!gone.empty()) {
    text += "; expired and removed: " + join(gone, ", ") + " (last access + ttl " +
            std::to_string(n.ttl_ms) + " <= now " + std::to_string(n.now) + ")";
  }
  const auto pc = cells_of(p);
  const std::uint32_t h = pc.count(c.cell) ? pc.at(c.cell)->highest_required_version : 0;
  if (c.after && c.after->entry_version > c.before->entry_version && h > 0 &&
      c.before->entry_version < h) {
    text += "; the entry was copied (entry_version " + std::to_string(c.before->entry_version) +
            " < H=" + std::to_string(h) + ": a checkpoint's map snapshot still needs it)";
  } else if (c.after && c.after->state_version > c.before->state_version && h > 0 &&
             c.before->state_version < h) {
    text += "; its state was copied before it changed (state_version " +
            std::to_string(c.before->state_version) + " < H=" + std::to_string(h) + ")";
  }
  return text;
}

// Retired memory a map freed in this step: what only a released map snapshot still needed.
std::string reclaims_text(const BackendLayout& p, const BackendLayout& n) {
  const auto before = cells_of(p);
  const auto after = cells_of(n);
  std::vector<std::string> freed;
  for (const auto& [cell, m] : before) {
    const std::size_t now = after.count(cell) ? after.at(cell)->retired_entries : 0;
    const std::size_t states = after.count(cell) ? after.at(cell)->retired_states : 0;
    if (m->retired_entries > now || m->retired_states > states) {
      freed.push_back(
          cell.first + " in key group " + std::to_string(cell.second) + " (" +
          std::to_string(m->retired_entries - std::min(now, m->retired_entries)) + " entries, " +
          std::to_string(m->retired_states - std::min(states, m->retired_states)) + " states)");
    }
  }
  if (freed.empty()) return "";
  return " Retired memory freed, since no live map snapshot can reach it any more: " +
         join(freed, "; ") + ".";
}

// ---------------------------------------------------------------------------------------
// Narration by task.

std::string narrate_sync(const BackendLayout& n, const std::string& name) {
  const CheckpointView* c = checkpoint_named(n, name);
  if (c == nullptr) return "The writer starts checkpoint " + name + ".";
  std::string text = "The writer runs the sync phase of checkpoint " + name + " (id " +
                     std::to_string(c->id) +
                     "): it takes one map snapshot per (state, key group) "
                     "that holds entries, " +
                     std::to_string(c->taken.size()) + " in all: " + snapshots_text(c->taken) + ".";
  const auto cells = cells_of(n);
  std::set<std::uint32_t> versions;
  for (const MapSnapshotId& id : c->taken) {
    if (cells.count(id)) versions.insert(cells.at(id)->map_version);
  }
  if (!versions.empty()) {
    std::vector<std::string> v;
    for (std::uint32_t x : versions) v.push_back(std::to_string(x));
    text += " Each of those maps' version went up by one (now " + join(v, ", ") +
            ") and became its highest required version H: from now on the writer copies an "
            "entry or state of such a map instead of changing what " +
            name + " must still write. Maps without a snapshot change in place.";
  }
  return text;
}

// Full-snapshot TTL cleanup's decisions: what the sync phase's image held and the written
// checkpoint does not, because it had expired when its entry was written.
std::string left_out_text(const BackendLayout& n, const CheckpointView& before,
                          const CheckpointView& after) {
  std::vector<std::string> out;
  for (const ImageEntryView& e : before.image) {
    const bool kept = std::any_of(after.image.begin(), after.image.end(), [&](const auto& a) {
      return a.state == e.state && a.key == e.key && a.ns == e.ns && a.value == e.value;
    });
    if (!kept) {
      out.push_back(e.state + " " + entry_name(e.key, e.ns) + "=" +
                    value_text_of(n, e.state, e.value));
    }
  }
  if (out.empty()) return "";
  return " Full-snapshot cleanup left out of it what had expired when its entry was written "
         "(last access + ttl <= now " +
         std::to_string(n.now) + "): " + join(out, ", ") + "; the live backend keeps them.";
}

std::string narrate_async(const BackendLayout& p, const BackendLayout& n, const ExplainStep& s) {
  const CheckpointView* before = checkpoint_named(p, s.task);
  const CheckpointView* after = checkpoint_named(n, s.task);
  std::string text = "The async phase of " + s.task + " runs `" +
                     (s.action.empty() ? std::string("(to its end)") : s.action) + "`";
  if (after == nullptr) return text + ".";
  std::vector<MapSnapshotId> released;
  for (const MapSnapshotId& id : before ? before->held : std::vector<MapSnapshotId>{}) {
    if (std::find(after->held.begin(), after->held.end(), id) == after->held.end()) {
      released.push_back(id);
    }
  }
  text += ": " + std::to_string(after->bytes_written - (before ? before->bytes_written : 0)) +
          " bytes written (" + std::to_string(after->bytes_written) + " so far).";
  if (!released.empty()) {
    text += " Blocks written for " + snapshots_text(released) +
            ", whose map snapshots are released right away: those maps need copy nothing more "
            "for " +
            s.task + ".";
  }
  if (!after->held.empty()) text += " Still held: " + snapshots_text(after->held) + ".";
  if (after->finished && !(before && before->finished)) {
    if (after->complete) {
      text +=
          " The file is complete: fsynced, renamed into place, its manifest written: " + s.task +
          " is a complete checkpoint now, and it is read back and restored to check it.";
    } else if (after->cancelled) {
      text += " It was cancelled: every map snapshot it held is released and nothing is published.";
    } else {
      text += " It failed" + (after->error.empty() ? std::string() : " (" + after->error + ")") +
              ": every map snapshot it held is released and nothing is published.";
    }
  }
  if (before != nullptr && after->complete) text += left_out_text(n, *before, *after);
  if (!s.paused_at.empty()) text += " It stopped at yield point " + s.paused_at + ".";
  return text;
}

// The step's trace lines that start with `prefix` (after the step number), without it.
std::vector<std::string> traced(const ExplainStep& s, const std::string& prefix) {
  std::vector<std::string> out;
  for (const std::string& line : s.trace) {
    const std::size_t space = line.find(' ');
    if (space == std::string::npos) continue;
    if (line.compare(space + 1, prefix.size(), prefix) == 0) {
      out.push_back(line.substr(space + 1 + prefix.size()));
    }
  }
  return out;
}

// A serializer arming a storage fault: `fail at write N`, `lose write N|manifest`,
// `misdirect write N|manifest to OFFSET`.
std::string narrate_fault(const ExplainStep& s) {
  std::vector<std::string> words;
  std::istringstream in(s.action);
  for (std::string w; in >> w;) words.push_back(w);
  auto after = [&words](const std::string& word) {
    const auto it = std::find(words.begin(), words.end(), word);
    return it == words.end() || it + 1 == words.end() ? std::string() : *(it + 1);
  };
  const std::string verb = words.empty() ? std::string() : words.front();
  if (verb == "fail") {
    return s.task + " arms an I/O error: file operation " + after("write") +
           " from now fails. The checkpoint must fail cleanly: every map snapshot it holds "
           "released, nothing published, the error named.";
  }
  const bool manifest = words.size() > 1 && words[1] == "manifest";
  const std::string target = manifest
                                 ? "the manifest of " + s.task
                                 : "append " + after("write") + " to " + s.task + "'s data file";
  const std::string consequence =
      " A later restore must report the damaged file by name (C9) or fall back past it "
      "explicitly, never restore wrong data.";
  if (verb == "lose") {
    return s.task + " arms a lost write: " + target +
           " will be acknowledged but never reach the disk; the commit cannot tell." + consequence;
  }
  return s.task + " arms a misdirected write: " + target + " will land at byte " + after("to") +
         " of the file instead of its end, and be acknowledged." + consequence;
}

// The io task completes one queued buffer (async_io).
std::string narrate_land(const ExplainStep& s) {
  const std::string name = s.action.substr(verb_of(s.action).size() + 1);
  return "The I/O thread completes the oldest write queued for " + name +
         "'s files: with async I/O, writes land late and in any order across files (never "
         "within one), and an error of a landed write surfaces at " +
         name + "'s next call.";
}

// `power_loss after=OP keep=SEED [read=FAULT at=BIT]`: the crash point, what the disk
// decided, and what the restart found.
std::string narrate_power_loss(const ExplainStep& s) {
  std::string text = "The power fails";
  for (const std::string& l : traced(s, "power loss ")) text += " " + l;
  text +=
      " (each operation not yet durable is kept, lost or torn). The backend restarts from "
      "storage: it must find at least the newest checkpoint whose commit had returned by the "
      "crash point and restore it exactly (C8), or report a damaged one (C9).";
  for (const std::string& l : traced(s, "restart: ")) text += " Restart: " + l + ".";
  return text;
}

// "restore c1 into 0-3 and 4-7": which key groups and entries each range receives.
std::string narrate_restore(const BackendLayout& n, const std::string& action) {
  std::istringstream words(action);
  std::string verb, name, word;
  words >> verb >> name;
  std::vector<std::pair<std::int32_t, std::int32_t>> ranges;
  while (words >> word) {
    int a = 0, b = 0;
    if (std::sscanf(word.c_str(), "%d-%d", &a, &b) == 2) ranges.emplace_back(a, b);
  }
  if (ranges.empty()) ranges.emplace_back(n.first_key_group, n.last_key_group);
  const CheckpointView* c = checkpoint_named(n, name);
  std::string text =
      "The writer restores checkpoint " + name + " into fresh backends of key groups ";
  std::vector<std::string> rs;
  for (auto [a, b] : ranges) rs.push_back(std::to_string(a) + "-" + std::to_string(b));
  text += join(rs, " and ") + ". Each reads only the blocks of its own key groups:";
  for (auto [a, b] : ranges) {
    std::map<std::int32_t, std::vector<std::string>> got;
    for (const ImageEntryView& e : c ? c->image : std::vector<ImageEntryView>{}) {
      if (e.key_group >= a && e.key_group <= b) {
        got[e.key_group].push_back(e.state + " " + entry_name(e.key, e.ns) + "=" +
                                   value_text_of(n, e.state, e.value));
      }
    }
    std::vector<std::string> parts;
    for (const auto& [g, es] : got)
      parts.push_back("key group " + std::to_string(g) + ": " + join(es, ", "));
    text += " " + std::to_string(a) + "-" + std::to_string(b) + " gets " +
            (parts.empty() ? std::string("nothing") : join(parts, "; ")) + ".";
  }
  return text + " The live backend is not changed by a restore check.";
}

std::string narrate_clock(const BackendLayout& p, const BackendLayout& n) {
  std::string text =
      "Logical time goes from " + std::to_string(p.now) + " to " + std::to_string(n.now) + " ms.";
  std::vector<std::string> reached;
  const auto ttl = static_cast<std::int64_t>(n.ttl_ms);
  for (const BackendMapView& m : n.maps) {
    const std::size_t stride = stride_of(n, m.state);
    for (const BackendEntryView& e : m.entries) {
      for (std::size_t i = 0; stride != 0 && i + stride <= e.value.size(); i += stride) {
        const std::int64_t at = e.value[i + stride - 1] + ttl;
        if (at > p.now && at <= n.now) {
          reached.push_back(m.state + " " + entry_name(e.key, e.ns) + " (" +
                            std::to_string(e.value[i]) + " last accessed at " +
                            std::to_string(e.value[i + stride - 1]) + ", expiry instant " +
                            std::to_string(at) + ")");
        }
      }
    }
  }
  if (!reached.empty()) {
    text += " Expired now (last access + ttl <= now, the boundary instant included): " +
            join(reached, "; ") +
            ". They stay stored until a read, an incremental cleanup or a full-snapshot "
            "checkpoint meets them.";
  }
  return text;
}

// The key group of key `key` (as written in a step line), from any map that holds it.
std::optional<std::int32_t> key_group_of_key(const BackendLayout& l, const std::string& key) {
  for (const BackendMapView& m : l.maps) {
    for (const BackendEntryView& e : m.entries) {
      if (std::to_string(e.key) == key) return m.key_group;
    }
  }
  return std::nullopt;
}

std::string narrate_writer(const BackendLayout& n, const std::string& op) {
  const std::string verb = verb_of(op);
  if (verb == "checkpoint") return narrate_sync(n, op.substr(verb.size() + 1));
  if (verb == "restore") return narrate_restore(n, op);
  if (verb == "power_loss") return "";  // narrate_step reads what the trace says
  if (verb == "cleanup") {
    return "The writer drives incremental cleanup of " + field_of(op, "s").value_or("a state") +
           " over " + field_of(op, "n").value_or("some") +
           " entries: each visited value or element whose last access + ttl <= now is removed.";
  }
  const auto state = field_of(op, "s");
  const auto key = field_of(op, "k");
  if (!state || !key) return "The writer runs `" + op + "`.";
  std::string text = "The writer switches the current key to " + *key;
  if (const auto g = key_group_of_key(n, *key)) text += " (key group " + std::to_string(*g) + ")";
  std::vector<std::string> words;
  std::istringstream in(op);
  for (std::string w; in >> w;) {
    if (w.find('=') == std::string::npos) words.push_back(w);
  }
  words.erase(words.begin());  // the state kind
  const auto ns = field_of(op, "ns");
  return text + (ns ? " and the namespace to " + *ns : "") + ", then runs `" + join(words, " ") +
         "` on state " + *state + ".";
}

std::string narrate_step(const ExplainStep& s, const BackendLayout& p, const BackendLayout& n) {
  std::string text;
  if (s.task == "writer") {
    text = s.action == "continue" ? "The writer continues the operation it paused."
           : verb_of(s.action) == "power_loss"
               ? narrate_power_loss(s)
               : narrate_writer(n, s.action.substr(0, s.action.find(" pause at ")));
  } else if (s.task == "clock") {
    text = narrate_clock(p, n);
  } else if (s.task == "releaser") {
    const std::string verb = verb_of(s.action);
    text = verb == "cancel" ? "The releaser cancels " + s.action.substr(verb.size() + 1) +
                                  " from another task: its writer stops at its next section or "
                                  "block, unless the commit has begun."
                            : "The releaser runs `" + s.action + "`.";
  } else if (s.task == "io") {
    text = narrate_land(s);
  } else if (const std::string verb = verb_of(s.action);
             verb == "fail" || verb == "lose" || verb == "misdirect") {
    text = narrate_fault(s);
  } else {
    text = narrate_async(p, n, s);
  }
  std::vector<std::string> cs;
  for (const Change& c : changes(p, n)) cs.push_back(change_text(p, n, c));
  if (!cs.empty()) text += " Live backend: " + join(cs, "; ") + ".";
  return text + reclaims_text(p, n);
}

// ---------------------------------------------------------------------------------------
// Text and pictures.

std::string heading(const ExplainStep& s) {
  return "step " + std::to_string(s.step) + " — " + s.task + ": " +
         (s.action.empty() ? std::string("runs to its end") : s.action) +
         (s.source_line > 0 ? " (line " + std::to_string(s.source_line) + ")"
                            : " (after the last line)");
}

std::string cell_text(const BackendLayout& l, const BackendMapView& m) {
  std::vector<std::string> es;
  for (const BackendEntryView& e : m.entries) {
    es.push_back(entry_name(e.key, e.ns) + "=" + value_text_of(l, m.state, e.value));
  }
  std::string t = m.state + ": " + (es.empty() ? "(empty)" : join(es, " "));
  if (m.highest_required_version != 0) {
    t += " [map v" + std::to_string(m.map_version) +
         " H=" + std::to_string(m.highest_required_version) + "]";
  }
  if (m.retired_entries + m.retired_states > 0) {
    t += " [retired " + std::to_string(m.retired_entries) + "e/" +
         std::to_string(m.retired_states) + "s]";
  }
  if (m.rehash_capacity != 0) t += " [rehashing to " + std::to_string(m.rehash_capacity) + "]";
  return t;
}

std::string layout_text(const BackendLayout& l) {
  std::string out;
  if (l.ttl)
    out +=
        "  clock: now=" + std::to_string(l.now) + " ms, ttl " + std::to_string(l.ttl_ms) + " ms\n";
  std::map<std::int32_t, std::vector<std::string>> rows;
  for (const BackendMapView& m : l.maps) rows[m.key_group].push_back(cell_text(l, m));
  out += "  key groups " + std::to_string(l.first_key_group) + "-" +
         std::to_string(l.last_key_group) + " x states (" + join(l.states, ", ") +
         "):" + (rows.empty() ? " every map empty\n" : "\n");
  for (const auto& [g, cells] : rows)
    out += "    kg" + std::to_string(g) + "  " + join(cells, " | ") + "\n";
  for (const CheckpointView& c : l.checkpoints) {
    out += "  checkpoint " + c.name + " (id " + std::to_string(c.id) + "): " +
           (c.complete         ? "complete"
            : c.cancelled      ? "cancelled"
            : !c.error.empty() ? "failed"
            : c.finished       ? "finished"
                               : "in flight") +
           (c.storage.empty() ? "" : " (" + c.storage + ")") + ", " +
           std::to_string(c.bytes_written) +
           " bytes written, map snapshots held: " + snapshots_text(c.held) + "\n";
  }
  return out;
}

const char* kLegend =
    "Legend\n"
    "  kg1  count: k3=30 | events: k3=[7,8]   key group 1's maps, one per state, and their "
    "entries\n"
    "  k7/ns1                                 key 7 in namespace 1\n"
    "  7@5                                    (TTL) value 7, last accessed at logical time 5 ms\n"
    "  [map v2 H=2]                           a map with a live map snapshot: its version and "
    "highest\n"
    "                                         required version; entries with entry_version < H are "
    "copied\n"
    "                                         before they change\n"
    "  map snapshots held                     what a checkpoint's async phase has still to write\n"
    "  # ...                                  the scenario file's own comments, beside their "
    "steps\n";

// Calls fn(index, step, layout before it) for every step; before the first, the backend
// is empty (the same states and range, no entries, no checkpoints).
template <class F>
void walk(const Explanation& e, F&& fn) {
  BackendLayout empty = e.steps.empty() ? BackendLayout{} : e.steps.front().backend;
  empty.maps.clear();
  empty.checkpoints.clear();
  empty.now = 0;
  const BackendLayout* prev = &empty;
  for (std::size_t i = 0; i < e.steps.size(); ++i) {
    fn(i, e.steps[i], *prev);
    prev = &e.steps[i].backend;
  }
}

std::string dot_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '&')
      out += "&amp;";
    else if (ch == '<')
      out += "&lt;";
    else if (ch == '>')
      out += "&gt;";
    else if (ch == '"')
      out += "&quot;";
    else
      out += ch;
  }
  return out;
}

std::string step_dot(const ExplainStep& s, const BackendLayout& p) {
  const BackendLayout& l = s.backend;
  std::set<Cell> changed;
  for (const Change& c : changes(p, l)) changed.insert(c.cell);
  const auto cells = cells_of(l);
  std::string t =
      "<TABLE BORDER=\"0\" CELLBORDER=\"1\" CELLSPACING=\"0\"><TR><TD><B>key group</B></TD>";
  for (const std::string& st : l.states) t += "<TD><B>" + dot_escape(st) + "</B></TD>";
  t += "</TR>";
  for (std::int32_t g = l.first_key_group; g <= l.last_key_group; ++g) {
    t += "<TR><TD>" + std::to_string(g) + "</TD>";
    for (const std::string& st : l.states) {
      auto it = cells.find({st, g});
      std::string body, color;
      if (it != cells.end()) {
        for (const BackendEntryView& e : it->second->entries) {
          body +=
              dot_escape(entry_name(e.key, e.ns) + "=" + value_text_of(l, st, e.value)) + "<BR/>";
        }
        if (it->second->highest_required_version != 0) color = "lightblue";
      }
      if (changed.count({st, g})) color = "gold";
      t += "<TD" + (color.empty() ? std::string() : " BGCOLOR=\"" + color + "\"") + ">" + body +
           "</TD>";
    }
    t += "</TR>";
  }
  t += "</TABLE>";
  std::string out = "digraph step_" + std::to_string(s.step) + " {\n";
  out += "  graph [labelloc=t, labeljust=l, fontname=\"monospace\", label=\"" +
         dot_escape(heading(s)) +
         (l.ttl ? "\\lnow=" + std::to_string(l.now) + " ms" : std::string()) + "\\l\"];\n";
  out += "  node [fontname=\"monospace\", fontsize=10];\n";
  out += "  backend [shape=plaintext, label=<" + t + ">];\n";
  for (std::size_t i = 0; i < l.checkpoints.size(); ++i) {
    const CheckpointView& c = l.checkpoints[i];
    out += "  cp" + std::to_string(i) + " [shape=box, color=\"blue\", label=\"" + c.name + " (id " +
           std::to_string(c.id) + ")\\n" + std::to_string(c.bytes_written) + " bytes, holds " +
           std::to_string(c.held.size()) + " map snapshots" + (c.complete ? "\\ncomplete" : "") +
           (c.storage.empty() ? "" : "\\n" + c.storage) +
           "\"];\n";
    if (!c.held.empty())
      out += "  cp" + std::to_string(i) +
             " -> backend [color=\"blue\", style=dashed, label=\"holds\"];\n";
  }
  out +=
      "  subgraph cluster_legend { label=\"legend\"; fontsize=9; color=\"grey70\";\n"
      "    legend [shape=plaintext, label=<<TABLE BORDER=\"0\" CELLBORDER=\"1\" CELLSPACING=\"0\">"
      "<TR><TD BGCOLOR=\"gold\">changed by this step</TD></TR>"
      "<TR><TD BGCOLOR=\"lightblue\">map with a live map snapshot (H &gt; 0)</TD></TR>"
      "<TR><TD>k3/ns1=7@5: key 3, namespace 1, value 7 last accessed at 5</TD></TR></TABLE>>]; }\n";
  return out + "}\n";
}

nlohmann::json layout_json(const BackendLayout& l, const BackendLayout& p) {
  std::set<Cell> changed;
  for (const Change& c : changes(p, l)) changed.insert(c.cell);
  nlohmann::json cells = nlohmann::json::array();
  for (const BackendMapView& m : l.maps) {
    nlohmann::json entries = nlohmann::json::array();
    for (const BackendEntryView& e : m.entries) {
      entries.push_back({{"key", entry_name(e.key, e.ns)},
                         {"value", value_text_of(l, m.state, e.value)},
                         {"ev", e.entry_version},
                         {"sv", e.state_version}});
    }
    cells.push_back({{"state", m.state},
                     {"key_group", m.key_group},
                     {"map_version", m.map_version},
                     {"H", m.highest_required_version},
                     {"rehashing", m.rehash_capacity != 0},
                     {"retired_entries", m.retired_entries},
                     {"changed", changed.count({m.state, m.key_group}) > 0},
                     {"entries", entries}});
  }
  nlohmann::json checkpoints = nlohmann::json::array();
  for (const CheckpointView& c : l.checkpoints) {
    nlohmann::json held = nlohmann::json::array();
    for (const auto& [st, g] : c.held) held.push_back({st, g});
    nlohmann::json taken = nlohmann::json::array();
    for (const auto& [st, g] : c.taken) taken.push_back({st, g});
    checkpoints.push_back({{"name", c.name},
                           {"id", c.id},
                           {"held", held},
                           {"taken", taken},
                           {"bytes", c.bytes_written},
                           {"finished", c.finished},
                           {"complete", c.complete},
                           {"cancelled", c.cancelled},
                           {"error", c.error},
                           {"storage", c.storage}});
  }
  return {{"key_groups", {l.first_key_group, l.last_key_group}},
          {"states", l.states},
          {"ttl_ms", l.ttl_ms},
          {"now", l.now},
          {"cells", cells},
          {"checkpoints", checkpoints}};
}

}  // namespace

std::string explain_backend_text(const Explanation& e) {
  std::string out = "cowstate explain " + e.file + "\n" + kLegend + "\n" +
                    comment_lines(e.notes.intro, "") + (e.notes.intro.empty() ? "" : "\n");
  walk(e, [&](std::size_t i, const ExplainStep& s, const BackendLayout& p) {
    const StepNotes notes = notes_of(e, i);
    if (notes.above != nullptr) out += comment_lines(*notes.above, "");
    out += heading(s) + (notes.trailing.empty() ? "" : "   # " + notes.trailing) + "\n";
    out += wrap(narrate_step(s, p, s.backend), "  ");
    out += layout_text(s.backend);
    for (const std::string& t : s.trace) {
      if (t.find(" yield ") == std::string::npos) out += "  trace: " + t + "\n";
    }
    if (notes.after != nullptr) out += comment_lines(*notes.after, "  ");
    out += "\n";
  });
  out += comment_lines(e.notes.closing, "");
  const RunResult& r = e.result;
  if (r.outcome == Outcome::pass)
    return out + "outcome: pass (exit 0): every check and expectation held\n";
  return out + "outcome: " + outcome_name(r.outcome) + " (exit " +
         std::to_string(exit_code(r.outcome)) + ")\n  check: " + r.check +
         "\n  what:  " + r.message + "\n";
}

std::vector<std::string> explain_backend_dot(const Explanation& e) {
  std::vector<std::string> out;
  walk(e, [&](std::size_t, const ExplainStep& s, const BackendLayout& p) {
    out.push_back(step_dot(s, p));
  });
  COWSTATE_ASSERT(out.size() == e.steps.size(), "REQUIRES", "one graph per step");
  return out;
}

std::string explain_backend_json(const Explanation& e) {
  nlohmann::json doc = explanation_json_base(e, "backend");
  walk(e, [&](std::size_t i, const ExplainStep& s, const BackendLayout& p) {
    nlohmann::json step = step_json_base(e, i, narrate_step(s, p, s.backend));
    step["backend"] = layout_json(s.backend, p);
    doc["steps"].push_back(std::move(step));
  });
  COWSTATE_ASSERT(doc["steps"].size() == e.steps.size(), "REQUIRES", "one model step per step");
  return doc.dump();
}

}  // namespace cowstate::sim
