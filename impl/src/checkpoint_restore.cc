// Restoring state tables from checkpoint files: each file's states matched to the
// backend's by name, its key groups of the target range read into fresh tables, and the
// backend's tables replaced only once every file has been read. See cowstate/checkpoint.h.
#include <algorithm>
#include <string>
#include <utility>

#include "checkpoint_internal.h"
#include "cowstate/checkpoint.h"
#include "cowstate/hooks.h"

namespace cowstate {

namespace {

using checkpoint_detail::BlockScratch;

Status map_states(const CheckpointInput& input, const CheckpointLayout& layout,
                  const std::vector<std::unique_ptr<StateTableBase>>& tables,
                  std::vector<std::size_t>& table_of_state) {
  const auto& states = layout.header.states;
  table_of_state.assign(states.size(), 0);
  for (std::size_t i = 0; i < states.size(); ++i) {
    const StateMetaInfo& s = states[i];
    const std::string where = input.name + ": offset " + std::to_string(layout.state_offsets[i]) +
                              ": state \"" + s.name + "\"";
    auto it = std::find_if(tables.begin(), tables.end(),
                           [&s](const auto& t) { return t->meta().name == s.name; });
    if (it == tables.end()) {
      return Status::error(where + " (" + state_kind_name(s.kind) +
                           ") is in the checkpoint but not registered in this backend: register "
                           "it before restoring");
    }
    const StateMetaInfo& m = (*it)->meta();
    auto ids = [](const StateMetaInfo& x) {
      return std::string(state_kind_name(x.kind)) + " state, namespace " +
             serializer_name(x.namespace_serializer) + ", state " +
             serializer_name(x.state_serializer) +
             (x.element_serializer != 0
                  ? std::string(", element ") + serializer_name(x.element_serializer)
                  : std::string()) +
             (x.value_serializer != 0
                  ? std::string(", value ") + serializer_name(x.value_serializer)
                  : std::string()) +
             (x.ttl ? ", with TTL" : "");
    };
    if (m.kind != s.kind || m.namespace_serializer != s.namespace_serializer ||
        m.state_serializer != s.state_serializer || m.element_serializer != s.element_serializer ||
        m.value_serializer != s.value_serializer || m.ttl.has_value() != s.ttl.has_value()) {
      return Status::error(where + ": expected " + ids(m) + " (as registered), found " + ids(s) +
                           ": the checkpoint's state is incompatible");
    }
    table_of_state[i] = static_cast<std::size_t>(it - tables.begin());
  }
  return Status();
}

// The smallest range holding `range` and the range of every input that reads (planted bug
// restore_keeps_out_of_range only).
KeyGroupRange hull_with_inputs(KeyGroupRange range, std::span<const CheckpointInput> inputs,
                               const RestoreOptions& options) {
  for (const CheckpointInput& input : inputs) {
    Result<CheckpointLayout> layout = read_checkpoint_layout(input, options);
    if (!layout.ok() || layout->header.range.empty()) continue;
    const KeyGroupRange r = layout->header.range;
    range = range.empty()
                ? r
                : KeyGroupRange(std::min(range.start(), r.start()), std::max(range.end(), r.end()));
  }
  return range;
}

// The checkpoint fits this backend: the same max parallelism and key serializer.
Status check_compatible(const CheckpointInput& input, const CheckpointHeader& h,
                        std::int32_t max_parallelism, std::uint16_t key_serializer) {
  if (h.max_parallelism != max_parallelism) {
    return Status::error(input.name + ": offset 20: expected max parallelism " +
                         std::to_string(max_parallelism) + " (this backend's), found " +
                         std::to_string(h.max_parallelism) +
                         ": a checkpoint restores only at the max parallelism it was written "
                         "with");
  }
  if (h.key_serializer != key_serializer) {
    return Status::error(input.name + ": offset 32: expected key serializer id " +
                         std::to_string(key_serializer) + " (" + serializer_name(key_serializer) +
                         "), found " + std::to_string(h.key_serializer) + " (" +
                         serializer_name(h.key_serializer) + ")");
  }
  return Status();
}

// One checkpoint file as a restore reads it: its layout and its states' tables.
struct ReadFile {
  const CheckpointInput* input = nullptr;
  CheckpointLayout layout;
  std::vector<std::size_t> table_of_state;  // state i of the file -> table
  // The block of `key_group`, or nullptr when the file's range does not hold it.
  const CheckpointBlockInfo* block(std::int32_t key_group) const {
    const KeyGroupRange r = layout.header.range;
    if (!r.contains(key_group)) return nullptr;
    return &layout.blocks[static_cast<std::size_t>(key_group - r.start())];
  }
};

// What one restore_state_tables call builds up over its inputs.
struct RestoreRun {
  std::span<const CheckpointInput> inputs;
  const RestoreOptions& options;
  KeyGroupRange keep;                                  // the key groups to restore
  std::vector<std::unique_ptr<StateTableBase>> fresh;  // tables of `keep`, being filled
  std::vector<std::size_t> claimed;  // slot of `keep` -> input read into it; inputs.size(): none
  BlockScratch scratch;
};

// Reads the chain of `head` (CheckpointInput::chain) as far as parent ids lead: each
// member's layout, checked to be the checkpoint its child names, to fit this backend and to
// have its states registered. Members beyond a checkpoint without a parent are not read.
Status read_chain(const RestoreRun& run, const ReadFile& head, std::int32_t max_parallelism,
                  std::uint16_t key_serializer, std::vector<ReadFile>& chain) {
  std::uint64_t parent = head.layout.header.parent_checkpoint_id;
  const std::string* child = &head.input->name;
  for (const CheckpointInput& member : head.input->chain) {
    if (parent == 0) break;
    if (member.expected_checkpoint_id != 0 && member.expected_checkpoint_id != parent) {
      return Status::error(member.name + ": expected as checkpoint " + std::to_string(parent) +
                           " (the parent " + *child + " names), but given as checkpoint " +
                           std::to_string(member.expected_checkpoint_id) +
                           ": the chain is out of order");
    }
    CheckpointInput expected = member;
    expected.expected_checkpoint_id = parent;
    Result<CheckpointLayout> layout = read_checkpoint_layout(expected, run.options);
    if (!layout.ok()) return layout.status();
    ReadFile file{&member, std::move(*layout), {}};
    if (Status st = check_compatible(member, file.layout.header, max_parallelism, key_serializer);
        !st.ok()) {
      return st;
    }
    if (Status st = map_states(member, file.layout, run.fresh, file.table_of_state); !st.ok()) {
      return st;
    }
    parent = file.layout.header.parent_checkpoint_id;
    chain.push_back(std::move(file));
    child = &chain.back().input->name;
  }
  return Status();
}

// Restores key group `b.key_group` from `head` and its chain: the nearest full block, then
// every newer delta, oldest first (C10).
Status restore_key_group(RestoreRun& run, const ReadFile& head, const std::vector<ReadFile>& chain,
                         const CheckpointBlockInfo& b) {
  const std::int32_t g = b.key_group;
  std::vector<std::pair<const ReadFile*, const CheckpointBlockInfo*>> path{{&head, &b}};
  while (path.back().second->kind != BlockKind::full) {
    const ReadFile& child = *path.back().first;
    const std::uint64_t parent = child.layout.header.parent_checkpoint_id;
    if (path.size() > chain.size()) {
      return Status::error(
          child.input->name + ": offset " + std::to_string(path.back().second->offset) +
          ": key group " + std::to_string(g) + " is a " +
          block_kind_name(path.back().second->kind) + " block of checkpoint " +
          std::to_string(child.layout.header.checkpoint_id) + ", expected its parent checkpoint " +
          std::to_string(parent) + " in the chain, found " +
          (head.input->chain.empty() ? std::string("no chain given")
                                     : "the chain ending before it") +
          ": restore an incremental checkpoint with its ancestors");
    }
    const ReadFile& member = chain[path.size() - 1];
    const CheckpointBlockInfo* blk = member.block(g);
    if (blk == nullptr) {
      return Status::error(
          member.input->name + ": offset 24: expected checkpoint " +
          std::to_string(member.layout.header.checkpoint_id) + " to hold key group " +
          std::to_string(g) + " (checkpoint " + std::to_string(child.layout.header.checkpoint_id) +
          " refers to it), found key groups " + member.layout.header.range.to_string());
    }
    path.emplace_back(&member, blk);
  }
  std::vector<std::size_t> order;  // into path: oldest first
  for (std::size_t i = path.size(); i-- > 0;) order.push_back(i);
  // Planted bug: the full block first, then the deltas newest first.
  if (COWSTATE_MUTANT(chain_applied_out_of_order)) std::reverse(order.begin() + 1, order.end());
  for (const std::size_t i : order) {
    const ReadFile& file = *path[i].first;
    if (Status st =
            checkpoint_detail::read_block(*file.input, file.layout.header, *path[i].second,
                                          run.options, run.fresh, file.table_of_state, run.scratch);
        !st.ok()) {
      return st;
    }
  }
  return Status();
}

// Reads the blocks of input `f` whose key groups are kept into `run.fresh`, each from the
// input's chain when it is not full.
Status restore_blocks(RestoreRun& run, std::size_t f, const ReadFile& head,
                      const std::vector<ReadFile>& chain) {
  const CheckpointInput& input = run.inputs[f];
  for (const CheckpointBlockInfo& b : head.layout.blocks) {
    if (!run.keep.contains(b.key_group)) continue;  // another instance's key group
    const auto slot = static_cast<std::size_t>(b.key_group - run.keep.start());
    if (run.claimed[slot] != run.inputs.size()) {
      return Status::error(input.name + ": offset " + std::to_string(b.offset) + ": key group " +
                           std::to_string(b.key_group) + " is also in " +
                           run.inputs[run.claimed[slot]].name +
                           ": the checkpoints to restore overlap");
    }
    run.claimed[slot] = f;
    if (Status st = restore_key_group(run, head, chain, b); !st.ok()) return st;
  }
  return Status();
}

// C9: every key group of `range` came from some input, unless the caller allows gaps. The
// error names the uncovered key groups as ranges and what each input covers.
Status check_coverage(const RestoreRun& run, KeyGroupRange range,
                      const std::vector<KeyGroupRange>& covered) {
  std::string gaps;
  std::int32_t missing = 0;
  for (std::int32_t g = range.start(); g <= range.end(); ++g) {
    if (run.claimed[static_cast<std::size_t>(g - run.keep.start())] != run.inputs.size()) continue;
    std::int32_t last = g;
    while (last < range.end() &&
           run.claimed[static_cast<std::size_t>(last + 1 - run.keep.start())] ==
               run.inputs.size()) {
      ++last;
    }
    gaps += (gaps.empty() ? "" : ", ") + std::to_string(g) +
            (last > g ? "-" + std::to_string(last) : std::string());
    missing += last - g + 1;
    g = last;
  }
  if (missing == 0 || run.options.allow_partial_coverage) return Status();
  std::string inputs;
  for (std::size_t f = 0; f < run.inputs.size(); ++f) {
    const KeyGroupRange r = covered[f];
    inputs += (f == 0 ? "" : ", ") + run.inputs[f].name + " holds " +
              (r.empty() ? std::string("none")
                         : std::to_string(r.start()) + "-" + std::to_string(r.end()));
  }
  return Status::error("restoring key groups " + std::to_string(range.start()) + "-" +
                       std::to_string(range.end()) + ": " + std::to_string(missing) +
                       (missing == 1 ? " key group is" : " key groups are") +
                       " in no checkpoint file (" + gaps + "; " +
                       (inputs.empty() ? std::string("no files given") : inputs) +
                       "): restore from files covering the whole range, or allow partial "
                       "coverage");
}

}  // namespace

Status restore_state_tables(std::vector<std::unique_ptr<StateTableBase>>& tables,
                            std::int32_t max_parallelism, KeyGroupRange range,
                            std::uint16_t key_serializer, std::span<const CheckpointInput> inputs,
                            const RestoreOptions& options) {
  for (const auto& t : tables) {
    COWSTATE_ASSERT(!t->has_live_snapshot(), "C4", "restoring over a table with a live snapshot");
    COWSTATE_ASSERT(t->range() == range, "B1", "a table of another range");
  }
  // The key groups to keep: the target range. (Planted bug: the hull of the target range and
  // every input's range, as if the tables were sized from the checkpoints' metadata.)
  KeyGroupRange keep = range;
  if (COWSTATE_MUTANT(restore_keeps_out_of_range)) keep = hull_with_inputs(range, inputs, options);
  RestoreRun run{inputs, options, keep, {}, {}, {}};
  run.fresh.reserve(tables.size());
  for (const auto& t : tables) run.fresh.push_back(t->make_empty(keep));
  run.claimed.assign(static_cast<std::size_t>(keep.size()), inputs.size());
  std::vector<std::size_t> first_mapping;  // planted bug restore_global_state_ids only
  std::vector<KeyGroupRange> covered;      // each input's key groups, for a coverage error

  for (std::size_t f = 0; f < inputs.size(); ++f) {
    const CheckpointInput& input = inputs[f];
    Result<CheckpointLayout> layout = read_checkpoint_layout(input, options);
    if (!layout.ok()) return layout.status();
    const CheckpointHeader& h = layout->header;
    covered.push_back(h.range);
    if (Status st = check_compatible(input, h, max_parallelism, key_serializer); !st.ok()) {
      return st;
    }
    ReadFile head{&input, std::move(*layout), {}};
    if (Status st = map_states(input, head.layout, tables, head.table_of_state); !st.ok()) {
      return st;
    }
    if (COWSTATE_MUTANT(restore_global_state_ids)) {
      // Planted bug: the first file's state numbering is taken for every file.
      if (f == 0) first_mapping = head.table_of_state;
      if (first_mapping.size() == head.table_of_state.size()) head.table_of_state = first_mapping;
    }
    std::vector<ReadFile> chain;
    if (Status st = read_chain(run, head, max_parallelism, key_serializer, chain); !st.ok()) {
      return st;
    }
    if (Status st = restore_blocks(run, f, head, chain); !st.ok()) return st;
  }
  if (Status st = check_coverage(run, range, covered); !st.ok()) return st;
  // C4: only now does the backend change.
  for (std::size_t i = 0; i < tables.size(); ++i) tables[i] = std::move(run.fresh[i]);
  return Status();
}

}  // namespace cowstate
