// Reading campaign shards' JSON lines; see shard_reader.h.
#include "cli/shard_reader.h"

#include <charconv>
#include <cstddef>

namespace cowstate::cli {

namespace {

// A line longer than this is refused rather than read on (no record comes near it).
constexpr std::size_t kLineBytesMax = std::size_t{16} << 20;

// One record's fields, read with the first problem kept: the field's name, what was
// expected and what was found.
class Fields {
 public:
  Fields(const nlohmann::json& j, const char* what) : j_(j), what_(what) {}

  std::string str(const char* key) {
    const nlohmann::json* v = find(key, "a string");
    return v != nullptr && check(v->is_string(), key, *v, "a string") ? v->get<std::string>() : "";
  }
  std::string str_or(const char* key, const std::string& otherwise) {
    return j_.contains(key) ? str(key) : otherwise;
  }
  std::uint64_t u64(const char* key) {
    const nlohmann::json* v = find(key, "an unsigned integer");
    if (v == nullptr) return 0;
    const bool ok =
        v->is_number_unsigned() || (v->is_number_integer() && v->get<std::int64_t>() >= 0);
    return check(ok, key, *v, "an unsigned integer") ? v->get<std::uint64_t>() : 0;
  }
  double number(const char* key) {
    const nlohmann::json* v = find(key, "a number");
    return v != nullptr && check(v->is_number(), key, *v, "a number") ? v->get<double>() : 0;
  }
  bool boolean(const char* key) {
    const nlohmann::json* v = find(key, "true or false");
    return v != nullptr && check(v->is_boolean(), key, *v, "true or false") && v->get<bool>();
  }
  nlohmann::json object(const char* key) {
    const nlohmann::json* v = find(key, "an object");
    return v != nullptr && check(v->is_object(), key, *v, "an object") ? *v : nlohmann::json();
  }
  // 16 hex digits, as trace_hash_text writes them.
  std::uint64_t hash(const char* key) {
    const std::string s = str(key);
    std::uint64_t h = 0;
    const bool hex = s.size() == 16 &&
                     s.find_first_not_of("0123456789abcdef") == std::string::npos &&
                     std::from_chars(s.data(), s.data() + 16, h, 16).ec == std::errc();
    if (problem_.empty() && !hex) {
      problem_ =
          std::string(what_) + ": field '" + key + "' is \"" + s + "\" (expected 16 hex digits)";
    }
    return h;
  }
  sim::RunStats stats() {
    sim::RunStats s;
    s.steps = u64("steps");
    s.ops = u64("ops");
    s.snapshots = u64("snapshots");
    s.snapshots_checked = u64("snapshots_checked");
    s.entries_checked = u64("entries_checked");
    s.deep_checks = u64("deep_checks");
    s.yields = u64("yields");
    s.coverage = probes();
    return s;
  }
  // The hits per coverage probe (cowstate/sim/coverage.h), by name.
  sim::CoverageCounts probes() {
    const nlohmann::json* v = find("probes", "an object of hits by probe");
    if (v == nullptr) return {};
    std::string why;
    std::optional<sim::CoverageCounts> c = sim::CoverageCounts::from_json(*v, &why);
    if (!c && problem_.empty()) problem_ = std::string(what_) + ": field 'probes': " + why;
    return c.value_or(sim::CoverageCounts{});
  }
  const std::string& problem() const { return problem_; }

 private:
  const nlohmann::json* find(const char* key, const char* expected) {
    auto it = j_.find(key);
    if (it != j_.end()) return &*it;
    if (problem_.empty()) {
      problem_ =
          std::string(what_) + ": field '" + key + "' is missing (expected " + expected + ")";
    }
    return nullptr;
  }
  bool check(bool ok, const char* key, const nlohmann::json& v, const char* expected) {
    if (!ok && problem_.empty()) {
      std::string found = v.dump();
      if (found.size() > 40) found = found.substr(0, 40) + "...";
      problem_ =
          std::string(what_) + ": field '" + key + "' is " + found + " (expected " + expected + ")";
    }
    return ok;
  }

