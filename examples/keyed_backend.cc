// A keyed state backend with a value state and a list state, a checkpoint written in bounded
// steps (as an async snapshot thread would) into checkpoint storage on disk, and a restore of
// it into two backends that split the key groups between them (scaling out from one parallel
// instance to two).
//
// usage: keyed_backend [DIR]   (default: a fresh directory under the system's temporary one)
// Exits 0 when both halves together hold exactly what was checkpointed.
#include <cowstate/checkpoint.h>
#include <cowstate/checkpoint_storage.h>
#include <cowstate/keyed_state_backend.h>
#include <cowstate/serializers.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

using Backend = cowstate::KeyedStateBackend<cowstate::UInt64Serializer>;

// Registers the two states: clicks per user (a value) and the pages a user visited (a list).
struct States {
  explicit States(Backend& b)
      : clicks(b.value_state<cowstate::VoidNamespaceSerializer, cowstate::Int64Serializer>("clicks",
                                                                                           0)),
        pages(b.list_state<cowstate::VoidNamespaceSerializer, cowstate::Int64Serializer>("pages")) {
  }
  cowstate::ValueState<Backend, cowstate::VoidNamespaceSerializer, cowstate::Int64Serializer>&
      clicks;
  cowstate::ListState<Backend, cowstate::VoidNamespaceSerializer, cowstate::Int64Serializer>& pages;
};

int fail(const std::string& what) {
  std::fprintf(stderr, "keyed_backend: %s\n", what.c_str());
  return 1;
}

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1]
                                   : (std::filesystem::temp_directory_path() /
                                      ("cowstate-example-" + std::to_string(std::rand())))
                                         .string();
  constexpr std::uint64_t kUsers = 100;
  const cowstate::KeyGroupRange all(0, 127);

  // One instance owns every key group: each record switches the current key, then updates.
  Backend backend(all);
  States s(backend);
  for (std::uint64_t user = 0; user < kUsers; ++user) {
    if (!backend.set_current_key(user).ok()) return fail("set_current_key");
    s.clicks.update(static_cast<std::int64_t>(user % 7));
    s.pages.add(static_cast<std::int64_t>(user * 10));
    s.pages.add(static_cast<std::int64_t>(user * 10 + 1));
  }

  // Checkpoint 1: the sync phase takes map snapshots; the writer goes on while the async phase
  // writes the file in bounded steps; commit publishes it (fsync, rename, manifest).
  auto storage = cowstate::CheckpointStorage::open(dir);
  if (!storage.ok()) return fail(storage.status().message());
  auto pending = (*storage)->begin(1);
  if (!pending.ok()) return fail(pending.status().message());
  cowstate::CheckpointWriter writer(backend.snapshot(1), pending->get());
  if (!backend.set_current_key(0).ok()) return fail("set_current_key");
  s.clicks.update(1000);  // after the sync phase: not in checkpoint 1
  while (!writer.step(64)) {
  }
  if (writer.failed()) return fail(writer.status().message());
  if (auto st = (*pending)->commit(); !st.ok()) return fail(st.message());

  // Scale out: two instances, each restoring only its half of the key groups.
  auto latest = (*storage)->latest();
  if (!latest.ok() || !*latest) return fail("no complete checkpoint");
  auto bytes = (*storage)->read(**latest);
  if (!bytes.ok()) return fail(bytes.status().message());
  const cowstate::CheckpointInput input{"checkpoint 1", *bytes, **latest};
  std::uint64_t found = 0;
  for (const cowstate::KeyGroupRange half :
       {cowstate::KeyGroupRange(0, 63), cowstate::KeyGroupRange(64, 127)}) {
    Backend part(half);
    States p(part);
    if (auto st = part.restore({&input, 1}); !st.ok()) return fail(st.message());
    for (std::uint64_t user = 0; user < kUsers; ++user) {
      if (!half.contains(part.key_group_of(user))) continue;
      if (!part.set_current_key(user).ok()) return fail("set_current_key");
      const auto want_clicks = static_cast<std::int64_t>(user % 7);
      const std::vector<std::int64_t> want_pages{static_cast<std::int64_t>(user * 10),
                                                 static_cast<std::int64_t>(user * 10 + 1)};
      if (p.clicks.value() != want_clicks || p.pages.get() != want_pages) {
        return fail("user " + std::to_string(user) + " restored wrong");
      }
      ++found;
    }
    std::printf("key groups %d-%d: restored\n", half.start(), half.end());
  }
  std::filesystem::remove_all(dir);
  if (found != kUsers) return fail("restored " + std::to_string(found) + " users, not all");
  std::printf("%llu users checkpointed and restored into two halves\n",
              static_cast<unsigned long long>(found));
  return 0;
}
