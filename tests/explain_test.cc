// Tests of `cowstate explain`: the narrated text, the DOT graphs and the explain model say
// what the map and the backend did, beside the scenario's own comments.
#include "cowstate/sim/explain.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cowstate/sim/scenario.h"
#include "cowstate/sim/workload.h"
#include "source_scenario.h"

using namespace cowstate::sim;

namespace {

Scenario load(const std::string& relative) { return load_source_scenario(relative); }

// The text of the step whose heading contains `heading`, up to the next step.
std::string section(const std::string& text, const std::string& heading) {
  const std::size_t at = text.find(heading);
  if (at == std::string::npos) return "";
  const std::size_t end = text.find("\nstep ", at + 1);
  return text.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

// `text` with its indented lines joined, so a wrapped paragraph reads as one line.
std::string flat(std::string text) {
  for (std::size_t at; (at = text.find("\n  ")) != std::string::npos;) text.replace(at, 3, " ");
  return text;
}

const std::string kChainPrefix = "scenarios/smoke/chain-prefix-copy.scenario";

}  // namespace

TEST_CASE("explain shows the chain-prefix copy the put after a snapshot makes, and why",
          "[sim][explain]") {
  const Explanation e = explain_scenario(load(kChainPrefix));
  REQUIRE(e.result.outcome == Outcome::pass);
  const std::string text = explain_text(e);
  CHECK(text.find("Legend") < text.find("step 1 "));

  const std::string snap = section(text, "— writer: snapshot s1 (");
  REQUIRE(!snap.empty());
  CHECK_THAT(snap, Catch::Contains("map=1 H=1"));
  CHECK_THAT(snap, Catch::Contains("b1: [k5 =50 slot2 ev=0 sv=0 | seen by {s1}] -> [k1 =10 slot1 "
                                   "ev=0 sv=0 | {s1}]"));
  CHECK_THAT(snap,
             Catch::Contains("nothing copied: a snapshot start copies only the directories"));

  const std::string put = section(text, "— writer: put k=1 v=11 (");
  REQUIRE(!put.empty());
  CHECK_THAT(put, Catch::Contains("map=1 H=1"));
  CHECK_THAT(put, Catch::Contains(
                      "k1: copied because entry_version 0 < H=1 (snapshot s1 may see it): slot 1"));
  CHECK_THAT(put, Catch::Contains(
                      "k5: copied because entry_version 0 < H=1 (snapshot s1 may see it): slot 2"));
  CHECK_THAT(put, Catch::Contains("k1: state copied because state_version 0 < H=1"));
  CHECK_THAT(put, Catch::Contains("chain-prefix copy"));
  // The live chain holds the copies; the snapshot still sees the old slots.
  CHECK_THAT(put, Catch::Contains("b1: [*k5 =50 slot3 ev=1 sv=0] -> [*k1 =11 slot4 ev=1 sv=1]"));
  CHECK_THAT(put, Catch::Contains("only snapshots reach:"));
  CHECK_THAT(put, Catch::Contains("[k1 =10 slot1 ev=0 sv=0 | seen by {s1}]"));
  CHECK_THAT(put, Catch::Contains("[k5 =50 slot2 ev=0 sv=0 | seen by {s1}]"));
  CHECK_THAT(put, Catch::Contains("sees h1: [k5 =50 slot2] -> [k1 =10 slot1]"));
  CHECK_THAT(put, Catch::Contains("retired: 2 entries, 1 state"));

  CHECK_THAT(text, Catch::Contains("outcome: pass (exit 0)"));
}

TEST_CASE("explain says nothing was copied when no snapshot is live, and when memory is freed",
          "[sim][explain]") {
  const std::string text = explain_text(explain_scenario(load(kChainPrefix)));
  const std::string first = section(text, "step 1 — writer: put k=1 v=10 (");
  REQUIRE(!first.empty());
  CHECK_THAT(first, Catch::Contains("nothing copied: no live snapshot can see any entry (H=0)"));
  CHECK_THAT(first, Catch::Contains("b1: [+k1 =10 slot1 ev=0 sv=0]"));
  // The serializer's last step releases s1; the writer's next operation frees its memory.
  const std::string last = section(text, "— s1: step 1 (line 11)");
  CHECK_THAT(last, Catch::Contains("H goes from 1 to 0"));
  const std::string cont = section(text, "— writer: continue (line 10)");
  CHECK_THAT(cont, Catch::Contains("Freed 2 retired entries and 1 state"));
  CHECK_THAT(cont, Catch::Contains("retired: 0 entries, 0 states"));
}

TEST_CASE("explain folds yield points a fixed schedule passes through into their step",
          "[sim][explain]") {
  const Explanation e = explain_scenario(load(kChainPrefix));
  // Eight step lines: two puts, the snapshot, the put, s1's steps, the paused put, continue.
  REQUIRE(e.steps.size() == 8);
  for (std::size_t i = 0; i < e.steps.size(); ++i) CHECK(e.steps[i].step == i + 1);
  CHECK(e.steps[0].action == "put k=1 v=10");
  CHECK(e.steps[0].paused_at.empty());
  CHECK(e.steps[5].paused_at == "map.insert_new");  // the pause the line asked for
  CHECK(e.steps[7].action == "continue");
  CHECK(e.steps[3].copied_entries == std::set<EntryKey>{{1, 0}, {5, 0}});
}

TEST_CASE("explain narrates the copies of a rehash under a snapshot as rehash moves",
          "[sim][explain]") {
  const std::string text =
      explain_text(explain_scenario(load("scenarios/tours/snapshot-during-rehash.scenario")));
  CHECK_THAT(text, Catch::Contains("rehash target (8 buckets), rehash index 1"));
  CHECK_THAT(text, Catch::Contains("the incremental rehash moved them to the new table"));
  CHECK_THAT(text, Catch::Contains("outcome: pass (exit 0)"));
}

TEST_CASE("explain's dot output is one well-formed graph per step", "[sim][explain][dot]") {
  const Explanation e = explain_scenario(load(kChainPrefix));
  const std::vector<std::string> graphs = explain_dot(e);
  REQUIRE(graphs.size() == e.steps.size());
  const std::regex node_decl(R"(^  ([A-Za-z_][A-Za-z0-9_]*) \[)");
  const std::regex edge(R"(^  ([A-Za-z_][A-Za-z0-9_]*)(:[a-z0-9]+)? -> ([A-Za-z_][A-Za-z0-9_]*))");
  for (std::size_t i = 0; i < graphs.size(); ++i) {
    const std::string& g = graphs[i];
    INFO("graph " << i + 1 << ":\n" << g);
    char name[64];
    std::snprintf(name, sizeof name, "digraph step_%03zu {", i + 1);
    CHECK(g.rfind(name, 0) == 0);
    // Braces and quotes balance (outside quoted labels, braces are only the graph's).
    int depth = 0;
    bool quoted = false;
    for (std::size_t k = 0; k < g.size(); ++k) {
      if (g[k] == '\\') {
        ++k;
        continue;
      }
      if (g[k] == '"') quoted = !quoted;
      if (quoted) continue;
      if (g[k] == '{') ++depth;
      if (g[k] == '}') --depth;
      REQUIRE(depth >= 0);
    }
    CHECK(depth == 0);
    CHECK_FALSE(quoted);
    // Every edge endpoint is a declared node.
    std::set<std::string> nodes, endpoints;
    std::istringstream lines(g);
    std::string line;
    std::size_t edges = 0;
    while (std::getline(lines, line)) {
      std::smatch m;
      if (std::regex_search(line, m, edge)) {
        endpoints.insert(m[1]);
        endpoints.insert(m[3]);
        ++edges;
      } else if (std::regex_search(line, m, node_decl) && m[1] != "graph" && m[1] != "node" &&
                 m[1] != "edge") {
        nodes.insert(m[1]);
      }
    }
    CHECK(nodes.count("primary") == 1);
    CHECK(edges > 0);
    for (const std::string& p : endpoints) {
      INFO("endpoint " << p);
      CHECK(nodes.count(p) == 1);
    }
  }
  // The put after the snapshot: copies highlighted, the originals grey, s1's heads reach them.
  const std::string& put = graphs[3];
  CHECK_THAT(put, Catch::Contains("e3 [shape=box, label=\"k5\\nslot 3  ev=1\", style=filled, "
                                  "fillcolor=\"gold\""));
  CHECK_THAT(put, Catch::Contains("e2 [shape=box, label=\"k5\\nslot 2  ev=0\\nseen by {s1}\", "
                                  "style=\"filled,dashed\", fillcolor=\"grey90\""));
  // States are nodes of their own: k5's copy shares its state with the original (two
  // arrows into one state), k1's state was copied (one arrow each into two states).
  const auto state_of = [&put](int slot) {
    std::smatch m;
    const std::regex edge_to_state("\n  e" + std::to_string(slot) + " -> (st[0-9]+) ");
    return std::regex_search(put, m, edge_to_state) ? m[1].str() : std::string("none");
  };
  CHECK(state_of(3) != "none");
  CHECK(state_of(3) == state_of(2));
  CHECK(state_of(4) != state_of(1));
  // Every picture has its legend.
  for (const std::string& g : graphs) CHECK_THAT(g, Catch::Contains("subgraph cluster_legend"));
  CHECK_THAT(put, Catch::Contains("e2 -> e1 [label=\"next\""));
  CHECK_THAT(put, Catch::Contains("snapshot0:h1 -> e2"));
  CHECK_THAT(put, Catch::Contains("primary:b1 -> e3;"));
}

TEST_CASE("explain reports a failing run's check and message at the end", "[sim][explain]") {
  ParseError error;
  auto s = parse_scenario(
      "config capacity=4 hash=identity\n"
      "writer: put k=1 v=10\n"
      "writer: snapshot s1\n"
      "expect versions map=1 h=7\n",
      "bad-versions.scenario", &error);
  REQUIRE(s);
  const Explanation e = explain_scenario(*s);
  CHECK(e.result.outcome == Outcome::failure);
  const std::string text = explain_text(e);
  CHECK_THAT(text, Catch::Contains("outcome: failure (exit 1)"));
  CHECK_THAT(text, Catch::Contains("check: expect"));
  CHECK_THAT(text, Catch::Contains("bad-versions.scenario:4"));
}

TEST_CASE("a scenario's comments are placed above, beside and after the steps they describe",
          "[sim][explain][notes]") {
  const ScenarioNotes n = scenario_notes(
      "# Tour: the intro.\n"
      "#\n"
      "# More intro.\n"
      "config capacity=4\n"
      "\n"
      "# Above the first put.\n"
      "writer: put k=1 v=10   # beside it\n"
      "#   after the first put\n"
      "\n"
      "# Above the snapshot,\n"
      "\n"
      "# in two paragraphs.\n"
      "writer: snapshot s1\n"
      "expect versions map=1 h=1   # checked after it\n"
      "# below the expectation\n");
  CHECK(n.intro == std::vector<std::string>{"Tour: the intro.", "", "More intro."});
  REQUIRE(n.lines.count(7) == 1);
  CHECK(n.lines.at(7).above == std::vector<std::string>{"Above the first put."});
  CHECK(n.lines.at(7).trailing == "beside it");
  CHECK(n.lines.at(7).after == std::vector<std::string>{"  after the first put"});
  REQUIRE(n.lines.count(13) == 1);
  CHECK(n.lines.at(13).above ==
        std::vector<std::string>{"Above the snapshot,", "", "in two paragraphs."});
  CHECK(n.lines.at(13).after ==
        std::vector<std::string>{"expect versions map=1 h=1", "below the expectation"});
  CHECK(n.closing.empty());
}

TEST_CASE("explain narrates every tour, map and backend, with the tour's own comments",
          "[sim][explain][tours]") {
  std::size_t tours = 0, backend = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(COWSTATE_SOURCE_DIR) + "/scenarios/tours")) {
    const std::string relative = "scenarios/tours/" + entry.path().filename().string();
    INFO(relative);
    const Scenario s = load(relative);
    Workload::Narration n;
    std::string why_not;
    REQUIRE(workload_of(s).narrate(s, true, &n, &why_not));
    CHECK(n.outcome == Outcome::pass);
    CHECK_THAT(n.text, Catch::Contains("step 1 — "));
    CHECK_FALSE(n.graphs.empty());
    // The tour's first comment line (its title) is in the narration.
    CHECK_THAT(n.text, Catch::Contains("# Tour: "));
    const auto model = nlohmann::json::parse(n.model_json);
    CHECK(model["steps"].size() == n.graphs.size());
    CHECK(model["outcome"] == "pass");
    ++tours;
    backend += s.config.workload == "backend" ? 1U : 0U;
  }
  CHECK(tours >= 14);
  CHECK(backend >= 6);
}

