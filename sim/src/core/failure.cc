// Outcomes and failure signatures; see failure.h.
#include "cowstate/sim/failure.h"

namespace cowstate::sim {

int exit_code(Outcome outcome) noexcept {
  switch (outcome) {
    case Outcome::pass:
      return 0;
    case Outcome::failure:
      return 1;
    case Outcome::assertion:
      return 3;
    case Outcome::stuck:
      return 4;
    case Outcome::invalid:
      return 2;
  }
  return 3;
}

const char* outcome_name(Outcome outcome) noexcept {
  switch (outcome) {
    case Outcome::pass:
      return "pass";
    case Outcome::failure:
      return "failure";
    case Outcome::assertion:
      return "assertion";
    case Outcome::stuck:
      return "stuck";
    case Outcome::invalid:
      return "invalid";
  }
  return "?";
}

Difference Difference::with_key_renamed(std::uint64_t from, std::uint64_t to) const {
  Difference out;
  out.shape = shape;
  for (const auto& [name, set] : keys) {
    std::set<EntryKey>& renamed = out.keys[name];
    for (const EntryKey& k : set) renamed.insert({k.first == from ? to : k.first, k.second});
  }
  return out;
}

std::string Difference::to_string() const {
  std::string out;
  for (const auto& [name, set] : keys) {
    out += (out.empty() ? "" : "; ") + name + " {";
    bool first = true;
    for (const EntryKey& k : set) {
      out += (first ? "" : ", ") +
             (k.second == 0 ? std::to_string(k.first)
                            : "(" + std::to_string(k.first) + "," + std::to_string(k.second) + ")");
      first = false;
    }
    out += "}";
  }
  if (!shape.empty()) out += (out.empty() ? "" : "; ") + shape;
  return out;
}

Difference image_difference(const ScenarioImage& want, const ScenarioImage& got) {
  Difference d;
  std::set<EntryKey> missing, extra, changed;
  for (const auto& [k, v] : want) {
    auto it = got.find(k);
    if (it == got.end()) {
      missing.insert(k);
    } else if (it->second != v) {
      changed.insert(k);
    }
  }
  for (const auto& [k, v] : got) {
    if (!want.count(k)) extra.insert(k);
  }
  if (!missing.empty()) d.keys["missing"] = std::move(missing);
  if (!extra.empty()) d.keys["extra"] = std::move(extra);
  if (!changed.empty()) d.keys["changed"] = std::move(changed);
  return d;
}

std::string FailureSignature::to_string() const {
  std::string out = std::string(outcome_name(outcome)) + " at ";
  if (expectation.empty()) return out + "check " + check;
  out += "`" + expectation + "`";
  if (!difference.empty()) out += ": " + difference.to_string();
  return out;
}

}  // namespace cowstate::sim
