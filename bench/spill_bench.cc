// cowstate_spill_bench: a word count on the keyed backend's spill tier (spill_tier.h), after
// FLIP-50's evaluation, against the same backend without a budget and a RocksDB-only backend.
//
// Workload: one int64 counter per word in a value state; a record is set_current_key plus a
// read-modify-write (+1). --keys distinct words (u64 keys, a bijective mix of 0..n-1), first
// counted once each in word order (the fill), then --records records with Zipf-skewed ranks
// (the stream, timed). Two variants of the same rank stream:
//   keys     rank r is word r: hot and cold keys hash over all key groups alike
//   tenants  ranks are laid out key group by key group (key groups in a shuffled order), so
//            the hot keys concentrate in a few key groups
// Contenders, in this process, on the same records (the backends fill one after the other,
// then their streams take turns in 20 chunks, so that every one meets the same load;
// RocksDB runs last, alone):
//   heap             no budget
//   budget           memory_budget_bytes = 1/3 of heap's accounted bytes after its fill,
//                    default SpillOptions (no hot-entry cache: a spilled key group's
//                    accesses go to LMDB)
//   budget, cache R  the same with cold_cache_ratio = R (--cache-ratio, 0.25): a cache of
//                    the hot entries of spilled key groups takes that share of the budget
//   rocksdb          RocksDB alone: an LRU block cache of the budget, a Bloom filter, WAL off,
//                    get + put per record, 8-byte big-endian keys, 8-byte values (its
//                    memtables, index and filter blocks are memory beyond the budget)
// Checkpoint: after budget's stream, key groups are moved by hand until half of them are
// spilled; a checkpoint of both tiers is written to a file and restored into a backend with
// the same budget. MB/s = checkpoint bytes / wall time (1 MB = 1e6 B).
//
// Time is wall time (RocksDB's compactions run on threads of their own). Correctness check:
// after each contender the counters sum to the records it processed (fill + stream); a
// checkpoint restore holds every key and spot-checked counts. A benchmark, never a test: it
// exits 2 on a bad argument, 1 on an I/O error or a wrong count, 0 otherwise, whatever the
// targets say.
#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/iterator.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cowstate/checkpoint.h"
#include "cowstate/file_system.h"
#include "cowstate/key_groups.h"
#include "cowstate/keyed_state_backend.h"
#include "cowstate/spill_tier.h"

