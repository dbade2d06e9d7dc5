// Crash test of checkpoint storage: a real child process writes checkpoints in a loop and
// the parent SIGKILLs it at seeded random moments. After every kill, every complete
// checkpoint (above all the latest) must restore exactly the contents the child derived
// from its id, and no partial checkpoint may be complete.
//
//   cowstate_crash_test [--kills N] [--seeds a,b,...] [--first-cycle-us U]
//       the parent: N kills spread over the seeds (one directory per seed); exit 0 iff
//       every check held
//   cowstate_crash_test child DIR FD IO
//       the child: continues after the latest complete checkpoint in DIR, forever; writes
//       one byte to FD once its storage is open and one after each commit, so the parent
//       places kills by the child's progress, not by wall time (which a loaded machine
//       stretches unpredictably); IO 1 writes the data files on an I/O thread
//       (StorageOptions::io_thread), as every other child does
//
// The contents of checkpoint `id` are a pure function of `id` (contents()), so the parent
// recomputes what the child recorded without talking to it. Kill delays come from a
// splitmix64 stream per seed, so a run is reproducible up to the child's own timing.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cowstate/checkpoint_storage.h"
#include "cowstate/keyed_state_backend.h"

namespace {

using Backend = cowstate::KeyedStateBackend<cowstate::UInt64Serializer>;
using Values = std::map<std::uint64_t, std::int64_t>;
using Lists = std::map<std::uint64_t, std::vector<std::int64_t>>;
using Maps = std::map<std::uint64_t, std::map<std::string, std::int64_t>>;

struct Contents {
  Values values;
  Lists lists;
  Maps maps;
  friend bool operator==(const Contents&, const Contents&) = default;
};

// What checkpoint `id` holds: a few hundred keys whose states depend on id.
Contents contents(std::uint64_t id) {
  Contents c;
  const std::uint64_t n = 100 + (id * 37) % 400;
  for (std::uint64_t k = 0; k < n; ++k) {
    c.values[k] = static_cast<std::int64_t>(id * 1000003 + k);
    if (k % 3 == 0) c.lists[k] = {static_cast<std::int64_t>(id), static_cast<std::int64_t>(k)};
    if (k % 5 == 0) c.maps[k] = {{"id", static_cast<std::int64_t>(id)}, {"k", 5}};
  }
  return c;
}

struct States {
  explicit States(Backend& b)
      : value(&b.value_state<cowstate::VoidNamespaceSerializer, cowstate::Int64Serializer>("v")),
        list(&b.list_state<cowstate::VoidNamespaceSerializer, cowstate::Int64Serializer>("l")),
        map(&b.map_state<cowstate::VoidNamespaceSerializer, cowstate::StringSerializer,
                         cowstate::Int64Serializer>("m")) {}
  cowstate::ValueState<Backend, cowstate::VoidNamespaceSerializer, cowstate::Int64Serializer>*
      value;
  cowstate::ListState<Backend, cowstate::VoidNamespaceSerializer, cowstate::Int64Serializer>* list;
  cowstate::MapState<Backend, cowstate::VoidNamespaceSerializer, cowstate::StringSerializer,
                     cowstate::Int64Serializer>* map;
};

Contents read_back(Backend& b, States& s) {
  Contents c;
  const cowstate::KeyGroupRange r = b.range();
  for (std::int32_t g = r.start(); g <= r.end(); ++g) {
    s.value->table().map(g).for_each([&](auto k, auto, auto v) { c.values[k] = v; });
    s.list->table().map(g).for_each([&](auto k, auto, const auto& v) { c.lists[k] = v; });
    s.map->table().map(g).for_each([&](auto k, auto, const auto& v) { c.maps[k] = v; });
  }
  return c;
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "crash test: %s\n", what.c_str());
  std::exit(1);
}

