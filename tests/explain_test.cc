// Tests of `cowstate explain`: the narrated text and the DOT graphs say what the map did.
#include "cowstate/sim/explain.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cowstate/sim/scenario.h"

using namespace cowstate::sim;

namespace {

Scenario load(const std::string& relative) {
  const std::string path = std::string(COWSTATE_SOURCE_DIR) + "/" + relative;
  std::ifstream in(path);
  REQUIRE(in);
  std::stringstream text;
  text << in.rdbuf();
  ParseError error;
  auto s = parse_scenario(text.str(), path, &error);
  INFO(error.to_string());
  REQUIRE(s);
  return *s;
}

// The text of the step whose heading contains `heading`, up to the next step.
std::string section(const std::string& text, const std::string& heading) {
  const std::size_t at = text.find(heading);
  if (at == std::string::npos) return "";
  const std::size_t end = text.find("\nstep ", at + 1);
  return text.substr(at, end == std::string::npos ? std::string::npos : end - at);
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
  CHECK_THAT(snap, Catch::Contains("b1: [k5 =50 slot2 e0 s0 | seen by s1] -> [k1 =10 slot1 e0 "
                                   "s0 | s1]"));
  CHECK_THAT(snap,
             Catch::Contains("nothing copied: a snapshot start copies only the bucket heads"));

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
  CHECK_THAT(put, Catch::Contains("b1: [*k5 =50 slot3 e1 s0] -> [*k1 =11 slot4 e1 s1]"));
  CHECK_THAT(put, Catch::Contains("only snapshots reach:"));
  CHECK_THAT(put, Catch::Contains("[k1 =10 slot1 e0 s0 | seen by s1]"));
  CHECK_THAT(put, Catch::Contains("[k5 =50 slot2 e0 s0 | seen by s1]"));
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
  CHECK_THAT(first, Catch::Contains("b1: [+k1 =10 slot1 e0 s0]"));
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
  CHECK_THAT(put, Catch::Contains("e3 [shape=box, label=\"k5 = 50\\nslot 3  e1 s0\", style=filled, "
                                  "fillcolor=\"gold\""));
  CHECK_THAT(put, Catch::Contains("e2 [shape=box, label=\"k5 = 50\\nslot 2  e0 s0\\nseen by s1\", "
                                  "style=\"filled,dashed\", fillcolor=\"grey90\""));
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