namespace {

using Backend = cowstate::KeyedStateBackend<cowstate::UInt64Serializer>;
using Counter =
    cowstate::ValueState<Backend, cowstate::VoidNamespaceSerializer, cowstate::Int64Serializer>;

constexpr std::int32_t kMaxParallelism = cowstate::kDefaultMaxParallelism;

// ---------------------------------------------------------------------------------------------
// Exits and the temporary directory (removed at every exit, a failing one included).

std::string g_temp_dir;

void remove_temp_dir() {
  if (g_temp_dir.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(g_temp_dir, ec);
  g_temp_dir.clear();
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "cowstate_spill_bench: %s\n", what.c_str());
  std::exit(1);
}

constexpr const char* kUsage =
    "usage: cowstate_spill_bench [--keys N] [--records N] [--zipf S] [--seed N]\n"
    "                            [--variants keys,tenants]\n"
    "                            [--contenders budget,cache,rocksdb]\n"
    "                            [--cache-ratio R] [--quick]\n";

[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(stderr, "cowstate_spill_bench: %s\n%s", what.c_str(), kUsage);
  std::exit(2);
}

std::string make_temp_dir() {
  const char* env = std::getenv("TMPDIR");
  std::string pattern = (env != nullptr && *env != '\0' ? std::string(env) : std::string("/tmp")) +
                        "/cowstate-spill-bench-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) die("cannot create a directory like " + pattern);
  return pattern;
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::uint64_t splitmix64(std::uint64_t& s) {
  std::uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Word i's key: murmur3's 64-bit finalizer, a bijection, so n words are n distinct keys and
// neighbouring ranks are far apart in RocksDB's key order.
std::uint64_t word_key(std::uint64_t i) {
  std::uint64_t z = i + 0x2545f4914f6cdd1dULL;
  z = (z ^ (z >> 33)) * 0xff51afd7ed558ccdULL;
  z = (z ^ (z >> 33)) * 0xc4ceb9fe1a85ec53ULL;
  return z ^ (z >> 33);
}

double uniform01(std::uint64_t& s) { return static_cast<double>(splitmix64(s) >> 11) * 0x1.0p-53; }

// ---------------------------------------------------------------------------------------------
// Zipf ranks in [0, n) with P(r) proportional to 1 / (r + 1)^s, O(1) per draw: rejection-
// inversion (Hoermann and Derflinger 1996, as in Apache Commons' RejectionInversionZipfSampler).
class ZipfSampler {
 public:
  ZipfSampler(std::uint64_t n, double s) : n_(static_cast<double>(n)), s_(s) {
    h_integral_x1_ = h_integral(1.5) - 1.0;
    h_integral_n_ = h_integral(n_ + 0.5);
    threshold_ = 2.0 - h_integral_inverse(h_integral(2.5) - h(2.0));
  }
  std::uint64_t next(std::uint64_t& rng) const {
    for (;;) {
      const double u = h_integral_n_ + uniform01(rng) * (h_integral_x1_ - h_integral_n_);
      const double x = h_integral_inverse(u);
      double k = std::floor(x + 0.5);
      k = std::clamp(k, 1.0, n_);
      if (k - x <= threshold_ || u >= h_integral(k + 0.5) - h(k)) {
        return static_cast<std::uint64_t>(k) - 1;
      }
    }
  }

 private:
  double h(double x) const { return std::exp(-s_ * std::log(x)); }
  double h_integral(double x) const {
    const double log_x = std::log(x);
    return helper2((1.0 - s_) * log_x) * log_x;
  }
  double h_integral_inverse(double x) const {
    double t = x * (1.0 - s_);
    if (t < -1.0) t = -1.0;
    return std::exp(helper1(t) * x);
  }
  // log1p(x) / x and expm1(x) / x, continuous at 0.
  static double helper1(double x) {
    return std::abs(x) > 1e-8 ? std::log1p(x) / x : 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
  }
  static double helper2(double x) {
    return std::abs(x) > 1e-8 ? std::expm1(x) / x
                              : 1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x));
  }

  double n_;
  double s_;
  double h_integral_x1_ = 0;
  double h_integral_n_ = 0;
  double threshold_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Options and workload.

struct Options {
  // FLIP-50's scale is 1e7 keys (--keys 1e7); the default keeps a full run to minutes.
  std::uint64_t keys = 3'000'000;
  std::uint64_t records = 10'000'000;
  double zipf = 1.0;
  std::uint64_t seed = 0x5eed;
  bool quick = false;
  std::vector<std::string> variants = {"keys", "tenants"};
  // Besides heap, which always runs (its footprint sets the budget).
  std::vector<std::string> contenders = {"budget", "cache", "rocksdb"};
  // The cache contender's cold_cache_ratio.
  double cache_ratio = 0.25;
  bool runs(const std::string& c) const {
    return std::find(contenders.begin(), contenders.end(), c) != contenders.end();
  }
};

struct Workload {
  std::string variant;
  std::vector<std::uint64_t> fill;    // every key once, word order
  std::vector<std::uint64_t> stream;  // the timed records
};

// Rank -> key for the tenants variant: key groups in a shuffled order, each one's keys in word
// order, so ranks 0.. fill the first key group, then the next.
std::vector<std::uint64_t> tenant_layout(std::uint64_t n, std::uint64_t seed) {
  const cowstate::KeyGroupAssigner assign(kMaxParallelism);
  const cowstate::KeyHash<std::uint64_t> hash;
  std::vector<std::uint32_t> order(kMaxParallelism);
  for (std::uint32_t g = 0; g < order.size(); ++g) order[g] = g;
  for (std::size_t i = order.size() - 1; i > 0; --i) {
    std::swap(order[i], order[splitmix64(seed) % (i + 1)]);
  }
  std::vector<std::uint64_t> start(kMaxParallelism + 1, 0);  // by position in `order`
  std::vector<std::uint32_t> position(kMaxParallelism);
  for (std::uint32_t p = 0; p < order.size(); ++p) position[order[p]] = p;
  std::vector<std::uint32_t> group_of(n);
  for (std::uint64_t i = 0; i < n; ++i) {
    group_of[i] = position[static_cast<std::uint32_t>(assign(hash(word_key(i))))];
    ++start[group_of[i] + 1];
  }
  for (std::size_t p = 1; p < start.size(); ++p) start[p] += start[p - 1];
  std::vector<std::uint64_t> by_rank(n);
  for (std::uint64_t i = 0; i < n; ++i) by_rank[start[group_of[i]]++] = word_key(i);
  return by_rank;
}

Workload make_workload(const Options& o, const std::string& variant) {
  Workload w;
  w.variant = variant;
  w.fill.resize(o.keys);
  for (std::uint64_t i = 0; i < o.keys; ++i) w.fill[i] = word_key(i);
  std::vector<std::uint64_t> by_rank;
  if (variant == "tenants") by_rank = tenant_layout(o.keys, o.seed ^ 0x7e7a7175ULL);
  const ZipfSampler zipf(o.keys, o.zipf);
  std::uint64_t rng = o.seed;  // the same ranks in both variants
  w.stream.resize(o.records);
  for (std::uint64_t& k : w.stream) {
    const std::uint64_t rank = zipf.next(rng);
    k = by_rank.empty() ? word_key(rank) : by_rank[rank];
  }
  return w;
}

// ---------------------------------------------------------------------------------------------
// What a contender measured.

struct Figures {
  std::string contender;
  double fill_seconds = 0;
  double records_per_second = 0;
  std::uint64_t bytes_after_fill = 0;  // accounted (backends only)
  bool spill_tier = false;
  std::uint64_t spilled_key_groups = 0;  // after the stream
  std::uint64_t fill_spills = 0;
  std::uint64_t stream_spills = 0;
  std::uint64_t stream_loads = 0;
  double cache_hit_ratio = -1;      // of the stream's cold accesses; < 0: none
  double spilled_record_share = 0;  // of the stream's records, in key groups spilled at its end
};

struct CheckpointFigures {
  double mb = 0;
  std::uint64_t spilled_key_groups = 0;
  double write_mbs = 0;
  double restore_mbs = 0;
  std::uint64_t restored_spilled_key_groups = 0;
};

// ---------------------------------------------------------------------------------------------
// The keyed backend.

[[gnu::always_inline]] inline void count_word(Backend& b, Counter& c, std::uint64_t key) {
  if (!b.set_current_key(key).ok()) [[unlikely]]
    die("a key outside the backend's key group range");
  c.update(c.value() + 1);
}

std::int64_t sum_counts(Backend& b, Counter& c, const std::vector<std::uint64_t>& keys) {
  std::int64_t sum = 0;
  for (std::uint64_t k : keys) {
    if (!b.set_current_key(k).ok()) die("a key outside the backend's key group range");
    sum += c.value();
  }
  return sum;
}

// The share of `records` whose key group is spilled in `m`.
double spilled_record_share(const Backend& b, const cowstate::BackendMetrics& m,
                            const std::vector<std::uint64_t>& records) {
  std::vector<bool> spilled(kMaxParallelism, false);
  for (const cowstate::KeyGroupMetrics& k : m.key_groups) {
    if (k.tier == cowstate::Tier::cold) spilled[static_cast<std::size_t>(k.key_group)] = true;
  }
  std::uint64_t n = 0;
  for (std::uint64_t k : records) {
    if (spilled[static_cast<std::size_t>(b.key_group_of(k))]) ++n;
  }
  return records.empty() ? 0 : static_cast<double>(n) / static_cast<double>(records.size());
}

// SpillOptions' defaults but for the budget, the directory and (when given) the cache ratio.
cowstate::SpillOptions budget_options(std::uint64_t budget, const std::string& dir,
                                      std::optional<double> cache_ratio = std::nullopt) {
  cowstate::SpillOptions o;
  o.memory_budget_bytes = budget;
  if (cache_ratio) o.cold_cache_ratio = *cache_ratio;
  o.cold.parent_directory = dir;
  return o;
}

// A checkpoint sink into a plain file (no fsync: the page cache is what is measured).
class FileSink final : public cowstate::CheckpointSink {
 public:
  explicit FileSink(const std::string& path) {
    auto f = cowstate::posix_file_system().create_file(path);
    if (!f.ok()) die(f.status().message());
    file_ = std::move(*f);
  }
  cowstate::Status append(std::span<const std::byte> bytes) override {
    return file_->append(bytes);
  }
  void close() {
    if (cowstate::Status st = file_->close(); !st.ok()) die(st.message());
  }

 private:
  std::unique_ptr<cowstate::WritableFile> file_;
};

// Spills or loads key groups by hand (lowest first) until `target` of them are spilled.
void set_spilled_key_groups(Backend& b, std::uint64_t target) {
  std::uint64_t spilled = b.metrics().spilled_key_groups;
  for (std::int32_t g = 0; g < kMaxParallelism && spilled != target; ++g) {
    const cowstate::Tier tier = b.table_at(0).memory(g).tier;
    cowstate::Status st;
    if (spilled > target && tier == cowstate::Tier::cold) {
      st = b.load(0, g);
      --spilled;
    } else if (spilled < target && tier == cowstate::Tier::heap) {
      st = b.spill(0, g);
      ++spilled;
    }
    if (!st.ok()) die("moving key group " + std::to_string(g) + ": " + st.message());
  }
  if (b.metrics().spilled_key_groups != target) die("could not spill half of the key groups");
}

// Writes a checkpoint of `b` with half its key groups spilled and restores it into a backend
// with the same options; checks the restore against `b`.
CheckpointFigures measure_checkpoint(Backend& b, Counter& c, const cowstate::SpillOptions& spill,
                                     const Workload& w, const std::string& dir) {
  CheckpointFigures f;
  set_spilled_key_groups(b, kMaxParallelism / 2);
  f.spilled_key_groups = kMaxParallelism / 2;
  const std::string path = dir + "/checkpoint-" + w.variant + ".cscp";
  const double t0 = wall_seconds();
  std::uint64_t bytes = 0;
  {
    FileSink sink(path);
    cowstate::CheckpointWriter writer(b.snapshot(1), &sink);
    while (!writer.step(std::size_t{1} << 16)) {
    }
    if (!writer.done()) die("checkpoint: " + writer.status().message());
    sink.close();
    bytes = writer.bytes_written();
  }
  const double t1 = wall_seconds();
  Backend restored(cowstate::KeyGroupRange::all(kMaxParallelism), kMaxParallelism, {}, nullptr,
                   spill);
  Counter& rc = restored.value_state<cowstate::VoidNamespaceSerializer, cowstate::Int64Serializer>(
      "count", 0);
  const double t2 = wall_seconds();
  {
    auto file = cowstate::posix_file_system().read_file(path);
    if (!file.ok()) die(file.status().message());
    const cowstate::CheckpointInput in{path, *file};
    if (cowstate::Status st = restored.restore({&in, 1}); !st.ok()) die(st.message());
  }
  const double t3 = wall_seconds();
  std::filesystem::remove(path);
  const cowstate::BackendMetrics m = restored.metrics();
  if (m.entries != w.fill.size()) die("restore: wrong number of keys");
  f.restored_spilled_key_groups = m.spilled_key_groups;
  for (std::size_t i = 0; i < w.fill.size(); i += 9973) {
    const std::uint64_t k = w.fill[i];
    if (!b.set_current_key(k).ok() || !restored.set_current_key(k).ok()) die("restore: key group");
    if (c.value() != rc.value()) die("restore: a count differs from the checkpointed one");
  }
  f.mb = static_cast<double>(bytes) / 1e6;
  f.write_mbs = f.mb / (t1 - t0);
  f.restore_mbs = f.mb / (t3 - t2);
  return f;
}

// One backend contender, in stages: the fill; the stream, timed chunk by chunk so that the
// contenders' chunks can take turns (run_variant); then metrics, the count check and (when
// asked) the checkpoint figures.
class BackendRun {
 public:
  BackendRun(std::string name, const cowstate::SpillOptions& spill)
      : spill_(spill),
        b_(cowstate::KeyGroupRange::all(kMaxParallelism), kMaxParallelism, {}, nullptr, spill_),
        c_(b_.value_state<cowstate::VoidNamespaceSerializer, cowstate::Int64Serializer>("count",
                                                                                        0)) {
    f_.contender = std::move(name);
    f_.spill_tier = b_.has_spill_tier();
  }

  std::uint64_t fill(const Workload& w) {
    const double t0 = wall_seconds();
    for (std::uint64_t k : w.fill) count_word(b_, c_, k);
    f_.fill_seconds = wall_seconds() - t0;
    filled_ = b_.metrics();
    f_.bytes_after_fill = filled_.bytes;
    return filled_.bytes;
  }

  const std::string& contender() const noexcept { return f_.contender; }

  // Records [begin, end) of the stream.
  void stream(const Workload& w, std::size_t begin, std::size_t end) {
    const double t0 = wall_seconds();
    for (std::size_t i = begin; i < end; ++i) count_word(b_, c_, w.stream[i]);
    stream_seconds_ += wall_seconds() - t0;
  }

  Figures finish(const Workload& w, std::optional<CheckpointFigures>* checkpoint,
                 const std::string& dir) {
    const cowstate::BackendMetrics m = b_.metrics();
    f_.records_per_second = static_cast<double>(w.stream.size()) / stream_seconds_;
    f_.spilled_key_groups = m.spilled_key_groups;
    f_.fill_spills = filled_.spills;
    f_.stream_spills = m.spills - filled_.spills;
    f_.stream_loads = m.loads - filled_.loads;
    const std::uint64_t hits = m.cold_cache_hits - filled_.cold_cache_hits;
    const std::uint64_t misses = m.cold_cache_misses - filled_.cold_cache_misses;
    if (hits + misses > 0) {
      f_.cache_hit_ratio = static_cast<double>(hits) / static_cast<double>(hits + misses);
    }
    f_.spilled_record_share = spilled_record_share(b_, m, w.stream);
    const auto expected = static_cast<std::int64_t>(w.fill.size() + w.stream.size());
    if (const std::int64_t sum = sum_counts(b_, c_, w.fill); sum != expected) {
      die(w.variant + "/" + f_.contender + ": counters sum to " + std::to_string(sum) +
          ", expected " + std::to_string(expected));
    }
    if (checkpoint != nullptr) *checkpoint = measure_checkpoint(b_, c_, spill_, w, dir);
    return f_;
  }

 private:
  cowstate::SpillOptions spill_;
  Backend b_;
  Counter& c_;
  Figures f_;
  cowstate::BackendMetrics filled_;
  double stream_seconds_ = 0;
};

// ---------------------------------------------------------------------------------------------
// RocksDB alone.

void check(const rocksdb::Status& s, const char* what) {
  if (!s.ok()) die(std::string("rocksdb ") + what + ": " + s.ToString());
}

void encode_key(std::uint64_t k, char* out) {
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<char>(k & 0xff);
    k >>= 8;
  }
}

// An LRU block cache of the budget and a Bloom filter of 10 bits per key; otherwise RocksDB's
// defaults: memtables (64 MiB write buffers), index and filter blocks are memory beyond the
// budget, so the comparison is generous to RocksDB.
rocksdb::Options rocksdb_options(std::uint64_t budget) {
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = rocksdb::NewLRUCache(budget);
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  rocksdb::Options options;
  options.create_if_missing = true;
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return options;
}

Figures run_rocksdb(const Workload& w, std::uint64_t budget, const std::string& dir) {
  Figures f;
  f.contender = "rocksdb";
  const std::string path = dir + "/rocksdb-" + w.variant;
  const rocksdb::Options options = rocksdb_options(budget);
  rocksdb::DB* raw = nullptr;
  check(rocksdb::DB::Open(options, path, &raw), "open");
  std::unique_ptr<rocksdb::DB> db(raw);
  rocksdb::WriteOptions write;
  write.disableWAL = true;
  const rocksdb::ReadOptions read;
  char key[8];
  std::string value;
  auto count = [&](std::uint64_t k) {
    encode_key(k, key);
    std::int64_t n = 0;
    const rocksdb::Status s = db->Get(read, rocksdb::Slice(key, 8), &value);
    if (s.ok()) {
      if (value.size() != 8) die("rocksdb: a value of " + std::to_string(value.size()) + " bytes");
      std::memcpy(&n, value.data(), 8);
    } else if (!s.IsNotFound()) {
      check(s, "get");
    }
    ++n;
    check(db->Put(write, rocksdb::Slice(key, 8), rocksdb::Slice(reinterpret_cast<char*>(&n), 8)),
          "put");
  };
  const double t0 = wall_seconds();
  for (std::uint64_t k : w.fill) count(k);
  const double t1 = wall_seconds();
  for (std::uint64_t k : w.stream) count(k);
  const double t2 = wall_seconds();
  f.fill_seconds = t1 - t0;
  f.records_per_second = static_cast<double>(w.stream.size()) / (t2 - t1);
  std::int64_t sum = 0;
  std::uint64_t keys = 0;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(read));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    std::int64_t n = 0;
    std::memcpy(&n, it->value().data(), 8);
    sum += n;
    ++keys;
  }
  check(it->status(), "scan");
  it.reset();
  const auto expected = static_cast<std::int64_t>(w.fill.size() + w.stream.size());
  if (keys != w.fill.size() || sum != expected) {
    die(w.variant + "/rocksdb: " + std::to_string(keys) + " keys summing to " +
        std::to_string(sum) + ", expected " + std::to_string(w.fill.size()) + " summing to " +
        std::to_string(expected));
  }
  check(db->Close(), "close");
  db.reset();
  std::filesystem::remove_all(path);
  return f;
}