  const nlohmann::json& j_;
  const char* what_;
  std::string problem_;
};

// Reads one line of at most kLineBytesMax bytes; false at the end of the stream.
bool read_line(std::istream& in, std::string* line, bool* newline, bool* too_long) {
  line->clear();
  *newline = false;
  *too_long = false;
  std::streambuf* buf = in.rdbuf();
  for (;;) {
    const int c = buf->sbumpc();
    if (c == std::char_traits<char>::eof()) return !line->empty() || *too_long;
    if (c == '\n') {
      *newline = true;
      return true;
    }
    if (line->size() < kLineBytesMax) {
      line->push_back(static_cast<char>(c));
    } else {
      *too_long = true;
    }
  }
}

FailureRecord failure_fields(Fields& f, bool explored) {
  FailureRecord r;
  r.signature = f.str("signature");
  r.outcome = f.str("outcome");
  r.check = f.str("check");
  r.message = f.str("message");
  if (!explored) r.case_file = f.str_or("case_file", "");
  r.shrunk_file = f.str_or("shrunk_file", "");
  r.replay = f.str_or("replay", "");
  return r;
}

// Reads the lines of one shard stream; see read_shards.
class StreamReader {
 public:
  StreamReader(const std::string& file, ReadResult* out) : file_(file), out_(out) {}

  void line(const std::string& text, std::uint64_t number, bool last_without_newline) {
    const Where where{file_, number};
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
      problem(where, "not valid JSON (at byte " + std::to_string(e.byte) + ")" +
                         (last_without_newline
                              ? "; it is the last line and has no newline: the shard was cut "
                                "off while writing it (killed?)"
                              : ""));
      return;
    }
    if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
      problem(where, "expected a JSON object with a string field 'type'");
      return;
    }
    const std::string type = j["type"].get<std::string>();
    if (type == "campaign") return header(j, where);
    if (!open_ || shard().summary) {
      problem(where, "a '" + type + "' line outside a shard (no campaign line opens it)");
      return;
    }
    if (!same_campaign(j, where)) return;
    if (type == "run" || type == "subtree") return unit(j, where, type == "subtree");
    if (type == "failure") return explored(j, where);
    if (type == "summary") return summary(j, where);
    problem(where, "unknown record type '" + type +
                       "' (expected campaign, run, subtree, failure or summary)");
  }

  void end() { close_open(); }

 private:
  Shard& shard() { return out_->shards[*open_]; }
  void problem(const Where& where, const std::string& what) {
    out_->problems.push_back(where.text() + ": " + what);
  }
  bool report(const Fields& f, const Where& where) {
    if (f.problem().empty()) return true;
    problem(where, f.problem());
    return false;
  }

  void close_open() {
    if (open_ && !shard().summary) {
      problem(shard().header, "shard " + std::to_string(shard().index) + "/" +
                                  std::to_string(shard().count) +
                                  " opened here has no summary line: it did not finish (killed, "
                                  "or its output was cut)");
    }
    open_.reset();
  }

  void header(const nlohmann::json& j, const Where& where) {
    close_open();
    Shard s;
    s.header = where;
    Fields f(j, "campaign line");
    s.command = f.str_or("command", "fuzz");
    s.version = f.str("version");
    s.campaign_id = f.str("campaign_id");
    s.campaign = f.object("campaign");
    const nlohmann::json shard = f.object("shard");
    if (!report(f, where)) return;
    Fields g(shard, "campaign line: shard");
    s.index = static_cast<std::uint32_t>(g.u64("index"));
    s.count = static_cast<std::uint32_t>(g.u64("count"));
    if (!report(g, where)) return;
    if (s.count == 0 || s.index >= s.count) {
      problem(where, "campaign line: shard " + std::to_string(s.index) + "/" +
                         std::to_string(s.count) + " (expected index < count)");
      return;
    }
    if (s.command != "fuzz" && s.command != "explore") {
      problem(where, "campaign line: command '" + s.command + "' (expected fuzz or explore)");
      return;
    }
    out_->shards.push_back(std::move(s));
    open_ = out_->shards.size() - 1;
  }