int run_child(const std::string& dir, int ready_fd, bool io_thread) {
  cowstate::StorageOptions options;
  options.io_thread = io_thread;
  auto storage = cowstate::CheckpointStorage::open(dir, cowstate::posix_file_system(), options);
  if (!storage.ok()) die("child: " + storage.status().message());
  auto latest = (*storage)->latest();
  if (!latest.ok()) die("child: " + latest.status().message());
  const char ready = 'r';
  if (::write(ready_fd, &ready, 1) != 1) die("child: cannot signal readiness");
  for (std::uint64_t id = latest->value_or(0) + 1;; ++id) {
    Backend b(cowstate::KeyGroupRange::all(128));
    States s(b);
    const Contents c = contents(id);
    for (const auto& [k, v] : c.values) {
      if (!b.set_current_key(k).ok()) die("child: key outside the range");
      s.value->update(v);
      if (auto it = c.lists.find(k); it != c.lists.end()) s.list->update(it->second);
      if (auto it = c.maps.find(k); it != c.maps.end()) s.map->put_all(it->second);
    }
    auto pending = (*storage)->begin(id);
    if (!pending.ok()) die("child: " + pending.status().message());
    const auto compression = id % 2 == 0 ? cowstate::Compression::lz4 : cowstate::Compression::none;
    cowstate::CheckpointWriter w(b.snapshot(id), pending->get(), {compression, 1});
    while (!w.step(128)) {
    }
    if (w.failed()) die("child: " + w.status().message());
    if (cowstate::Status st = (*pending)->commit(); !st.ok()) die("child: " + st.message());
    const char committed = 'c';
    if (::write(ready_fd, &committed, 1) != 1) die("child: cannot signal a commit");
  }
}

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

struct Totals {
  int kills = 0;
  int mid_write = 0;  // kills that left a temporary or an orphan behind
  std::uint64_t checkpoints = 0;
  std::uint64_t verified = 0;
};

// Checks the directory after a kill; returns the latest complete id.
std::uint64_t verify(const std::string& dir, std::uint64_t previous_latest, Totals& t) {
  bool leftovers = false;
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.insert(e.path().filename().string());
  }
  for (const std::string& n : names) {
    if (n.ends_with(".tmp")) leftovers = true;
    if (n.ends_with(".cscp") && names.count(n.substr(0, n.size() - 5) + ".manifest") == 0) {
      leftovers = true;
    }
  }
  t.mid_write += leftovers ? 1 : 0;
  auto storage = cowstate::CheckpointStorage::open(dir);
  if (!storage.ok()) die("open after kill: " + storage.status().message());
  auto ids = (*storage)->complete_checkpoints();
  if (!ids.ok()) die(ids.status().message());
  const std::uint64_t latest = ids->empty() ? 0 : ids->back();
  if (latest < previous_latest) {
    die("the latest complete checkpoint went back from " + std::to_string(previous_latest) +
        " to " + std::to_string(latest));
  }
  for (std::uint64_t id : *ids) {
    auto bytes = (*storage)->read(id);
    if (!bytes.ok()) die("complete checkpoint unreadable: " + bytes.status().message());
    Backend b(cowstate::KeyGroupRange::all(128));
    States s(b);
    const cowstate::CheckpointInput in{(*storage)->data_path(id), *bytes, id};
    if (cowstate::Status st = b.restore({&in, 1}); !st.ok()) {
      die("complete checkpoint does not restore: " + st.message());
    }
    if (read_back(b, s) != contents(id)) {
      die("checkpoint " + std::to_string(id) + " restored other contents than the child wrote");
    }
    ++t.verified;
  }
  return latest;
}

std::vector<std::uint64_t> parse_list(const std::string& s) {
  std::vector<std::uint64_t> out;
  std::size_t from = 0;
  while (from <= s.size()) {
    const std::size_t comma = std::min(s.find(',', from), s.size());
    const std::string token = s.substr(from, comma - from);
    if (token.empty() || token.find_first_not_of("0123456789") != std::string::npos) {
      die("bad seed list: " + s);
    }
    out.push_back(std::stoull(token));
    from = comma + 1;
  }
  return out;
}