// ---------------------------------------------------------------------------------------------
// Output.

struct VariantResult {
  std::string variant;
  std::uint64_t budget = 0;
  std::vector<Figures> rows;  // heap, budget, budget with a cache, rocksdb
  CheckpointFigures checkpoint;
  bool met = true;
};

std::string fixed(double x, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, x);
  return buf;
}

void print_variant(VariantResult& v) {
  const Figures& heap = v.rows[0];
  const auto rocks = std::find_if(v.rows.begin(), v.rows.end(),
                                  [](const Figures& f) { return f.contender == "rocksdb"; });
  const double heap_floor = v.variant == "tenants" ? 0.5 : 0.25;
  for (const Figures& f : v.rows) {
    const double vs_heap = f.records_per_second / heap.records_per_second;
    const double vs_rocks =
        rocks != v.rows.end() ? f.records_per_second / rocks->records_per_second : 0;
    std::string target = "-";
    if (f.contender == "budget" && rocks != v.rows.end()) {
      const bool ok = vs_heap >= heap_floor && vs_rocks >= 3.0;
      v.met = v.met && ok;
      target = std::string(ok ? "PASS" : "MISS") + " (>= " + fixed(heap_floor, 2) +
               "x heap, >= 3x rocksdb)";
    }
    std::printf(
        "| %s | %s | %.2f | %.0f | %.3fx | %s | %s | %s | %s | %s | %s | %s | %s |\n",
        v.variant.c_str(), f.contender.c_str(), f.fill_seconds, f.records_per_second, vs_heap,
        rocks != v.rows.end() ? (fixed(vs_rocks, 2) + "x").c_str() : "-", target.c_str(),
        f.spill_tier
            ? (std::to_string(f.spilled_key_groups) + "/" + std::to_string(kMaxParallelism)).c_str()
            : "-",
        f.spill_tier ? (fixed(100 * f.spilled_record_share, 1) + "%").c_str() : "-",
        f.spill_tier ? std::to_string(f.fill_spills).c_str() : "-",
        f.spill_tier ? std::to_string(f.stream_spills).c_str() : "-",
        f.spill_tier ? std::to_string(f.stream_loads).c_str() : "-",
        f.cache_hit_ratio >= 0 ? (fixed(100 * f.cache_hit_ratio, 1) + "%").c_str() : "-");
  }
}

