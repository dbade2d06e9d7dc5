// cowstate_checkpoint_bench: checkpoint write and restore throughput of a keyed backend at
// 1e6 entries, against a buffered 16-byte-record write of the same byte count.
//
//   write    sync phase (a map snapshot per key group) + async phase (CheckpointWriter in
//            steps of 64Ki entries) into a file in --dir (page cache: no fsync), closed
//   restore  read of that file + KeyedStateBackend::restore into a fresh backend (every
//            checksum verified, every key's key group checked)
//   baseline fwrite of 16-byte records (a 1 MiB stdio buffer) of the checkpoint's size,
//            fclose included
//   write, I/O thread
//            the same write with the file's appends on a thread of their own
//            (make_async_writable_file, three 1 MiB buffers kept from one checkpoint to the
//            next in an AsyncBufferPool, as CheckpointStorage does): elapsed (wall) time,
//            since that thread's CPU time is not the caller's; and, as "I/O thread CPU",
//            the process's CPU time for it (both threads), what the overlap costs in all
// Incremental checkpoints (a second table; u64 -> int64, uncompressed, into memory, so that
// serialization alone is timed): a backend writing incremental checkpoints
// (KeyedStateBackend::enable_incremental_checkpoints) and a plain one receive the same
// updates; after each round of updates both write a checkpoint, the plain one in full.
//   1% / 100% updated
//            bytes and time (sync + async phase) of the incremental checkpoint after that
//            share of the keys was updated, as a share of the full one's. Targets: at 1%
//            <= 3% of the bytes and <= 5% of the time; at 100% <= 110% of the time.
//   restore, full + 10 deltas
//            restore of an incremental checkpoint whose chain is a full checkpoint and 10
//            deltas of 1% each, against the restore of the full checkpoint of the same
//            state. Target: <= 1.5x.
// MB/s = checkpoint bytes / time (1 MB = 1e6 bytes). Each figure is the median of --reps
// samples; time is the thread's CPU time (user + system: the write(2) and read(2) copies
// count), so other load on a shared machine does not count; --wall uses the monotonic
// clock instead. Cases: u64 -> int64 and u64 -> 32-byte string value states (VoidNamespace),
// uncompressed, LZ4 and zstd (level 1). Targets (uncompressed): write >= 1000 MB/s (by
// either write column), restore >= 500 MB/s. A benchmark, never a test: it exits non-zero
// only when a restore does not give back what was written.
#include <malloc.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cowstate/checkpoint.h"
#include "cowstate/checkpoint_storage.h"
#include "cowstate/keyed_state_backend.h"

