// Shared helpers of the backend, checkpoint and storage tests: a backend with one state of
// each kind, deterministic contents, an image of everything a backend holds, checkpoint
// writing in steps, and temporary directories.
#pragma once

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cowstate/checkpoint.h"
#include "cowstate/keyed_state_backend.h"
#include "cowstate/serializers.h"

namespace backend_test {

using cowstate::Int32Serializer;
using cowstate::Int64Serializer;
using cowstate::KeyGroupRange;
using cowstate::StringSerializer;
using cowstate::UInt64Serializer;
using cowstate::VectorInt64Serializer;
using cowstate::VoidNamespace;
using cowstate::VoidNamespaceSerializer;
using Bytes = std::vector<std::byte>;

using Backend = cowstate::KeyedStateBackend<UInt64Serializer>;
using Value = cowstate::ValueState<Backend, VoidNamespaceSerializer, Int64Serializer>;
using List = cowstate::ListState<Backend, Int32Serializer, Int64Serializer>;
using Map = cowstate::MapState<Backend, VoidNamespaceSerializer, StringSerializer, Int64Serializer>;
using Reducing = cowstate::ReducingState<Backend, Int32Serializer, Int64Serializer>;
// Average: the accumulator is {sum, count}.
using Average = cowstate::AggregatingState<Backend, Int32Serializer, VectorInt64Serializer,
                                           std::int64_t, std::int64_t>;

inline cowstate::AggregateFunction<std::int64_t, std::vector<std::int64_t>, std::int64_t>
average_function() {
  return {[] {
            return std::vector<std::int64_t>{0, 0};
          },
          [](const std::int64_t& in, std::vector<std::int64_t> acc) {
            acc[0] += in;
            acc[1] += 1;
            return acc;
          },
          [](const std::vector<std::int64_t>& acc) { return acc[1] == 0 ? 0 : acc[0] / acc[1]; },
          [](std::vector<std::int64_t> a, const std::vector<std::int64_t>& b) {
            a[0] += b[0];
            a[1] += b[1];
            return a;
          }};
}

// One state of each kind, registered in this order (or reversed, to test id mapping).
struct States {
  explicit States(Backend& b, bool reversed = false) {
    if (reversed) {
      average =
          &b.aggregating_state<Int32Serializer, VectorInt64Serializer, std::int64_t, std::int64_t>(
              "average", average_function());
      sum = &b.reducing_state<Int32Serializer, Int64Serializer>(
          "sum", [](const std::int64_t& x, const std::int64_t& y) { return x + y; });
      map = &b.map_state<VoidNamespaceSerializer, StringSerializer, Int64Serializer>("map");
      list = &b.list_state<Int32Serializer, Int64Serializer>("list");
      value = &b.value_state<VoidNamespaceSerializer, Int64Serializer>("value", -1);
    } else {
      value = &b.value_state<VoidNamespaceSerializer, Int64Serializer>("value", -1);
      list = &b.list_state<Int32Serializer, Int64Serializer>("list");
      map = &b.map_state<VoidNamespaceSerializer, StringSerializer, Int64Serializer>("map");
      sum = &b.reducing_state<Int32Serializer, Int64Serializer>(
          "sum", [](const std::int64_t& x, const std::int64_t& y) { return x + y; });
      average =
          &b.aggregating_state<Int32Serializer, VectorInt64Serializer, std::int64_t, std::int64_t>(
              "average", average_function());
    }
  }
  Value* value;
  List* list;
  Map* map;
  Reducing* sum;
  Average* average;
};

// Deterministic contents: keys 0..n-1 owned by the backend's range, each with states
// derived from (seed, key). Keys outside the range are skipped.
inline void populate(Backend& b, States& s, std::uint64_t n, std::uint64_t seed) {
  for (std::uint64_t k = 0; k < n; ++k) {
    if (!b.set_current_key(k).ok()) continue;
    const auto x = static_cast<std::int64_t>(k * 31 + seed);
    if ((k + seed) % 5 != 0) s.value->update(x);
    for (std::int32_t ns = 0; ns < static_cast<std::int32_t>((k + seed) % 3); ++ns) {
      s.list->set_current_namespace(ns);
      s.list->add(x + ns);
      s.list->add(x - ns);
    }
    if (k % 2 == 0) {
      s.map->put("a" + std::to_string(k % 7), x);
      s.map->put("b", static_cast<std::int64_t>(seed));
    }
    s.sum->set_current_namespace(static_cast<std::int32_t>(k % 2));
    s.sum->add(x);
    s.sum->add(1);
    if (k % 3 == 0) {
      s.average->set_current_namespace(7);
      s.average->add(x);
      s.average->add(x + 2);
    }
  }
}

// Everything one typed state table holds, by (key, namespace).
template <class Table>
auto table_image(Table& table) {
  std::map<std::pair<typename Table::K, typename Table::N>, typename Table::S> out;
  const KeyGroupRange r = table.range();
  for (std::int32_t g = r.start(); g <= r.end(); ++g) {
    table.map(g).for_each([&](const auto& k, const auto& ns, const auto& s) {
      out.emplace(std::make_pair(k, ns), s);
    });
  }
  return out;
}

// Everything one typed state holds, by (key, namespace).
template <class Handle>
auto image_of(Handle& h) {
  return table_image(h.table());
}

// Everything a backend holds, state by state.
struct Image {
  decltype(image_of(std::declval<Value&>())) value;
  decltype(image_of(std::declval<List&>())) list;
  decltype(image_of(std::declval<Map&>())) map;
  decltype(image_of(std::declval<Reducing&>())) sum;
  decltype(image_of(std::declval<Average&>())) average;
  friend bool operator==(const Image&, const Image&) = default;
  std::size_t entries() const {
    return value.size() + list.size() + map.size() + sum.size() + average.size();
  }
};

inline Image image(States& s) {
  return {image_of(*s.value), image_of(*s.list), image_of(*s.map), image_of(*s.sum),
          image_of(*s.average)};
}

// The part of `full` whose keys fall in `range`.
inline Image filter(const Image& full, KeyGroupRange range, std::int32_t max_parallelism = 128) {
  auto keep = [&](const auto& m) {
    std::remove_cvref_t<decltype(m)> out;
    for (const auto& [kn, s] : m) {
      const std::int32_t g = cowstate::key_group_for_hash(
          cowstate::KeyHash<std::uint64_t>{}(kn.first), max_parallelism);
      if (range.contains(g)) out.emplace(kn, s);
    }
    return out;
  };
  return {keep(full.value), keep(full.list), keep(full.map), keep(full.sum), keep(full.average)};
}

// Writes a checkpoint of `b` in steps of `step` entries.
inline Bytes write_checkpoint(Backend& b, std::uint64_t id, std::size_t step = 1000,
                              cowstate::Compression compression = cowstate::Compression::none) {
  cowstate::MemoryCheckpointSink sink;
  cowstate::CheckpointWriter w(b.snapshot(id), &sink, {compression, 1});
  while (!w.step(step)) {
  }
  REQUIRE(w.done());
  return sink.take();
}

// What a fresh backend of `range` holds after restoring `file` (which must restore).
inline Image restore_image(const Bytes& file, KeyGroupRange range = KeyGroupRange::all(128)) {
  Backend r(range);
  States rs(r);
  const cowstate::CheckpointInput in{"checkpoint", file};
  const cowstate::Status st = r.restore({&in, 1});
  INFO(st.message());
  REQUIRE(st.ok());
  REQUIRE(r.check_invariants());
  return image(rs);
}

// The names of the files in `dir`, sorted.
inline std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// A fresh directory under the system's temporary directory, removed on destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "cowstate-test-XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace backend_test