// ---------------------------------------------------------------------------------------------
// Arguments.

// A count: digits, or a mantissa and exponent ("1e7", "2.5e6") that make an integer.
std::uint64_t parse_count(const std::string& flag, const char* text, double lo, double hi) {
  char* end = nullptr;
  const double x = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(x >= lo && x <= hi) || x != std::floor(x)) {
    usage_error(flag + " takes an integer in [" + fixed(lo, 0) + ", " + fixed(hi, 0) + "], got '" +
                text + "'");
  }
  return static_cast<std::uint64_t>(x);
}

// A comma-separated list of names from `allowed`, each at most once, at least one.
std::vector<std::string> parse_list(const std::string& flag, const std::string& list,
                                    const std::vector<std::string>& allowed) {
  std::vector<std::string> out;
  for (std::size_t at = 0; at <= list.size();) {
    const std::size_t comma = std::min(list.find(',', at), list.size());
    const std::string v = list.substr(at, comma - at);
    std::string names;
    for (const std::string& a : allowed) names += (names.empty() ? "" : ", ") + a;
    if (std::find(allowed.begin(), allowed.end(), v) == allowed.end()) {
      usage_error(flag + " takes names from " + names + "; got '" + v + "'");
    }
    if (std::find(out.begin(), out.end(), v) != out.end()) {
      usage_error(flag + " names '" + v + "' twice");
    }
    out.push_back(v);
    at = comma + 1;
  }
  return out;
}

