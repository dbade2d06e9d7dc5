// A merged campaign summary; see merge_summary.h.
#include "cli/merge_summary.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "cli/campaign_id.h"
#include "core/failure_pipeline.h"
#include "cowstate/sim/campaign.h"

namespace cowstate::cli {

namespace {

using Problems = std::vector<std::string>;

struct Sums {
  sim::RunStats stats;
  std::uint64_t failures = 0, schedules = 0, pruned = 0;
};

Sums add_up(const std::vector<UnitRecord>& units) {
  Sums sum;
  for (const UnitRecord& u : units) {
    sum.stats += u.stats;
    sum.failures += u.failure ? 1 : u.failures;
    sum.schedules += u.schedules;
    sum.pruned += u.pruned;
  }
  return sum;
}

// Failures by signature in the order first met: the first one's fields, and how many
// runs or schedules (`unit`) met each.
class DistinctFailures {
 public:
  explicit DistinctFailures(const char* unit) : unit_(unit) {}

  // `first` holds what only the first failure of a signature says (its run or subtree).
  void add(const FailureRecord& f, const nlohmann::json& first) {
    auto [it, fresh] = by_signature_.emplace(f.signature, distinct_.size());
    if (!fresh) {
      nlohmann::json& d = distinct_[it->second];
      d[unit_] = d[unit_].get<std::uint64_t>() + 1;
      return;
    }
    nlohmann::json d{
        {"signature", f.signature},     {"outcome", f.outcome}, {"check", f.check}, {unit_, 1},
        {"shrunk_file", f.shrunk_file}, {"replay", f.replay}};
    d.update(first);
    distinct_.push_back(std::move(d));
  }
  const nlohmann::json& json() const { return distinct_; }