  // A record's campaign id and version are its shard's.
  bool same_campaign(const nlohmann::json& j, const Where& where) {
    Fields f(j, "record");
    const std::string id = f.str("campaign_id");
    const std::string version = f.str("version");
    if (!report(f, where)) return false;
    if (id != shard().campaign_id || version != shard().version) {
      problem(where, "record of campaign " + id + " (" + version +
                         ") inside the shard of campaign " + shard().campaign_id + " (" +
                         shard().version + ") opened at " + shard().header.text());
      return false;
    }
    return true;
  }

  void unit(const nlohmann::json& j, const Where& where, bool subtree) {
    UnitRecord u;
    u.where = where;
    Fields f(j, subtree ? "subtree record" : "run record");
    u.index = f.u64(subtree ? "subtree" : "run");
    if (subtree) {
      u.schedules = f.u64("schedules");
      u.pruned = f.u64("pruned");
      u.failures = f.u64("failures");
      u.stats.steps = f.u64("steps");
      u.stats.coverage = f.probes();
      u.outcome = u.failures == 0 ? "pass" : "failure";
    } else {
      u.seed = f.u64("seed");
      u.elapsed_ms = f.number("elapsed_ms");
      u.outcome = f.str("outcome");
      u.trace_hash = f.hash("trace_hash");
      u.stats = f.stats();
      if (u.outcome != "pass") u.failure = failure_fields(f, false);
    }
    if (report(f, where)) shard().units.push_back(std::move(u));
  }

  void explored(const nlohmann::json& j, const Where& where) {
    ExploredRecord e;
    e.where = where;
    Fields f(j, "failure record");
    e.subtree = f.u64("subtree");
    e.ordinal = f.u64("ordinal");
    e.failure = failure_fields(f, true);
    if (report(f, where)) shard().explored.push_back(std::move(e));
  }

  void summary(const nlohmann::json& j, const Where& where) {
    ShardSummary s;
    s.where = where;
    const bool explore = shard().command == "explore";
    Fields f(j, "summary line");
    s.units = f.u64(explore ? "subtrees" : "runs");
    s.failures = f.u64("failures");
    s.seconds = f.number("seconds");
    if (explore) {
      s.schedules = f.u64("schedules");
      s.pruned = f.u64("pruned");
      s.stats.steps = f.u64("steps");
      s.stats.coverage = f.probes();
      s.subtrees_total = f.u64("subtrees_total");
      s.complete = f.boolean("complete");
    } else {
      s.stats = f.stats();
      s.stopped_by = f.str("stopped_by");
    }
    const nlohmann::json* coverage = j.contains("coverage") ? &j["coverage"] : nullptr;
    if (!report(f, where)) return;
    std::string why = "field 'coverage' is missing";
    std::optional<sim::CoverageReach> reach =
        coverage != nullptr ? sim::CoverageReport::reach_from_json(*coverage, &why) : std::nullopt;
    if (!reach) return problem(where, "summary line: " + why);
    s.reach = *reach;
    shard().summary = s;
  }

  std::string file_;
  ReadResult* out_;
  std::optional<std::size_t> open_;  // the shard being read, in out_->shards
};

}  // namespace

void read_shards(std::istream& in, const std::string& file, ReadResult* out) {
  StreamReader reader(file, out);
  std::string text;
  bool newline = false, too_long = false;
  std::uint64_t number = 0;
  while (read_line(in, &text, &newline, &too_long)) {
    ++number;
    if (too_long) {
      out->problems.push_back(Where{file, number}.text() + ": a line of more than " +
                              std::to_string(kLineBytesMax >> 20) + " MiB; no record is that long");
      continue;
    }
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    reader.line(text, number, !newline);
  }
  if (in.bad()) out->problems.push_back(file + ": read error");
  reader.end();
}

}  // namespace cowstate::cli