Options parse_args(int argc, char** argv) {
  Options o;
  bool keys_given = false;
  bool records_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--help" || a == "-h") {
      std::printf("%ssee bench/README.md\n", kUsage);
      std::exit(0);
    } else if (a == "--quick") {
      o.quick = true;
    } else if (!has_value && (a == "--keys" || a == "--records" || a == "--zipf" || a == "--seed" ||
                              a == "--variants" || a == "--contenders" || a == "--cache-ratio")) {
      usage_error(a + " needs a value");
    } else if (a == "--keys") {
      o.keys = parse_count(a, argv[++i], 1000, 1e9);
      keys_given = true;
    } else if (a == "--records") {
      o.records = parse_count(a, argv[++i], 1, 2e9);
      records_given = true;
    } else if (a == "--zipf") {
      char* end = nullptr;
      o.zipf = std::strtod(argv[++i], &end);
      if (*end != '\0' || !(o.zipf > 0 && o.zipf <= 5)) usage_error("--zipf takes S in (0, 5]");
    } else if (a == "--seed") {
      char* end = nullptr;
      const std::string v = argv[++i];
      o.seed = std::strtoull(v.c_str(), &end, 0);
      if (v.empty() || *end != '\0') {
        usage_error("--seed takes an integer (decimal or 0x hex), got '" + v + "'");
      }
    } else if (a == "--variants") {
      o.variants = parse_list(a, argv[++i], {"keys", "tenants"});
    } else if (a == "--cache-ratio") {
      char* end = nullptr;
      const std::string v = argv[++i];
      o.cache_ratio = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(o.cache_ratio >= 0 && o.cache_ratio < 1)) {
        usage_error("--cache-ratio takes R in [0, 1), got '" + v + "'");
      }
    } else if (a == "--contenders") {
      o.contenders = parse_list(a, argv[++i], {"budget", "cache", "rocksdb"});
    } else {
      usage_error("unknown argument '" + a + "'");
    }
  }
  if (o.quick && !keys_given) o.keys = 10'000;
  if (o.quick && !records_given) o.records = 50'000;
  return o;
}