TEST_CASE("explain narrates a backend's sync phase, async phase, copies, reclaims and restore",
          "[sim][explain][backend]") {
  const Explanation e =
      explain_scenario(load("scenarios/tours/rescale-out-two-way-split.scenario"));
  const std::string text = explain_backend_text(e);
  const std::string all = flat(text);
  const std::string sync = section(all, "— writer: checkpoint c1 (");
  CHECK_THAT(sync, Catch::Contains("6 in all: key group 1 (count, events, avg); key group 6 "
                                   "(count, attrs, sum)"));
  CHECK_THAT(sync, Catch::Contains("kg6  count: k1=10 [map v1 H=1]"));
  const std::string copy = section(all, "— writer: value s=count k=1 update 11 (");
  CHECK_THAT(copy, Catch::Contains("count k1 (key group 6) goes from 10 to 11; the entry was "
                                   "copied (entry_version 0 < H=1"));
  const std::string async = section(all, "— c1: step all (");
  CHECK_THAT(async, Catch::Contains("Blocks written for key group 1 (count, events, avg); key "
                                    "group 6 (count, attrs, sum), whose map snapshots are "
                                    "released"));
  CHECK_THAT(async, Catch::Contains("Retired memory freed"));
  CHECK_THAT(async, Catch::Contains("c1 is a complete checkpoint now"));
  const std::string restore = section(all, "— writer: restore c1 into 0-3 and 4-7 (");
  CHECK_THAT(restore, Catch::Contains("0-3 gets key group 1: avg k7/ns1=[4,1], count k3=30, "
                                      "events k3=[7,8]. 4-7 gets key group 6: attrs "
                                      "k1={2:20}, count k1=10, sum k0=11."));
  // The comment block above the sync phase's line comes right before its step.
  CHECK_THAT(text, Catch::Contains("# The sync phase: one map snapshot per (state, key group) "
                                   "that has entries, on the writer.\n"));
  CHECK(text.find("# The sync phase:") < text.find("— writer: checkpoint c1 ("));
}

