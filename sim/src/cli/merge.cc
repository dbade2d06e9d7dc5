// Merging campaign shards into one summary; see merge.h.
#include "cli/merge.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <set>

#include "cli/campaign_id.h"
#include "cli/merge_summary.h"
#include "cli/shard_reader.h"

namespace cowstate::cli {

namespace {

using Problems = std::vector<std::string>;

void read_input(const std::string& name, ReadResult* out) {
  if (name == "-") {
    read_shards(std::cin, "<stdin>", out);
    return;
  }
  struct stat st {};
  if (::stat(name.c_str(), &st) != 0) {
    out->problems.push_back(name + ": cannot open: " + std::strerror(errno));
    return;
  }
  if (S_ISDIR(st.st_mode)) {
    out->problems.push_back(name + ": a directory; expected a file of JSON lines (fuzz --json)");
    return;
  }
  std::ifstream in(name, std::ios::binary);
  if (!in) {
    out->problems.push_back(name + ": cannot open: " + std::strerror(errno));
    return;
  }
  read_shards(in, name, out);
}

// What differs between two campaign objects: "seed 41 here, 40 there; ops ...".
std::string differences(const nlohmann::json& here, const nlohmann::json& there) {
  std::set<std::string> keys;
  for (const auto& item : here.items()) keys.insert(item.key());
  for (const auto& item : there.items()) keys.insert(item.key());
  std::string out;
  for (const std::string& k : keys) {
    const std::string a = here.contains(k) ? here[k].dump() : "(none)";
    const std::string b = there.contains(k) ? there[k].dump() : "(none)";
    if (a != b) out += (out.empty() ? "" : ", ") + k + " " + a + " here, " + b + " there";
  }
  return out;
}

// Every shard is of the first one's campaign, with an id that is its campaign's; those
// that are, in input order.
std::vector<const Shard*> check_campaign(const std::vector<Shard>& shards, Problems* p) {
  const Shard& first = shards.front();
  std::vector<const Shard*> same;
  for (const Shard& s : shards) {
    const std::string id = campaign_id(s.campaign);
    if (id != s.campaign_id) {
      p->push_back(s.header.text() + ": campaign_id " + s.campaign_id +
                   " is not the id of its campaign object (" + id +
                   "): the line was edited, or written by another tool");
    }
    if (&s == &first) {
      same.push_back(&s);
      continue;
    }
    std::string what;
    auto differ = [&what](const std::string& d) { what += (what.empty() ? "" : "; ") + d; };
    if (s.command != first.command)
      differ("command " + s.command + " here, " + first.command + " there");
    if (s.version != first.version) {
      differ("built by cowstate " + s.version + " here, " + first.version + " there");
    }
    if (s.campaign != first.campaign) differ(differences(s.campaign, first.campaign));
    if (s.count != first.count) {
      differ("shard count " + std::to_string(s.count) + " here, " + std::to_string(first.count) +
             " there");
    }
    if (what.empty()) {
      same.push_back(&s);
    } else {
      p->push_back(s.header.text() + ": " + s.name() + " is not of the campaign of " +
                   first.header.text() + " (" + first.name() + "): " + what);
    }
  }
  return same;
}

// Each shard index of the campaign once; the first shard of each index, in input order.
std::vector<const Shard*> check_shard_indices(const std::vector<const Shard*>& shards,
                                              Problems* p) {
  const Shard& first = *shards.front();
  std::map<std::uint32_t, const Shard*> seen;
  std::vector<const Shard*> once;
  for (const Shard* s : shards) {
    auto [it, fresh] = seen.emplace(s->index, s);
    if (fresh) {
      once.push_back(s);
    } else {
      p->push_back(s->header.text() + ": " + s->name() + " again (also at " +
                   it->second->header.text() + ")");
    }
  }
  std::string missing;
  std::uint32_t count = 0;
  for (std::uint32_t i = 0; i < first.count; ++i) {
    if (seen.count(i) != 0) continue;
    if (++count <= 20) missing += (missing.empty() ? "" : ", ") + std::to_string(i);
  }
  if (count > 20) missing += " and " + std::to_string(count - 20) + " more";
  if (count > 0) {
    p->push_back("missing " + std::to_string(count) + " of the " + std::to_string(first.count) +
                 " shards of campaign " + first.campaign_id + " (begun at " + first.header.text() +
                 "): shard " + missing);
  }
  return once;
}

// One record: in its shard's residue class, of the campaign's seeds and runs, not seen before.
bool check_unit(const Shard& s, const UnitRecord& u, std::uint64_t limit,
                std::map<std::uint64_t, const UnitRecord*>* seen, Problems* p) {
  const std::string what = u.where.text() + ": " + s.unit() + " " + std::to_string(u.index);
  if (u.index % s.count != s.index) {
    p->push_back(what + " is not of " + s.name() + " (" + std::to_string(u.index) + " mod " +
                 std::to_string(s.count) + " = " + std::to_string(u.index % s.count) + ")");
    return false;
  }
  if (limit != 0 && u.index >= limit) {
    p->push_back(what + " is beyond the campaign's " + std::to_string(limit) + " " + s.unit() +
                 "s");
    return false;
  }
  const std::uint64_t seed = s.parameter("seed") + u.index;
  if (s.command == "fuzz" && u.seed != seed) {
    p->push_back(what + " has seed " + std::to_string(u.seed) + "; the campaign's run " +
                 std::to_string(u.index) + " has seed " + std::to_string(seed));
    return false;
  }
  auto [it, fresh] = seen->emplace(u.index, &u);
  if (!fresh) p->push_back(what + " again (also at " + it->second->where.text() + ")");
  return fresh;
}

// Every run or subtree once, in the shard it belongs to; a shard's indices are the first
// ones of its residue class (a shard runs them in order, so a gap is a lost record).
void check_units(const std::vector<const Shard*>& shards, std::uint64_t subtrees_total,
                 Problems* p) {
  std::map<std::uint64_t, const UnitRecord*> seen;
  for (const Shard* shard : shards) {
    const Shard& s = *shard;
    const std::uint64_t limit = s.command == "fuzz" ? s.parameter("runs") : subtrees_total;
    std::vector<std::uint64_t> mine;
    for (const UnitRecord& u : s.units) {
      if (check_unit(s, u, limit, &seen, p)) mine.push_back(u.index);
    }
    std::sort(mine.begin(), mine.end());
    for (std::size_t k = 0; k < mine.size(); ++k) {
      const std::uint64_t want = s.index + k * std::uint64_t{s.count};
      if (mine[k] == want) continue;
      p->push_back(s.header.text() + ": " + s.name() + " has no record of " + s.unit() + " " +
                   std::to_string(want) + ", though it has later ones: a record was lost");
      break;
    }
  }
}

// Every check of merge.h; the problems found, in input order.
Problems check_shards(const std::vector<Shard>& shards) {
  Problems p;
  const std::vector<const Shard*> once = check_shard_indices(check_campaign(shards, &p), &p);
  // An exploration's subtree count, as its first shard that explored all its subtrees says.
  std::uint64_t subtrees_total = 0;
  for (const Shard* s : once) {
    if (s->summary && s->summary->complete && subtrees_total == 0) {
      subtrees_total = s->summary->subtrees_total;
    }
  }
  check_units(once, subtrees_total, &p);
  for (const Shard* s : once) check_summary(*s, subtrees_total, &p);
  return p;
}

int inconsistent(const Problems& problems, bool json) {
  std::size_t shown = 0;
  for (const std::string& problem : problems) {
    if (++shown > 50) break;
    std::fprintf(stderr, "cowstate merge: %s\n", problem.c_str());
  }
  if (problems.size() > 50) {
    std::fprintf(stderr, "cowstate merge: ... and %zu more problems\n", problems.size() - 50);
  }
  std::fprintf(stderr, "cowstate merge: nothing merged (%zu problem%s)\n", problems.size(),
               problems.size() == 1 ? "" : "s");
  if (json) {
    std::cout
        << nlohmann::json{{"type", "merge"}, {"consistent", false}, {"problems", problems}}.dump()
        << std::endl;
  }
  return 2;
}

}  // namespace

int run_merge(const MergeArgs& args) {
  ReadResult read;
  const std::vector<std::string> files =
      args.files.empty() ? std::vector<std::string>{"-"} : args.files;
  for (const std::string& file : files) read_input(file, &read);
  if (read.problems.empty() && read.shards.empty()) {
    read.problems.push_back(
        "no campaign line in the input: expected the JSON lines of `cowstate "
        "fuzz --json` or `cowstate explore --json`");
  }
  if (!read.problems.empty()) return inconsistent(read.problems, args.json);
  const Problems problems = check_shards(read.shards);
  if (!problems.empty()) return inconsistent(problems, args.json);
  const nlohmann::json merged = merge_summary(read.shards);
  if (args.json) {
    std::cout << merged.dump() << std::endl;
  } else {
    print_merge_summary(merged);
  }
  return merged["failures"].get<std::uint64_t>() == 0 ? 0 : 1;
}

}  // namespace cowstate::cli