// The streams of the backend contenders take turns in chunks of the stream, each chunk led by
// the next contender in turn, so that all of them meet the same load on the machine.
constexpr std::size_t kStreamChunks = 20;

VariantResult run_variant(const Options& o, const std::string& variant, const std::string& dir) {
  VariantResult v;
  v.variant = variant;
  const Workload w = make_workload(o, variant);
  std::vector<std::unique_ptr<BackendRun>> runs;
  auto start = [&](const std::string& name, const cowstate::SpillOptions& spill) {
    std::fprintf(stderr, "%s: %s, fill\n", variant.c_str(), name.c_str());
    runs.push_back(std::make_unique<BackendRun>(name, spill));
    return runs.back()->fill(w);
  };
  v.budget = start("heap", {}) / 3;
  std::fprintf(stderr, "%s: budget %llu bytes\n", variant.c_str(),
               static_cast<unsigned long long>(v.budget));
  if (o.runs("budget")) start("budget", budget_options(v.budget, dir));
  if (o.runs("cache")) {
    start("budget, cache " + fixed(o.cache_ratio, 2),
          budget_options(v.budget, dir, o.cache_ratio));
  }
  std::fprintf(stderr, "%s: streams, in turns\n", variant.c_str());
  const std::size_t n = w.stream.size();
  const std::size_t chunk = std::max<std::size_t>(1, (n + kStreamChunks - 1) / kStreamChunks);
  for (std::size_t c = 0; c * chunk < n; ++c) {
    const std::size_t begin = c * chunk;
    const std::size_t end = std::min(n, begin + chunk);
    for (std::size_t r = 0; r < runs.size(); ++r) {
      runs[(c + r) % runs.size()]->stream(w, begin, end);
    }
  }
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const bool budget_row = runs[r]->contender() == "budget";
    std::optional<CheckpointFigures> checkpoint;
    v.rows.push_back(runs[r]->finish(w, budget_row ? &checkpoint : nullptr, dir));
    if (budget_row) v.checkpoint = *checkpoint;
    runs[r].reset();  // its memory and LMDB environment go as soon as its row is done
  }
  if (o.runs("rocksdb")) {
    std::fprintf(stderr, "%s: rocksdb\n", variant.c_str());
    v.rows.push_back(run_rocksdb(w, v.budget, dir));
  }
  return v;
}