TEST_CASE("explain narrates write faults, async I/O completions and power losses",
          "[sim][explain][backend]") {
  const std::string faults = flat(explain_backend_text(
      explain_scenario(load("scenarios/smoke/backend-write-faults.scenario"))));
  CHECK_THAT(section(faults, "— c2: lose write 1 ("),
             Catch::Contains("c2 arms a lost write: append 1 to c2's data file will be "
                             "acknowledged but never reach the disk"));
  CHECK_THAT(section(faults, "— c3: misdirect manifest to 8 ("),
             Catch::Contains("c3 arms a misdirected write: the manifest of c3 will land at "
                             "byte 8 of the file instead of its end"));
  const std::string io = flat(
      explain_backend_text(explain_scenario(load("scenarios/smoke/backend-async-io.scenario"))));
  CHECK_THAT(section(io, "— io: land c2 ("),
             Catch::Contains("The I/O thread completes the oldest write queued for c2's files"));
  CHECK_THAT(section(io, "— c1: fail at write 1 ("),
             Catch::Contains("c1 arms an I/O error: file operation 1 from now fails"));
  const std::string power = flat(
      explain_backend_text(explain_scenario(load("scenarios/smoke/backend-power-loss.scenario"))));
  const std::string crash = section(power, "— writer: power_loss after=now keep=1 (");
  CHECK_THAT(crash, Catch::Contains("The power fails after disk operation 44 of 44: 0 pending "
                                    "operations decided"));
  CHECK_THAT(crash, Catch::Contains("Restart: latest checkpoint c2."));
  // After the restart the checkpoints keep what they wrote and say what storage made of them.
  const std::string restart = section(faults, "— writer: power_loss after=now keep=1 (");
  CHECK_THAT(restart, Catch::Contains("checkpoint c1 (id 1): complete, 588 bytes written"));
  CHECK_THAT(restart, Catch::Contains(
                          "checkpoint c2 (id 2): complete (data file damaged), 588 bytes written"));
}