int run_parent(int kills, const std::vector<std::uint64_t>& seeds, std::uint64_t first_cycle_us) {
  const auto start = std::chrono::steady_clock::now();
  Totals t;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  for (std::size_t si = 0; si < seeds.size(); ++si) {
    const std::uint64_t seed = seeds[si];
    std::string tmpl = (std::filesystem::temp_directory_path() / "cowstate-crash-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) die("mkdtemp failed");
    const std::string dir = tmpl;
    std::uint64_t rng = seed;
    std::uint64_t latest = 0;
    std::uint64_t cycle_us = first_cycle_us;  // a checkpoint's duration, measured as we go
    const int per_seed = kills / static_cast<int>(seeds.size()) +
                         (static_cast<int>(si) < kills % static_cast<int>(seeds.size()) ? 1 : 0);
    for (int k = 0; k < per_seed; ++k) {
      int ready[2];
      if (::pipe(ready) != 0) die("pipe failed");
      const pid_t pid = ::fork();
      if (pid < 0) die("fork failed");
      if (pid == 0) {
        ::close(ready[0]);
        const std::string fd = std::to_string(ready[1]);
        const char* io = k % 2 == 0 ? "0" : "1";
        ::execl(self.c_str(), self.c_str(), "child", dir.c_str(), fd.c_str(), io,
                static_cast<char*>(nullptr));
        std::_Exit(127);
      }
      ::close(ready[1]);
      // One kill in eight lands at once (start-up, cleanup of what the last kill left). The
      // others wait for 0 or 1 commit, then a random part of a checkpoint's duration (as
      // measured so far), so they land anywhere in the write-fsync-rename-manifest cycle.
      const std::uint64_t r = splitmix64(rng);
      if (r % 8 == 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(r % 2000));
      } else {
        char byte = 0;
        if (::read(ready[0], &byte, 1) != 1) die("the child died before it was ready");
        const std::uint64_t commits = (r >> 8) % 2;
        auto last = std::chrono::steady_clock::now();
        for (std::uint64_t c = 0; c < commits; ++c) {
          if (::read(ready[0], &byte, 1) != 1) die("the child died while writing checkpoints");
          const auto now = std::chrono::steady_clock::now();
          const auto us = std::chrono::duration_cast<std::chrono::microseconds>(now - last);
          cycle_us = (cycle_us * 3 + static_cast<std::uint64_t>(us.count())) / 4;
          last = now;
        }
        std::this_thread::sleep_for(
            std::chrono::microseconds((r >> 16) % (cycle_us + cycle_us / 4 + 1)));
      }
      ::close(ready[0]);
      ::kill(pid, SIGKILL);
      int status = 0;
      ::waitpid(pid, &status, 0);
      if (WIFEXITED(status)) {
        die("the child exited by itself with status " + std::to_string(WEXITSTATUS(status)) +
            " (seed " + std::to_string(seed) + ")");
      }
      ++t.kills;
      latest = verify(dir, latest, t);
    }
    t.checkpoints += latest;
    std::filesystem::remove_all(dir);
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "crash test: %d kills over %zu seeds in %.1f s; %llu checkpoints completed, %llu "
      "complete checkpoints verified after kills, %d kills left a partial checkpoint behind\n",
      t.kills, seeds.size(), secs, static_cast<unsigned long long>(t.checkpoints),
      static_cast<unsigned long long>(t.verified), t.mid_write);
  if (t.checkpoints < static_cast<std::uint64_t>(t.kills) / 10) {
    die("too few checkpoints completed for the kills to mean anything");
  }
  if (t.mid_write == 0) die("no kill landed in the middle of a checkpoint");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::strcmp(argv[1], "child") == 0)
    return run_child(argv[2], std::atoi(argv[3]), std::strcmp(argv[4], "1") == 0);
  int kills = 200;
  std::vector<std::uint64_t> seeds = {1, 2, 3, 4};
  std::uint64_t first_cycle_us = 5000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--kills") {
      kills = std::atoi(argv[i + 1]);
    } else if (flag == "--seeds") {
      seeds = parse_list(argv[i + 1]);
    } else if (flag == "--first-cycle-us") {
      first_cycle_us = std::strtoull(argv[i + 1], nullptr, 10);
    } else {
      die("unknown flag " + flag);
    }
  }
  if (kills < 1 || seeds.empty() || first_cycle_us < 1) die("bad arguments");
  return run_parent(kills, seeds, first_cycle_us);
}