int run(const Options& o) {
  g_temp_dir = make_temp_dir();
  std::atexit(remove_temp_dir);
  std::printf(
      "word count under a memory budget: %llu keys, %llu records, zipf s = %.2f, seed 0x%llx, "
      "max parallelism %d, wall time\n\n",
      static_cast<unsigned long long>(o.keys), static_cast<unsigned long long>(o.records), o.zipf,
      static_cast<unsigned long long>(o.seed), kMaxParallelism);
  std::vector<VariantResult> results;
  for (const std::string& variant : o.variants) {
    results.push_back(run_variant(o, variant, g_temp_dir));
  }
  std::printf(
      "| variant | contender | fill s | records/s | vs heap | vs rocksdb | target | key groups "
      "spilled | records there | spills (fill) | spills | loads | cache hits |\n"
      "| --- | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: "
      "|\n");
  for (VariantResult& v : results) print_variant(v);
  bool met = true;
  if (o.runs("budget")) {
    std::printf(
        "\n| variant | budget MB | checkpoint MB | key groups spilled | write MB/s | restore MB/s "
        "| restored key groups spilled |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (const VariantResult& v : results) {
      const CheckpointFigures& c = v.checkpoint;
      std::printf("| %s | %.1f | %.1f | %llu/%d | %.0f | %.0f | %llu/%d |\n", v.variant.c_str(),
                  static_cast<double>(v.budget) / 1e6, c.mb,
                  static_cast<unsigned long long>(c.spilled_key_groups), kMaxParallelism,
                  c.write_mbs, c.restore_mbs,
                  static_cast<unsigned long long>(c.restored_spilled_key_groups), kMaxParallelism);
      met = met && v.met;
    }
  }
  std::printf("\ncounts checked: every contender's counters sum to its records\n");
  const char* verdict = !o.runs("budget") || !o.runs("rocksdb")
                            ? "not judged (budget and rocksdb must both run)"
                        : met ? "PASS"
                              : "MISS";
  std::printf("targets (budget >= 0.25x heap, >= 0.5x in tenants, >= 3x rocksdb): %s\n", verdict);
  remove_temp_dir();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_args(argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {  // ColdStoreError: LMDB failed under a state access
    die(e.what());
  }
}
