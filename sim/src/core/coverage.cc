// The copy-on-write coverage report; see cowstate/sim/coverage.h.
#include "cowstate/sim/coverage.h"

#include <cstdio>

#include "cowstate/sim/workload.h"

namespace cowstate::sim {

std::optional<std::size_t> coverage_index(std::string_view name) noexcept {
  for (std::size_t i = 0; i < kCoverageProbeCount; ++i) {
    if (name == kCoverageProbes[i].name) return i;
  }
  return std::nullopt;
}

const char* coverage_kind_name(CoverageKind kind) noexcept {
  switch (kind) {
    case CoverageKind::copy:
      return "copy";
    case CoverageKind::fault:
      return "fault";
    case CoverageKind::yield:
      return "yield";
  }
  return "copy";
}

namespace {

bool reachable(const CoverageProbe& probe, const ScenarioLanguage& language) noexcept {
  switch (probe.needs) {
    case CoverageNeeds::any:
      return true;
    case CoverageNeeds::map_serializer:
      return !language.checkpoints;
    case CoverageNeeds::checkpoints:
      return language.checkpoints;
    case CoverageNeeds::storage_faults:
      return language.storage_faults;
  }
  return true;
}

}  // namespace

CoverageReach coverage_reach(const ScenarioLanguage& language) noexcept {
  CoverageReach out{};
  for (std::size_t i = 0; i < kCoverageProbeCount; ++i)
    out[i] = reachable(kCoverageProbes[i], language);
  return out;
}

std::optional<CoverageReach> CoverageReport::reach_from_json(const nlohmann::json& report,
                                                             std::string* error) {
  if (!report.is_array() || report.size() != kCoverageProbeCount) {
    *error = "expected an array of " + std::to_string(kCoverageProbeCount) + " probes";
    return std::nullopt;
  }
  CoverageReach out{};
  for (std::size_t i = 0; i < kCoverageProbeCount; ++i) {
    const nlohmann::json& p = report[i];
    if (!p.is_object() || p.value("probe", "") != kCoverageProbes[i].name ||
        !p.contains("reachable") || !p["reachable"].is_boolean()) {
      *error = "entry " + std::to_string(i) + " is not probe " + kCoverageProbes[i].name +
               " with a boolean 'reachable'";
      return std::nullopt;
    }
    out[i] = p["reachable"].get<bool>();
  }
  return out;
}

nlohmann::json CoverageCounts::to_json() const {
  nlohmann::json out = nlohmann::json::object();
  for (std::size_t i = 0; i < kCoverageProbeCount; ++i) {
    if (hits[i] != 0) out[kCoverageProbes[i].name] = hits[i];
  }
  return out;
}

std::optional<CoverageCounts> CoverageCounts::from_json(const nlohmann::json& j,
                                                        std::string* error) {
  if (!j.is_object()) {
    *error = "expected an object of hit counts by probe name";
    return std::nullopt;
  }
  CoverageCounts out;
  for (const auto& item : j.items()) {
    const std::optional<std::size_t> i = coverage_index(item.key());
    if (!i) {
      *error = "unknown probe '" + item.key() + "' (not in this build's catalog)";
      return std::nullopt;
    }
    if (!item.value().is_number_unsigned()) {
      *error = "probe '" + item.key() + "' has " + item.value().dump() +
               " hits (expected an unsigned integer)";
      return std::nullopt;
    }
    out.hits[*i] = item.value().get<std::uint64_t>();
  }
  return out;
}

void CoverageReport::add(std::uint64_t index, std::uint64_t seed, const CoverageCounts& counts) {
  totals_ += counts;
  for (std::size_t i = 0; i < kCoverageProbeCount; ++i) {
    if (counts.hits[i] == 0) continue;
    ++runs_[i];
    if (!first_[i] || index < first_[i]->index) first_[i] = First{index, seed};
  }
}

std::size_t CoverageReport::never_hit(const CoverageReach& reach) const noexcept {
  std::size_t n = 0;
  for (std::size_t i = 0; i < kCoverageProbeCount; ++i) {
    if (reach[i] && totals_.hits[i] == 0) ++n;
  }
  return n;
}

nlohmann::json CoverageReport::to_json(const CoverageReach& reach, const char* unit) const {
  nlohmann::json out = nlohmann::json::array();
  for (std::size_t i = 0; i < kCoverageProbeCount; ++i) {
    const CoverageProbe& p = kCoverageProbes[i];
    nlohmann::json j{{"probe", p.name},         {"kind", coverage_kind_name(p.kind)},
                     {"meaning", p.meaning},    {"reachable", reach[i]},
                     {"hits", totals_.hits[i]}, {std::string(unit) + "s", runs_[i]}};
    if (first_[i]) {
      j[std::string("first_") + unit] = first_[i]->index;
      if (std::string_view(unit) == "run") j["first_seed"] = first_[i]->seed;
    }
    out.push_back(std::move(j));
  }
  return out;
}

std::string CoverageReport::to_text(const CoverageReach& reach, const char* unit) const {
  return coverage_text(to_json(reach, unit), unit);
}

std::string coverage_text(const nlohmann::json& report, const char* unit) {
  const std::string units = std::string(unit) + "s";
  const std::string first = std::string("first_") + unit;
  std::string out = "copy-on-write coverage (hits, " + units + " that hit it, the first):\n";
  std::size_t missing = 0;
  char line[320];
  for (const nlohmann::json& p : report) {
    const std::string name = p["probe"].get<std::string>();
    const std::string kind = p["kind"].get<std::string>();
    if (!p["reachable"].get<bool>()) {
      std::snprintf(line, sizeof line, "  %-27s %-5s -  (this workload cannot reach it)\n",
                    name.c_str(), kind.c_str());
    } else if (!p.contains(first)) {
      ++missing;
      std::snprintf(line, sizeof line, "  %-27s %-5s NEVER HIT  (%s)\n", name.c_str(), kind.c_str(),
                    p["meaning"].get<std::string>().c_str());
    } else {
      const std::string seed =
          p.contains("first_seed") ? " (seed " + p["first_seed"].dump() + ")" : "";
      std::snprintf(line, sizeof line, "  %-27s %-5s %10llu hits %7llu %-8s first %s %llu%s\n",
                    name.c_str(), kind.c_str(), p["hits"].get<unsigned long long>(),
                    p[units].get<unsigned long long>(), units.c_str(), unit,
                    p[first].get<unsigned long long>(), seed.c_str());
    }
    out += line;
  }
  out += missing == 0 ? "  every reachable reason hit\n"
                      : "  " + std::to_string(missing) + " reachable reason" +
                            (missing == 1 ? "" : "s") + " never hit\n";
  return out;
}

}  // namespace cowstate::sim