 private:
  const char* unit_;
  nlohmann::json distinct_ = nlohmann::json::array();
  std::map<std::string, std::size_t> by_signature_;  // -> its place in distinct_
};

// A fuzz shard's stop reason is one its campaign allows, and one that ran all its runs
// holds them all.
void check_stop(const Shard& s, const std::string& at, std::uint64_t failures, Problems* p) {
  const ShardSummary& m = *s.summary;
  const std::uint64_t runs = s.parameter("runs");
  const bool timed = s.campaign.contains("time_s") && s.campaign["time_s"].is_number() &&
                     s.campaign["time_s"].get<double>() > 0;
  const std::uint64_t max_failures = s.parameter("max_failures");
  if (m.stopped_by == "runs") {
    if (runs == 0) {
      p->push_back(at + " says it ran all its runs, but the campaign has no run count");
    } else if (s.units.size() != s.owned(runs)) {
      p->push_back(at + " says it ran all its runs, but it holds " +
                   std::to_string(s.units.size()) + " of its " + std::to_string(s.owned(runs)));
    }
  } else if (m.stopped_by == "time") {
    if (!timed) p->push_back(at + " says its time budget stopped it, but the campaign has none");
  } else if (m.stopped_by == "max_failures") {
    if (max_failures == 0 || failures < max_failures) {
      p->push_back(at + " says its failure limit stopped it, after " + std::to_string(failures) +
                   " failures (the limit: " + std::to_string(max_failures) + ", 0: none)");
    }
  } else {
    p->push_back(at + " says it was stopped by '" + m.stopped_by +
                 "' (expected runs, time or max_failures)");
  }
}

// An explore shard's failure lines belong to its subtrees, as many as each counts.
void check_explored(const Shard& s, Problems* p) {
  std::map<std::uint64_t, std::uint64_t> listed;  // subtree -> failure lines
  for (const ExploredRecord& e : s.explored) ++listed[e.subtree];
  for (const UnitRecord& u : s.units) {
    const std::uint64_t n = listed.count(u.index) != 0 ? listed[u.index] : 0;
    if (n != u.failures) {
      p->push_back(u.where.text() + ": subtree " + std::to_string(u.index) + " counts " +
                   std::to_string(u.failures) + " failures; the shard has " + std::to_string(n) +
                   " failure lines of it");
    }
    listed.erase(u.index);
  }
  for (const auto& [subtree, n] : listed) {
    p->push_back(s.header.text() + ": " + s.name() + " has " + std::to_string(n) +
                 " failure lines of subtree " + std::to_string(subtree) +
                 ", which has no subtree line in this shard");
  }
}

}  // namespace

void check_summary(const Shard& s, std::uint64_t subtrees_total, Problems* p) {
  if (!s.summary) return;  // the reader said so
  const ShardSummary& m = *s.summary;
  const std::string at = m.where.text() + ": the summary of " + s.name();
  const Sums sum = add_up(s.units);
  auto same = [&](const char* what, std::uint64_t said, std::uint64_t counted) {
    if (said == counted) return;
    p->push_back(at + " says " + what + " " + std::to_string(said) + "; its records add up to " +
                 std::to_string(counted));
  };
  same(s.command == "explore" ? "subtrees" : "runs", m.units, s.units.size());
  for (std::size_t i = 0; i < sim::kCoverageProbeCount; ++i) {
    const std::string what = std::string("probe ") + sim::kCoverageProbes[i].name + " hits";
    same(what.c_str(), m.stats.coverage.hits[i], sum.stats.coverage.hits[i]);
  }
  same("failures", m.failures, sum.failures);
  same("steps", m.stats.steps, sum.stats.steps);
  if (s.command == "explore") {
    same("schedules", m.schedules, sum.schedules);
    same("pruned", m.pruned, sum.pruned);
    if (m.complete && m.subtrees_total != subtrees_total) {
      p->push_back(at + " counts " + std::to_string(m.subtrees_total) +
                   " subtrees in the exploration; another shard counts " +
                   std::to_string(subtrees_total));
    } else if (m.complete && s.units.size() != s.owned(subtrees_total)) {
      p->push_back(at + " says it explored all its subtrees, but it holds " +
                   std::to_string(s.units.size()) + " of its " +
                   std::to_string(s.owned(subtrees_total)));
    }
    check_explored(s, p);
    return;
  }
  same("ops", m.stats.ops, sum.stats.ops);
  same("snapshots", m.stats.snapshots, sum.stats.snapshots);
  same("snapshots_checked", m.stats.snapshots_checked, sum.stats.snapshots_checked);
  same("entries_checked", m.stats.entries_checked, sum.stats.entries_checked);
  same("deep_checks", m.stats.deep_checks, sum.stats.deep_checks);
  same("yields", m.stats.yields, sum.stats.yields);
  check_stop(s, at, sum.failures, p);
}

namespace {

// The shards in index order, with their timings; the seconds of all of them and the longest.
nlohmann::json shards_json(const std::vector<Shard>& shards, double* total, double* longest) {
  std::vector<const Shard*> order;
  for (const Shard& s : shards) order.push_back(&s);
  std::sort(order.begin(), order.end(),
            [](const Shard* a, const Shard* b) { return a->index < b->index; });
  nlohmann::json out = nlohmann::json::array();
  *total = 0;
  *longest = 0;
  for (const Shard* s : order) {
    const ShardSummary& m = *s->summary;
    *total += m.seconds;
    *longest = std::max(*longest, m.seconds);
    nlohmann::json j{{"index", s->index},      {"file", s->header.file},
                     {"line", s->header.line}, {s->unit() + std::string("s"), m.units},
                     {"failures", m.failures}, {"seconds", m.seconds}};
    if (s->command == "fuzz") {
      j["stopped_by"] = m.stopped_by;
    } else {
      j["schedules"] = m.schedules;
      j["pruned"] = m.pruned;
      j["complete"] = m.complete;
    }
    out.push_back(j);
  }
  return out;
}

// Every run in index order: totals, the digest of (index, outcome, trace hash), and the
// distinct failures, each from the first run of its signature (the unsharded campaign's).
// What any shard's workload can reach (every shard of one campaign says the same).
sim::CoverageReach reach_of(const std::vector<Shard>& shards) {
  sim::CoverageReach reach{};
  for (const Shard& s : shards) {
    for (std::size_t i = 0; i < reach.size(); ++i) reach[i] = reach[i] || s.summary->reach[i];
  }
  return reach;
}

void add_fuzz(const std::vector<Shard>& shards, nlohmann::json* out) {
  std::vector<const UnitRecord*> runs;
  for (const Shard& s : shards) {
    for (const UnitRecord& u : s.units) runs.push_back(&u);
  }
  std::sort(runs.begin(), runs.end(),
            [](const UnitRecord* a, const UnitRecord* b) { return a->index < b->index; });
  sim::RunStats totals;
  std::uint64_t failures = 0, digest = fnv1a("");
  DistinctFailures distinct("runs");
  sim::CoverageReport coverage;
  for (const UnitRecord* u : runs) {
    totals += u->stats;
    coverage.add(u->index, u->seed, u->stats.coverage);
    digest = fnv1a(std::to_string(u->index) + " " + u->outcome + " " +
                       sim::trace_hash_text(u->trace_hash) + "\n",
                   digest);
    if (!u->failure) continue;
    ++failures;
    distinct.add(
        *u->failure,
        {{"first_run", u->index}, {"first_seed", u->seed}, {"case_file", u->failure->case_file}});
  }
  const std::uint64_t expected = shards.front().parameter("runs");
  (*out)["runs"] = runs.size();
  (*out)["runs_expected"] = expected;
  (*out)["complete"] = expected != 0 && runs.size() == expected;
  (*out)["failures"] = failures;
  (*out)["distinct_failures"] = distinct.json();
  out->update(stats_json(totals));
  (*out)["trace_digest"] = sim::trace_hash_text(digest);
  (*out)["coverage"] = coverage.to_json(reach_of(shards), "run");
}

// Every subtree's counts, and the distinct failures, each from the first failing schedule
// of its signature in (subtree, rank) order: the unsharded exploration's order.
void add_explore(const std::vector<Shard>& shards, nlohmann::json* out) {
  std::uint64_t subtrees = 0, schedules = 0, pruned = 0, steps = 0, failures = 0;
  bool complete = true;
  std::vector<const ExploredRecord*> found;
  sim::CoverageReport coverage;
  for (const Shard& s : shards) {
    complete = complete && s.summary->complete;
    for (const UnitRecord& u : s.units) {
      coverage.add(u.index, 0, u.stats.coverage);
      ++subtrees;
      schedules += u.schedules;
      pruned += u.pruned;
      steps += u.stats.steps;
      failures += u.failures;
    }
    for (const ExploredRecord& e : s.explored) found.push_back(&e);
  }
  std::sort(found.begin(), found.end(), [](const ExploredRecord* a, const ExploredRecord* b) {
    return a->subtree != b->subtree ? a->subtree < b->subtree : a->ordinal < b->ordinal;
  });
  DistinctFailures distinct("schedules");
  for (const ExploredRecord* e : found) {
    distinct.add(e->failure, {{"first_subtree", e->subtree}, {"message", e->failure.message}});
  }
  std::uint64_t total = 0;  // every finished shard counts the same; others a lower bound
  for (const Shard& s : shards) total = std::max(total, s.summary->subtrees_total);
  (*out)["subtrees"] = subtrees;
  (*out)["subtrees_total"] = total;
  (*out)["complete"] = complete && subtrees == total;
  (*out)["schedules"] = schedules;
  (*out)["pruned"] = pruned;
  (*out)["steps"] = steps;
  (*out)["failures"] = failures;
  (*out)["distinct_failures"] = distinct.json();
  (*out)["coverage"] = coverage.to_json(reach_of(shards), "subtree");
}

}  // namespace

nlohmann::json merge_summary(const std::vector<Shard>& shards) {
  const Shard& first = shards.front();
  double seconds = 0, longest = 0;
  nlohmann::json out{{"type", "merge"},
                     {"consistent", true},
                     {"command", first.command},
                     {"version", first.version},
                     {"campaign_id", first.campaign_id},
                     {"campaign", first.campaign},
                     {"shards", shards_json(shards, &seconds, &longest)}};
  if (first.command == "fuzz") {
    add_fuzz(shards, &out);
  } else {
    add_explore(shards, &out);
  }
  out["seconds"] = seconds;
  out["seconds_longest_shard"] = longest;
  return out;
}

namespace {

std::uint64_t u64(const nlohmann::json& j, const char* key) { return j[key].get<std::uint64_t>(); }

// "seed 1, runs 40, strategy random, ...": the campaign object as a person reads it.
std::string campaign_text(const nlohmann::json& campaign) {
  std::string out;
  for (const auto& item : campaign.items()) {
    const nlohmann::json& v = item.value();
    out += (out.empty() ? "" : ", ") + item.key() + " " +
           (v.is_string() ? v.get<std::string>() : v.dump());
  }
  return out;
}

const char* stop_text(const std::string& reason) {
  if (reason == "time") return "its time budget spent";
  if (reason == "max_failures") return "its failure limit reached";
  return "all its runs done";
}

void print_shards(const nlohmann::json& m) {
  const bool fuzz = m["command"] == "fuzz";
  const std::size_t count = m["shards"].size();
  for (const nlohmann::json& s : m["shards"]) {
    std::printf("  shard %llu/%zu: ", static_cast<unsigned long long>(u64(s, "index")), count);
    if (fuzz) {
      std::printf("%llu runs, %llu failures, %.2f s, %s",
                  static_cast<unsigned long long>(u64(s, "runs")),
                  static_cast<unsigned long long>(u64(s, "failures")), s["seconds"].get<double>(),
                  stop_text(s["stopped_by"].get<std::string>()));
    } else {
      std::printf("%llu subtrees, %llu schedules, %llu pruned, %llu failures, %.2f s%s",
                  static_cast<unsigned long long>(u64(s, "subtrees")),
                  static_cast<unsigned long long>(u64(s, "schedules")),
                  static_cast<unsigned long long>(u64(s, "pruned")),
                  static_cast<unsigned long long>(u64(s, "failures")), s["seconds"].get<double>(),
                  s["complete"].get<bool>() ? "" : ", stopped at --max-schedules");
    }
    std::printf(" (%s:%llu)\n", s["file"].get<std::string>().c_str(),
                static_cast<unsigned long long>(u64(s, "line")));
  }
}

void print_fuzz(const nlohmann::json& m) {
  const std::uint64_t runs = u64(m, "runs"), expected = u64(m, "runs_expected");
  if (m["complete"].get<bool>()) {
    std::printf("coverage: runs 0..%llu, each once (%llu of %llu)\n",
                static_cast<unsigned long long>(runs - 1), static_cast<unsigned long long>(runs),
                static_cast<unsigned long long>(expected));
  } else if (expected != 0) {
    std::printf(
        "coverage: %llu of the campaign's %llu runs, each once; shards stopped before "
        "their last run by their time budget or failure limit ran the first of theirs\n",
        static_cast<unsigned long long>(runs), static_cast<unsigned long long>(expected));
  } else {
    std::printf(
        "coverage: %llu runs, each once (a campaign bounded by time: each shard ran its "
        "first runs until its time was spent)\n",
        static_cast<unsigned long long>(runs));
  }
  std::printf(
      "runs %llu, steps %llu, ops %llu, snapshots %llu started / %llu checked, entries "
      "checked %llu, deep checks %llu; %.2f s in all shards, the longest %.2f s\n",
      static_cast<unsigned long long>(runs), static_cast<unsigned long long>(u64(m, "steps")),
      static_cast<unsigned long long>(u64(m, "ops")),
      static_cast<unsigned long long>(u64(m, "snapshots")),
      static_cast<unsigned long long>(u64(m, "snapshots_checked")),
      static_cast<unsigned long long>(u64(m, "entries_checked")),
      static_cast<unsigned long long>(u64(m, "deep_checks")), m["seconds"].get<double>(),
      m["seconds_longest_shard"].get<double>());
  std::printf("trace digest %s (every run's index, outcome and trace hash, in index order)\n",
              m["trace_digest"].get<std::string>().c_str());
}

void print_explore(const nlohmann::json& m) {
  const std::uint64_t subtrees = u64(m, "subtrees"), total = u64(m, "subtrees_total");
  std::printf("coverage: %llu of %llu subtrees, each once; %s\n",
              static_cast<unsigned long long>(subtrees), static_cast<unsigned long long>(total),
              m["complete"].get<bool>() ? "space exhausted" : "stopped at --max-schedules");
  std::printf(
      "schedules explored %llu, pruned as equivalent %llu, steps %llu, failures %llu; "
      "%.2f s in all shards, the longest %.2f s\n",
      static_cast<unsigned long long>(u64(m, "schedules")),
      static_cast<unsigned long long>(u64(m, "pruned")),
      static_cast<unsigned long long>(u64(m, "steps")),
      static_cast<unsigned long long>(u64(m, "failures")), m["seconds"].get<double>(),
      m["seconds_longest_shard"].get<double>());
}

void print_failures(const nlohmann::json& m) {
  const nlohmann::json& distinct = m["distinct_failures"];
  if (distinct.empty()) return;
  const bool fuzz = m["command"] == "fuzz";
  std::printf("\nfailures: %llu %s failed, %zu distinct\n",
              static_cast<unsigned long long>(u64(m, "failures")), fuzz ? "runs" : "schedules",
              distinct.size());
  for (const nlohmann::json& d : distinct) {
    const std::uint64_t n = u64(d, fuzz ? "runs" : "schedules");
    std::printf("  %s: %llu %s%s, ", d["signature"].get<std::string>().c_str(),
                static_cast<unsigned long long>(n), fuzz ? "run" : "schedule", n == 1 ? "" : "s");
    if (fuzz) {
      std::printf("first run %llu (seed %llu)\n",
                  static_cast<unsigned long long>(u64(d, "first_run")),
                  static_cast<unsigned long long>(u64(d, "first_seed")));
    } else {
      std::printf("first in subtree %llu\n    what:   %s\n",
                  static_cast<unsigned long long>(u64(d, "first_subtree")),
                  d["message"].get<std::string>().c_str());
    }
    for (const char* key : {"case_file", "shrunk_file", "replay"}) {
      if (!d.contains(key) || d[key].get<std::string>().empty()) continue;
      const char* label = key[0] == 'c' ? "case:  " : key[0] == 's' ? "shrunk:" : "replay:";
      std::printf("    %s %s\n", label, d[key].get<std::string>().c_str());
    }
  }
}

}  // namespace

void print_merge_summary(const nlohmann::json& m) {
  std::printf("cowstate merge: %zu shards of %s campaign %s, cowstate %s\n", m["shards"].size(),
              m["command"].get<std::string>().c_str(), m["campaign_id"].get<std::string>().c_str(),
              m["version"].get<std::string>().c_str());
  std::printf("  campaign: %s\n", campaign_text(m["campaign"]).c_str());
  print_shards(m);
  if (m["command"] == "fuzz") {
    print_fuzz(m);
  } else {
    print_explore(m);
  }
  std::printf(
      "\n%s",
      sim::coverage_text(m["coverage"], m["command"] == "fuzz" ? "run" : "subtree").c_str());
  print_failures(m);
  std::printf("%s\n", u64(m, "failures") == 0 ? "PASS" : "FAIL");
}

}  // namespace cowstate::cli