TEST_CASE("explain narrates TTL expiry against the logical clock and cleanup decisions",
          "[sim][explain][backend][ttl]") {
  const std::string during = flat(explain_backend_text(
      explain_scenario(load("scenarios/tours/ttl-expiry-during-checkpoint.scenario"))));
  CHECK_THAT(section(during, "— clock: advance 5 (line 17)"),
             Catch::Contains("count k1 (1 last accessed at 0, expiry instant 10)"));
  CHECK_THAT(section(during, "— c1: step all ("),
             Catch::Contains("Full-snapshot cleanup left out of it what had expired when its "
                             "entry was written (last access + ttl <= now 10): count k1=1@0, "
                             "count k2=2@0"));
  const std::string cleanup = flat(explain_backend_text(
      explain_scenario(load("scenarios/tours/ttl-incremental-cleanup-during-snapshot.scenario"))));
  CHECK_THAT(
      section(cleanup, "— writer: cleanup s=events n=all ("),
      Catch::Contains("events k1 (key group 6) goes from [1@0,3@5] to [3@5]; expired and "
                      "removed: 1@0 (last access + ttl 10 <= now 10); the entry was copied"));
}

TEST_CASE("explain narrates rehash starts, rehash steps and slots reused after a reclaim",
          "[sim][explain]") {
  const std::string rehash =
      flat(explain_text(explain_scenario(load("scenarios/tours/snapshot-during-rehash.scenario"))));
  CHECK_THAT(section(rehash, "— writer: put k=1 v=1 ("),
             Catch::Contains("A rehash starts: the map holds more than 0.75 x 4 entries, so a "
                             "table of 8 buckets is allocated"));
  CHECK_THAT(section(rehash, "— writer: put k=5 v=5 ("),
             Catch::Contains("The incremental rehash moved old bucket 0 to the new table "
                             "(rehash index 1)."));
  const std::string reuse = flat(explain_text(
      explain_scenario(load("scenarios/tours/overlapping-snapshots-release-order.scenario"))));
  CHECK_THAT(reuse, Catch::Contains("Slot 2, retired until no live snapshot could see it and "
                                    "then freed, is reused for k1."));
}

