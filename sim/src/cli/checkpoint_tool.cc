// `cowstate checkpoint inspect|verify PATH` (checkpoint_tool.h): the reports of
// cowstate/checkpoint_inspect.h as text or JSON.
#include "cli/checkpoint_tool.h"

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cowstate/checkpoint_inspect.h"
#include "cowstate/file_system.h"
#include "cowstate/serializers.h"
#include "cowstate/state_table.h"

namespace cowstate::cli {

namespace {

constexpr int kIntact = 0;
constexpr int kDamaged = 1;
constexpr int kBadInput = 2;

std::string serializer_text(std::uint16_t id) {
  return std::string(serializer_name(id)) + "(" + std::to_string(id) + ")";
}

nlohmann::json ttl_json(const StateTtlConfig& t) {
  nlohmann::json j{{"ttl_ms", t.ttl_ms},
                   {"update_type", t.update_type == StateTtlConfig::UpdateType::on_create_and_write
                                       ? "OnCreateAndWrite"
                                       : "OnReadAndWrite"},
                   {"visibility", t.visibility == StateTtlConfig::Visibility::never_return_expired
                                      ? "NeverReturnExpired"
                                      : "ReturnExpiredIfNotCleanedUp"},
                   {"full_snapshot_cleanup", t.full_snapshot_cleanup}};
  if (t.incremental_cleanup) {
    j["incremental_cleanup"] = {
        {"size", t.incremental_cleanup->cleanup_size},
        {"on_every_key_switch", t.incremental_cleanup->run_on_every_key_switch}};
  }
  return j;
}

nlohmann::json state_json(const StateMetaInfo& m, std::uint64_t offset) {
  nlohmann::json j{{"name", m.name},
                   {"kind", state_kind_name(m.kind)},
                   {"offset", offset},
                   {"namespace_serializer", m.namespace_serializer},
                   {"state_serializer", m.state_serializer},
                   {"element_serializer", m.element_serializer},
                   {"value_serializer", m.value_serializer}};
  if (m.ttl) j["ttl"] = ttl_json(*m.ttl);
  return j;
}

nlohmann::json block_json(const CheckpointBlockReport& b) {
  nlohmann::json sections = nlohmann::json::array();
  for (const CheckpointSectionReport& s : b.sections) {
    sections.push_back({{"state", s.state}, {"entries", s.entries}});
  }
  return {{"key_group", b.info.key_group},
          {"offset", b.info.offset},
          {"stored", b.info.stored},
          {"raw", b.info.raw},
          {"compression", compression_name(b.info.compression)},
          {"checksum", detail::hex64(b.info.checksum)},
          {"kind", block_kind_name(b.info.kind)},
          {"sections", sections}};
}

nlohmann::json damage_json(const std::optional<CheckpointDamage>& d) {
  if (!d) return nullptr;
  return {{"file", d->file},
          {"offset", d->offset ? nlohmann::json(*d->offset) : nlohmann::json(nullptr)},
          {"message", d->message}};
}

nlohmann::json file_json(const CheckpointFileReport& f) {
  nlohmann::json j{{"file", f.name}, {"size", f.size}, {"intact", f.intact()}};
  j["damage"] = damage_json(f.damage);
  if (!f.layout) return j;
  const CheckpointLayout& l = *f.layout;
  nlohmann::json states = nlohmann::json::array();
  for (std::size_t i = 0; i < l.header.states.size(); ++i) {
    states.push_back(state_json(l.header.states[i], l.state_offsets[i]));
  }
  j["header"] = {{"format_version", l.version},
                 {"checkpoint_id", l.header.checkpoint_id},
                 {"parent_checkpoint_id", l.header.parent_checkpoint_id},
                 {"max_parallelism", l.header.max_parallelism},
                 {"key_groups", {l.header.range.start(), l.header.range.end()}},
                 {"key_serializer", l.header.key_serializer},
                 {"header_size", l.header_size},
                 {"states", states}};
  nlohmann::json blocks = nlohmann::json::array();
  for (const CheckpointBlockReport& b : f.blocks) blocks.push_back(block_json(b));
  j["blocks"] = blocks;
  j["blocks_in_index"] = l.blocks.size();
  j["undecoded_states"] = f.undecoded;
  return j;
}

nlohmann::json directory_json(const CheckpointDirectoryReport& d) {
  nlohmann::json checkpoints = nlohmann::json::array();
  for (const StoredCheckpointReport& c : d.checkpoints) {
    nlohmann::json j{{"id", c.id}, {"complete", c.complete}, {"intact", c.intact()}};
    if (!c.complete) j["reason"] = c.reason;
    if (c.manifest) {
      j["manifest"] = {{"data_size", c.manifest->size},
                       {"data_checksum", detail::hex64(c.manifest->checksum)},
                       {"chain", c.manifest->chain}};
    }
    if (c.file) j["data"] = file_json(*c.file);
    j["damage"] = damage_json(c.damage);
    checkpoints.push_back(std::move(j));
  }
  return {{"directory", d.dir}, {"checkpoints", checkpoints}, {"other_files", d.other_files}};
}

// ---- text

void print_damage(const std::string& indent, const CheckpointDamage& d) {
  std::printf("%sDAMAGED: %s\n", indent.c_str(), d.message.c_str());
}

void print_states(const std::string& indent, const CheckpointLayout& l) {
  std::printf("%sstates (%zu):\n", indent.c_str(), l.header.states.size());
  for (std::size_t i = 0; i < l.header.states.size(); ++i) {
    const StateMetaInfo& m = l.header.states[i];
    std::printf("%s  %zu \"%s\" %s, namespace %s, state %s", indent.c_str(), i, m.name.c_str(),
                state_kind_name(m.kind), serializer_text(m.namespace_serializer).c_str(),
                serializer_text(m.state_serializer).c_str());
    if (m.element_serializer != 0) {
      std::printf(", %s %s", m.kind == StateKind::map ? "user key" : "element",
                  serializer_text(m.element_serializer).c_str());
    }
    if (m.value_serializer != 0) {
      std::printf(", user value %s", serializer_text(m.value_serializer).c_str());
    }
    if (m.ttl) std::printf(", TTL %s", ttl_json(*m.ttl).dump().c_str());
    std::printf("\n");
  }
}

void print_blocks(const std::string& indent, const CheckpointFileReport& f) {
  std::printf("%sblocks (%zu of %zu read):\n", indent.c_str(), f.blocks.size(),
              f.layout->blocks.size());
  std::printf("%s  %9s %10s %8s %8s %-5s %-18s %s\n", indent.c_str(), "key group", "offset",
              "stored", "raw", "comp", "checksum", "entries by state");
  for (const CheckpointBlockReport& b : f.blocks) {
    std::string entries;
    for (const CheckpointSectionReport& s : b.sections) {
      entries += (entries.empty() ? "" : ", ") + f.layout->header.states[s.state].name + " " +
                 std::to_string(s.entries);
    }
    if (b.info.kind != BlockKind::full) {  // a delta's records, or nothing stored
      entries = std::string(block_kind_name(b.info.kind)) + (entries.empty() ? "" : ": " + entries);
    }
    std::printf("%s  %9d %10llu %8llu %8llu %-5s %-18s %s\n", indent.c_str(), b.info.key_group,
                static_cast<unsigned long long>(b.info.offset),
                static_cast<unsigned long long>(b.info.stored),
                static_cast<unsigned long long>(b.info.raw), compression_name(b.info.compression),
                detail::hex64(b.info.checksum).c_str(), entries.empty() ? "-" : entries.c_str());
  }
}

void print_file(const std::string& indent, const CheckpointFileReport& f) {
  std::printf("%scheckpoint file %s: %llu bytes\n", indent.c_str(), f.name.c_str(),
              static_cast<unsigned long long>(f.size));
  if (f.layout) {
    const CheckpointHeader& h = f.layout->header;
    std::printf(
        "%s  checkpoint id %llu, max parallelism %d, key groups %d-%d, key %s, header %llu bytes\n",
        indent.c_str(), static_cast<unsigned long long>(h.checkpoint_id), h.max_parallelism,
        h.range.start(), h.range.end(), serializer_text(h.key_serializer).c_str(),
        static_cast<unsigned long long>(f.layout->header_size));
    if (h.parent_checkpoint_id != 0) {
      std::printf("%s  incremental (format %u): a delta of checkpoint %llu\n", indent.c_str(),
                  static_cast<unsigned>(f.layout->version),
                  static_cast<unsigned long long>(h.parent_checkpoint_id));
    }
    print_states(indent + "  ", *f.layout);
    print_blocks(indent + "  ", f);
    for (std::uint32_t s : f.undecoded) {
      std::printf(
          "%s  state %u has serializers that are not built in: its block checksums were verified, "
          "its entries not decoded\n",
          indent.c_str(), s);
    }
  }
  if (f.damage) {
    print_damage(indent + "  ", *f.damage);
  } else {
    std::printf("%s  intact: every checksum verified, every block decoded\n", indent.c_str());
  }
}

void print_directory(const CheckpointDirectoryReport& d, bool verbose) {
  std::size_t complete = 0;
  for (const StoredCheckpointReport& c : d.checkpoints) complete += c.complete ? 1 : 0;
  std::printf("checkpoint storage %s: %zu checkpoints (%zu complete, %zu damaged)\n", d.dir.c_str(),
              d.checkpoints.size(), complete, d.checkpoints.size() - complete);
  for (const StoredCheckpointReport& c : d.checkpoints) {
    std::printf("checkpoint %llu: %s\n", static_cast<unsigned long long>(c.id),
                c.intact()   ? "complete"
                : c.complete ? "complete per its manifest, but DAMAGED"
                             : "DAMAGED");
    if (!c.complete) std::printf("  the storage reports: %s\n", c.reason.c_str());
    if (c.manifest) {
      std::printf("  manifest: data file of %llu bytes, XXH3-64 %s\n",
                  static_cast<unsigned long long>(c.manifest->size),
                  detail::hex64(c.manifest->checksum).c_str());
      if (!c.manifest->chain.empty()) {
        std::string chain;
        for (const std::uint64_t m : c.manifest->chain) {
          chain += (chain.empty() ? "" : ", ") + std::to_string(m);
        }
        std::printf("  chain: %s (parent first)\n", chain.c_str());
      }
    }
    if (c.file && (verbose || c.file->damage)) print_file("  ", *c.file);
    if (c.damage && (!c.file || !c.file->damage)) print_damage("  ", *c.damage);
  }
  for (const std::string& name : d.other_files) {
    std::printf(
        "other file: %s (a temporary or orphan is removed by the next open of the storage)\n",
        name.c_str());
  }
}

int exit_of(bool intact) { return intact ? kIntact : kDamaged; }

int run_on_file(const CheckpointToolArgs& a) {
  Result<std::vector<std::byte>> bytes = posix_file_system().read_file(a.path);
  if (!bytes.ok()) {
    std::fprintf(stderr, "cowstate checkpoint: %s\n", bytes.status().message().c_str());
    return kBadInput;
  }
  const CheckpointFileReport f = inspect_checkpoint(a.path, *bytes);
  if (a.json) {
    std::cout << file_json(f).dump() << std::endl;
  } else if (a.verify_only) {
    if (f.damage) {
      print_damage("", *f.damage);
    } else {
      std::printf("%s: intact (%zu blocks verified)\n", a.path.c_str(), f.blocks.size());
    }
  } else {
    print_file("", f);
  }
  return exit_of(f.intact());
}

int run_on_directory(const CheckpointToolArgs& a) {
  Result<CheckpointDirectoryReport> d = inspect_checkpoint_directory(a.path, posix_file_system());
  if (!d.ok()) {
    std::fprintf(stderr, "cowstate checkpoint: %s\n", d.status().message().c_str());
    return kBadInput;
  }
  bool intact = true;
  for (const StoredCheckpointReport& c : d->checkpoints) intact = intact && c.intact();
  if (a.json) {
    std::cout << directory_json(*d).dump() << std::endl;
  } else {
    print_directory(*d, !a.verify_only);
    if (a.verify_only && intact) std::printf("%s: intact\n", d->dir.c_str());
  }
  return exit_of(intact);
}

}  // namespace

void add_checkpoint_tool(CLI::App& app, CheckpointToolArgs& a) {
  CLI::App* c = app.add_subcommand("checkpoint", "look inside checkpoint files and directories");
  c->require_subcommand(1);
  a.inspect = c->add_subcommand(
      "inspect", "print a checkpoint file's or storage directory's header, states and blocks");
  a.verify = c->add_subcommand(
      "verify", "exit 0 if intact, 1 naming the file and offset of the first damage");
  for (CLI::App* sub : {a.inspect, a.verify}) {
    sub->add_option("PATH", a.path, "a checkpoint file (.cscp) or a storage directory")->required();
    sub->add_flag("--json", a.json, "one JSON document instead of text");
  }
}

int run_checkpoint_tool(CheckpointToolArgs& a) {
  a.verify_only = a.verify->parsed();
  std::error_code ec;
  const auto status = std::filesystem::status(a.path, ec);
  if (std::filesystem::is_directory(status)) return run_on_directory(a);
  if (std::filesystem::is_regular_file(status)) return run_on_file(a);
  const std::string why = ec ? ec.message()
                          : status.type() == std::filesystem::file_type::not_found
                              ? "no such file or directory"
                              : "neither a regular file nor a directory";
  std::fprintf(stderr, "cowstate checkpoint: %s: %s\n", a.path.c_str(), why.c_str());
  return kBadInput;
}

}  // namespace cowstate::cli
