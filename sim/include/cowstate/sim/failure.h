// What a failure is, apart from where and how it was found: outcomes, exit codes and the
// failure signature.
//
// Two runs fail "the same way" when their signatures are equal: the same outcome, the same
// check (an invariant id from docs/invariants.md, a checker name, or `expect`), and for a
// failed expectation the same expectation and the same kind of difference:
//   image     the same keys missing, extra and changed against the expected image, and
//             whether the model or production code disagreed
//   copied    the same entries and states missing and extra
//   versions, retired   which numbers were higher or lower than expected
//   latest    whether the newest complete checkpoint was none, older or newer
//   failure   `expect failure CHECK` and the run passed
// The shrinker keeps a smaller candidate only when its signature equals the original's
// (with the keys it renamed renamed alike), so a shrunk file fails the same way as the
// run it came from; campaigns and merges count distinct failures by signature.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "cowstate/sim/scenario.h"

namespace cowstate::sim {

// invalid: a scenario that cannot run as written (a step of a finished task, a pause point
// never reached); it is bad input, not a bug in the map.
enum class Outcome : std::uint8_t { pass, failure, assertion, stuck, invalid };
// 0 pass, 1 correctness failure, 2 invalid scenario, 3 assertion or crash caught, 4 stuck.
int exit_code(Outcome outcome) noexcept;
const char* outcome_name(Outcome outcome) noexcept;

// How what production code (or the model) showed differs from an expectation.
struct Difference {
  // Named sets of keys: "missing", "extra", "changed" for images; "entries missing",
  // "entries extra", "states missing", "states extra" for `expect copied`.
  std::map<std::string, std::set<EntryKey>> keys;
  // What is not a key: who disagreed ("by the model", "in production"), the direction of a
  // number ("map higher", "h lower"), the relation of a checkpoint ("latest older").
  std::string shape;

  // A difference that is only a shape.
  static Difference of(std::string shape) {
    Difference d;
    d.shape = std::move(shape);
    return d;
  }
  bool empty() const { return keys.empty() && shape.empty(); }
  // The same difference with key `from` called `to` (the shrinker's key renames).
  Difference with_key_renamed(std::uint64_t from, std::uint64_t to) const;
  std::string to_string() const;  // "changed {5}; by the model"
  bool operator==(const Difference&) const = default;
};

// The keys of `want` missing from `got`, the keys of `got` not in `want`, and the keys in
// both with other values (empty sets are left out).
Difference image_difference(const ScenarioImage& want, const ScenarioImage& got);

struct FailureSignature {
  Outcome outcome = Outcome::pass;
  std::string check;        // the invariant id or checker name
  std::string expectation;  // check `expect`: the expectation as written
  Difference difference;    // check `expect`: how it was not met

  // One line: "failure at check I10", "failure at expect `expect s1 = {1:10}`: changed {1}".
  std::string to_string() const;
  bool operator==(const FailureSignature&) const = default;
};

}  // namespace cowstate::sim