namespace {

using Backend = cowstate::KeyedStateBackend<cowstate::UInt64Serializer>;

bool g_wall = false;

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double cpu_seconds(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double now_seconds() { return g_wall ? wall_seconds() : cpu_seconds(CLOCK_THREAD_CPUTIME_ID); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::uint64_t splitmix64(std::uint64_t& s) {
  std::uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "cowstate_checkpoint_bench: %s\n", what.c_str());
  std::exit(1);
}

// A checkpoint sink into a plain file (no fsync: the page cache is what is measured).
// With io_thread, through make_async_writable_file.
class FileSink final : public cowstate::CheckpointSink {
 public:
  FileSink(const std::string& path, bool io_thread) {
    auto f = cowstate::posix_file_system().create_file(path);
    if (!f.ok()) die(f.status().message());
    file_ = std::move(*f);
    // Buffers kept from one checkpoint to the next, as CheckpointStorage keeps them.
    static cowstate::AsyncBufferPool pool;
    if (io_thread) file_ = cowstate::make_async_writable_file(std::move(file_), {.pool = &pool});
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

struct Row {
  std::string name;
  double mb = 0;
  double write_mbs = 0;
  double io_thread_mbs = 0;      // wall
  double io_thread_cpu_mbs = 0;  // process CPU
  double restore_mbs = 0;
};

// One case: a value state of serializer VS holding `n` entries made by make(i).
template <class VS, class Make>
Row run_case(const char* name, std::uint64_t n, cowstate::Compression c, const std::string& dir,
             int reps, Make make) {
  using V = typename VS::value_type;
  Backend b(cowstate::KeyGroupRange::all(128));
  auto& state = b.value_state<cowstate::VoidNamespaceSerializer, VS>("s");
  std::uint64_t rng = 42;
  std::vector<std::uint64_t> keys(n);
  for (std::uint64_t i = 0; i < n; ++i) {
    keys[i] = splitmix64(rng);
    if (!b.set_current_key(keys[i]).ok()) die("key outside the range");
    state.update(make(i));
  }
  const std::string path = dir + "/cowstate-bench.cscp";
  std::vector<double> writes;
  std::vector<double> io_thread_walls;
  std::vector<double> io_thread_cpus;
  std::vector<double> restores;
  std::size_t bytes = 0;
  std::uint64_t id = 0;
  // One checkpoint to a new file: the previous one is removed untimed (truncating it inside
  // the timed part would charge this write with freeing its pages).
  auto write = [&](bool io_thread) {
    std::remove(path.c_str());
    FileSink sink(path, io_thread);
    cowstate::CheckpointWriter w(b.snapshot(++id), &sink, {c, 1});
    while (!w.step(std::size_t{1} << 16)) {
    }
    if (!w.done()) die(w.status().message());
    sink.close();
    bytes = w.bytes_written();
  };
  for (int r = 0; r < reps + 1; ++r) {  // the first round warms up and is not counted
    const double w0 = wall_seconds();
    const double c0 = cpu_seconds(CLOCK_PROCESS_CPUTIME_ID);
    write(true);
    const double w1 = wall_seconds();
    const double c1 = cpu_seconds(CLOCK_PROCESS_CPUTIME_ID);
    const double t0 = now_seconds();
    write(false);
    const double t1 = now_seconds();
    if (r > 0) {
      io_thread_walls.push_back(w1 - w0);
      io_thread_cpus.push_back(c1 - c0);
    }
    Backend restored(cowstate::KeyGroupRange::all(128));
    auto& rs = restored.value_state<cowstate::VoidNamespaceSerializer, VS>("s");
    const double t2 = now_seconds();
    {
      auto file = cowstate::posix_file_system().read_file(path);
      if (!file.ok()) die(file.status().message());
      const cowstate::CheckpointInput in{path, *file};
      if (cowstate::Status st = restored.restore({&in, 1}); !st.ok()) die(st.message());
    }
    const double t3 = now_seconds();
    if (rs.table().size() != n) die("restore lost entries");
    for (std::uint64_t i = 0; i < n; i += 9973) {  // spot checks
      if (!restored.set_current_key(keys[i]).ok() || rs.value() != V(make(i))) {
        die("restore gave back another value");
      }
    }
    if (r > 0) {
      writes.push_back(t1 - t0);
      restores.push_back(t3 - t2);
    }
  }
  std::remove(path.c_str());
  const double mb = static_cast<double>(bytes) / 1e6;
  return {std::string(name) + ", " + cowstate::compression_name(c),
          mb,
          mb / median(writes),
          mb / median(io_thread_walls),
          mb / median(io_thread_cpus),
          mb / median(restores)};
}

// Writes checkpoint `id` of `b` into memory; adds its thread time to *seconds.
std::vector<std::byte> checkpoint_into_memory(Backend& b, std::uint64_t id, double* seconds) {
  cowstate::MemoryCheckpointSink sink;
  const double t0 = now_seconds();
  cowstate::CheckpointWriter w(b.snapshot(id), &sink);
  while (!w.step(std::size_t{1} << 16)) {
  }
  const double t1 = now_seconds();
  if (!w.done()) die(w.status().message());
  *seconds += t1 - t0;
  return sink.take();
}

struct IncrementalRows {
  double bytes_1 = 0, time_1 = 0;      // shares of the full checkpoint's, at 1% updated
  double bytes_100 = 0, time_100 = 0;  // at 100% updated
  double restore_ratio = 0;            // full + 10 deltas / full
  double full_mb = 0, delta_mb = 0;
};

IncrementalRows run_incremental(std::uint64_t n, int reps) {
  using State = cowstate::ValueState<Backend, cowstate::VoidNamespaceSerializer,
                                     cowstate::Int64Serializer>;
  const auto all = cowstate::KeyGroupRange::all(128);
  Backend inc(all);
  inc.enable_incremental_checkpoints({.full_every = 1000});
  Backend plain(all);
  State& si = inc.value_state<cowstate::VoidNamespaceSerializer, cowstate::Int64Serializer>("s");
  State& sp = plain.value_state<cowstate::VoidNamespaceSerializer, cowstate::Int64Serializer>("s");
  std::uint64_t rng = 42;
  std::vector<std::uint64_t> keys(n);
  auto update = [&](std::uint64_t i, std::int64_t v) {
    if (!inc.set_current_key(keys[i]).ok() || !plain.set_current_key(keys[i]).ok()) {
      die("key outside the range");
    }
    si.update(v);
    sp.update(v);
  };
  for (std::uint64_t i = 0; i < n; ++i) {
    keys[i] = splitmix64(rng);
    update(i, static_cast<std::int64_t>(i));
  }
  std::uint64_t id = 0;
  auto round = [&](std::uint64_t share_pct, double* inc_s, double* full_s, std::size_t* inc_b,
                   std::size_t* full_b) {
    for (std::uint64_t j = 0; j < n * share_pct / 100; ++j) {
      const std::uint64_t i = share_pct == 100 ? j : splitmix64(rng) % n;
      update(i, static_cast<std::int64_t>(splitmix64(rng) >> 1));
    }
    ++id;
    std::vector<std::byte> c = checkpoint_into_memory(inc, id, inc_s);
    inc.notify_checkpoint_complete(id, c.size());
    *inc_b = c.size();
    *full_b = checkpoint_into_memory(plain, id, full_s).size();
    return c;
  };
  double ignore = 0;
  std::size_t b0 = 0;
  std::size_t b1 = 0;
  std::vector<std::vector<std::byte>> chain{round(0, &ignore, &ignore, &b0, &b1)};  // full
  IncrementalRows out;
  std::vector<double> bytes_shares;
  std::vector<double> time_shares;
  std::vector<std::byte> full_now;
  for (int r = 0; r < 10; ++r) {  // the 10 deltas of the chain
    double ti = 0;
    double tf = 0;
    std::size_t bi = 0;
    std::size_t bf = 0;
    chain.push_back(round(1, &ti, &tf, &bi, &bf));
    bytes_shares.push_back(static_cast<double>(bi) / static_cast<double>(bf));
    time_shares.push_back(ti / tf);
    out.full_mb = static_cast<double>(bf) / 1e6;
    out.delta_mb = static_cast<double>(bi) / 1e6;
  }
  out.bytes_1 = median(bytes_shares);
  out.time_1 = median(time_shares);
  {
    double ignore_t = 0;
    full_now = checkpoint_into_memory(plain, id + 1000, &ignore_t);
  }
  // Restore: the chain (newest first) against the full checkpoint of the same state.
  std::vector<cowstate::CheckpointInput> members;
  for (std::size_t i = chain.size() - 1; i-- > 0;) {
    members.push_back({"c" + std::to_string(i + 1), chain[i]});
  }
  const cowstate::CheckpointInput head{"head", chain.back(), 0, members};
  const cowstate::CheckpointInput full{"full", full_now};
  std::vector<double> ratios;
  for (int r = 0; r < reps + 1; ++r) {
    Backend a(all);
    auto& sa = a.value_state<cowstate::VoidNamespaceSerializer, cowstate::Int64Serializer>("s");
    Backend f(all);
    auto& sf = f.value_state<cowstate::VoidNamespaceSerializer, cowstate::Int64Serializer>("s");
    const double t0 = now_seconds();
    if (cowstate::Status st = a.restore({&head, 1}); !st.ok()) die(st.message());
    const double t1 = now_seconds();
    if (cowstate::Status st = f.restore({&full, 1}); !st.ok()) die(st.message());
    const double t2 = now_seconds();
    if (sa.table().size() != n || sf.table().size() != n) die("restore lost entries");
    for (std::uint64_t i = 0; i < n; i += 997) {
      if (!a.set_current_key(keys[i]).ok() || !f.set_current_key(keys[i]).ok() ||
          !inc.set_current_key(keys[i]).ok() || sa.value() != sf.value() ||
          sa.value() != si.value()) {
        die("the chain restored another value than the full checkpoint");
      }
    }
    if (r > 0) ratios.push_back((t1 - t0) / (t2 - t1));
  }
  out.restore_ratio = median(ratios);
  std::vector<double> shares_100;
  std::vector<double> bytes_100;
  for (int r = 0; r < reps; ++r) {
    double ti = 0;
    double tf = 0;
    std::size_t bi = 0;
    std::size_t bf = 0;
    round(100, &ti, &tf, &bi, &bf);
    shares_100.push_back(ti / tf);
    bytes_100.push_back(static_cast<double>(bi) / static_cast<double>(bf));
  }
  out.time_100 = median(shares_100);
  out.bytes_100 = median(bytes_100);
  return out;
}

// Buffered 16-byte records, the same byte count.
double baseline_mbs(std::size_t bytes, const std::string& dir, int reps) {
  const std::string path = dir + "/cowstate-bench-baseline.bin";
  std::vector<double> times;
  std::vector<char> buffer(1 << 20);
  for (int r = 0; r < reps + 1; ++r) {
    std::remove(path.c_str());  // a new file, as for the checkpoint
    const double t0 = now_seconds();
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) die("cannot create " + path);
    std::setvbuf(f, buffer.data(), _IOFBF, buffer.size());
    std::uint64_t record[2] = {0, 0};
    for (std::size_t i = 0; i < bytes / 16; ++i) {
      record[0] = i;
      record[1] = i * 3;
      if (std::fwrite(record, 16, 1, f) != 1) die("fwrite failed");
    }
    if (std::fclose(f) != 0) die("fclose failed");
    if (r > 0) times.push_back(now_seconds() - t0);
  }
  std::remove(path.c_str());
  return static_cast<double>(bytes) / 1e6 / median(times);
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t n = 1000000;
  int reps = 5;
  std::string dir = "/dev/shm";
  std::string only;  // "": both value types and the incremental table
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--entries" && i + 1 < argc) {
      n = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (a == "--dir" && i + 1 < argc) {
      dir = argv[++i];
    } else if (a == "--wall") {
      g_wall = true;
    } else if (a == "--only" && i + 1 < argc) {
      only = argv[++i];
      if (only != "int64" && only != "string" && only != "incremental") {
        die("--only takes int64, string or incremental");
      }
    } else if (a == "--quick") {
      n = 100000;
      reps = 1;
    } else {
      std::fprintf(stderr,
                   "usage: cowstate_checkpoint_bench [--entries N] [--reps N] [--dir DIR] "
                   "[--only int64|string|incremental] [--wall] [--quick]\n");
      return 2;
    }
  }
  if (reps < 1 || n < 1) die("bad arguments");
  // Keep freed memory, as a long-running process's heap does (as cowstate_bench does):
  // otherwise every restore would fault in again the pages the previous backend returned,
  // which times the kernel's page-fault path rather than the restore.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  std::printf("checkpoint write/restore, %llu entries, median of %d, %s time, files in %s\n\n",
              static_cast<unsigned long long>(n), reps, g_wall ? "wall" : "thread CPU",
              dir.c_str());
  std::printf(
      "| case | MB | write MB/s | write, I/O thread MB/s (wall) | I/O thread CPU MB/s | "
      "restore MB/s | baseline MB/s |\n");
  std::printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  std::vector<Row> rows;
  for (auto c :
       {cowstate::Compression::none, cowstate::Compression::lz4, cowstate::Compression::zstd}) {
    if (only == "incremental") break;
    if (only != "string") {
      rows.push_back(run_case<cowstate::Int64Serializer>(
          "u64 -> int64", n, c, dir, reps,
          [](std::uint64_t i) { return static_cast<std::int64_t>(i * 7); }));
    }
    if (only == "int64") continue;
    rows.push_back(run_case<cowstate::StringSerializer>(
        "u64 -> string(32)", n, c, dir, reps, [](std::uint64_t i) {
          std::string s(32, 'a');
          std::memcpy(s.data(), &i, sizeof i);  // distinct, partly compressible
          return s;
        }));
  }
  bool met = true;
  bool map_met = true;  // the map-performance targets, judged only where their rows ran
  for (const Row& r : rows) {
    const double base = baseline_mbs(static_cast<std::size_t>(r.mb * 1e6), dir, reps);
    std::printf("| %s | %.1f | %.0f | %.0f | %.0f | %.0f | %.0f |\n", r.name.c_str(), r.mb,
                r.write_mbs, r.io_thread_mbs, r.io_thread_cpu_mbs, r.restore_mbs, base);
    if (r.name.ends_with(", none")) {
      met = met && std::max(r.write_mbs, r.io_thread_mbs) >= 1000 && r.restore_mbs >= 500;
      map_met = map_met && r.write_mbs >= 1000 && r.restore_mbs >= 1500;
    }
    if (r.name.ends_with(", lz4")) map_met = map_met && r.write_mbs >= 500;
  }
  std::printf(
      "\ntargets (uncompressed): write >= 1000 MB/s (either write column), restore >= 500 MB/s: "
      "%s\n",
      met ? "PASS" : "MISS");
  std::printf(
      "targets (map performance): write >= 1000 MB/s uncompressed and >= 500 MB/s with lz4 "
      "(write column), restore >= 1500 MB/s uncompressed: %s\n",
      map_met ? "PASS" : "MISS");

  const IncrementalRows inc = run_incremental(n, reps);
  std::printf("\nincremental checkpoints, u64 -> int64, %llu entries, uncompressed, into memory\n\n",
              static_cast<unsigned long long>(n));
  std::printf("| case | incremental / full | target |\n| --- | ---: | ---: |\n");
  std::printf("| 1%% updated: bytes (%.2f MB / %.2f MB) | %.2f%% | <= 3%% |\n", inc.delta_mb,
              inc.full_mb, 100 * inc.bytes_1);
  std::printf("| 1%% updated: time | %.2f%% | <= 5%% |\n", 100 * inc.time_1);
  std::printf("| 100%% updated: bytes | %.1f%% | |\n", 100 * inc.bytes_100);
  std::printf("| 100%% updated: time | %.1f%% | <= 110%% |\n", 100 * inc.time_100);
  std::printf("| restore, full + 10 deltas | %.2fx | <= 1.5x |\n", inc.restore_ratio);
  const bool inc_met = inc.bytes_1 <= 0.03 && inc.time_1 <= 0.05 && inc.time_100 <= 1.10 &&
                       inc.restore_ratio <= 1.5;
  std::printf("\ntargets (incremental): %s\n", inc_met ? "PASS" : "MISS");
  return 0;
}
