// The probe workload: a workload that only the probe test binary has, to show that a
// workload is one folder and one registration (cowstate/sim/workload.h), with nothing in
// sim/ knowing it.
//
// One CowStateMap and no snapshots. The writer puts, removes and reads keys (a scenario's
// writer lines may also say put_and_get_old, remove_and_get_old and contains; the map
// workload's other actions are invalid here); after every step the live map must equal
// the VersionedMap model, and every `deep_check_every` steps check_invariants() must hold.
// A reader reads keys between the writer's operations, never inside one: the live map is
// single-threaded by contract, only snapshots are read while the writer works. A read
// changes nothing, so a recorded run leaves it out, as an idle releaser's steps are left
// out; the reader runs in generated runs and free schedules (as many reads as the writer
// has lines), not in fixed ones, where only the lines written run.
//
// Checks: result (an operation's result equals the model's), read (a reader's get equals
// the model's), live (the live map equals the model), I* (check_invariants()).
//
// Scenarios say `config workload=probe` and are written in the map workload's language (the
// parser reads the lines of every workload but the backend's as the map's); `capacity=`,
// `min_capacity=` and `max_capacity=` size the map.
//
// probe_workload(true) is the same workload with a planted bug, named `probe_skip_remove`:
// the writer's remove reaches the model but not the map.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "cowstate/sim/workload.h"

namespace cowstate::sim::probe {

struct ProbeOptions {
  std::uint32_t ops_max = 40;  // writer operations per run
  std::uint32_t reads = 10;    // reader gets per run; 0: no reader
  std::uint32_t keys = 4;      // key space [0, keys), namespace 0
  std::uint32_t put_percent = 50;
  std::uint32_t remove_percent = 25;  // the rest are gets
  std::uint32_t initial_capacity = 4;
  std::uint32_t deep_check_every = 1;  // check_invariants(); 0 = never

  // A per-seed mix; ops_max and deep_check_every as given.
  static ProbeOptions swarm(std::uint64_t seed, std::uint32_t ops_max,
                            std::uint32_t deep_check_every);
  std::string to_string() const;
  // Parses what to_string() prints.
  static std::optional<ProbeOptions> parse(std::string_view line, std::string* error);
  bool operator==(const ProbeOptions&) const = default;
};

// `probe`, or with the planted bug `probe_skip_remove`.
const Workload& probe_workload(bool skip_remove);

}  // namespace cowstate::sim::probe