TEST_CASE("the explain model holds every entry, state, copy and snapshot head of each step",
          "[sim][explain][model]") {
  const Explanation e = explain_scenario(load(kChainPrefix));
  const auto model = nlohmann::json::parse(explain_json(e));
  REQUIRE(model["steps"].size() == e.steps.size());
  for (std::size_t i = 0; i < e.steps.size(); ++i) {
    const MapLayout& l = e.steps[i].layout;
    const auto& m = model["steps"][i]["map"];
    std::size_t live = 0, heads = 0;
    for (const auto& t : l.tables) {
      for (const auto& chain : t) live += chain.size();
    }
    for (const auto& snap : l.snapshots) {
      for (std::uint32_t h : snap.heads) heads += h != 0 ? 1 : 0;
    }
    CHECK(m["entries"].size() == live + l.retired.size());
    std::size_t model_heads = 0;
    for (const auto& snap : m["snapshots"]) {
      for (const auto& h : snap["heads"]) model_heads += h.get<std::uint32_t>() != 0 ? 1U : 0U;
    }
    CHECK(model_heads == heads);
  }
  // The put after the snapshot copied k5 and k1; their originals are retired.
  const auto& put = model["steps"][3]["map"]["entries"];
  std::set<std::string> copied, retired;
  for (const auto& en : put) {
    if (en["copied"].get<bool>()) copied.insert(en["key"].get<std::string>());
    if (en["retired"].get<bool>()) retired.insert(en["key"].get<std::string>());
  }
  CHECK(copied == std::set<std::string>{"k1", "k5"});
  CHECK(retired == std::set<std::string>{"k1", "k5"});
}
