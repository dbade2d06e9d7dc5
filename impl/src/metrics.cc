// Rendering BackendMetrics in Prometheus' text exposition format. See cowstate/metrics.h.
#include "cowstate/metrics.h"

#include <cstdio>
#include <string>

namespace cowstate {

const char* tier_name(Tier t) noexcept {
  switch (t) {
    case Tier::heap:
      return "heap";
    case Tier::cold:
      return "cold";
  }
  return "unknown";
}

namespace {

// A label value with backslash, double quote and newline escaped, as the format requires.
std::string escape_label(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (const char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

void family(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

void sample(std::string& out, const char* name, const std::string& labels, const std::string& v) {
  out += name;
  if (!labels.empty()) out += "{" + labels + "}";
  out += ' ';
  out += v;
  out += '\n';
}

// One per-key-group family: a sample for every (state, key group).
template <class F>
void per_key_group(std::string& out, const BackendMetrics& m, const char* name, const char* help,
                   F&& value) {
  family(out, name, "gauge", help);
  for (const KeyGroupMetrics& k : m.key_groups) {
    const std::string labels = "state=\"" + escape_label(k.state) + "\",key_group=\"" +
                               std::to_string(k.key_group) + "\",tier=\"" + tier_name(k.tier) +
                               "\"";
    sample(out, name, labels, value(k));
  }
}

}  // namespace

std::string render_prometheus(const BackendMetrics& m) {
  std::string out;
  auto u = [](std::uint64_t v) { return std::to_string(v); };
  per_key_group(out, m, "cowstate_key_group_entries", "Entries of one state in one key group.",
                [&](const KeyGroupMetrics& k) { return u(k.entries); });
  per_key_group(out, m, "cowstate_key_group_memory_bytes",
                "Bytes one state's key group holds in memory, retired bytes included.",
                [&](const KeyGroupMetrics& k) { return u(k.bytes); });
  per_key_group(out, m, "cowstate_key_group_retired_bytes",
                "Bytes one state's key group holds only for live snapshots.",
                [&](const KeyGroupMetrics& k) { return u(k.retired_bytes); });
  per_key_group(out, m, "cowstate_key_group_request_rate",
                "Decayed accesses of one state's key group per half-life.",
                [&](const KeyGroupMetrics& k) { return number(k.request_rate); });
  const struct {
    const char* name;
    const char* type;
    const char* help;
    std::uint64_t value;
  } totals[] = {
      {"cowstate_entries", "gauge", "Entries over every state and key group.", m.entries},
      {"cowstate_memory_bytes", "gauge", "Bytes the backend's states hold in memory.", m.bytes},
      {"cowstate_retired_bytes", "gauge", "Bytes held only for live snapshots.", m.retired_bytes},
      {"cowstate_memory_budget_bytes", "gauge", "The memory budget (0: none).", m.budget_bytes},
      {"cowstate_spilled_key_groups", "gauge", "(State, key group) pairs in the cold tier.",
       m.spilled_key_groups},
      {"cowstate_cold_entries", "gauge", "Entries in the cold tier.", m.cold_entries},
      {"cowstate_cold_cache_bytes", "gauge", "Bytes of the hot entries of spilled key groups.",
       m.cold_cache_bytes},
      {"cowstate_cold_cache_hits_total", "counter",
       "Accesses of spilled key groups served from memory.", m.cold_cache_hits},
      {"cowstate_cold_cache_misses_total", "counter",
       "Accesses of spilled key groups that went to the cold tier.", m.cold_cache_misses},
      {"cowstate_spills_total", "counter", "Key groups moved to the cold tier.", m.spills},
      {"cowstate_loads_total", "counter", "Key groups moved back to memory.", m.loads},
  };
  for (const auto& t : totals) {
    family(out, t.name, t.type, t.help);
    sample(out, t.name, "", u(t.value));
  }
  return out;
}

}  // namespace cowstate
