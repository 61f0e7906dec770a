// A step plan: the sequences one engine step runs and the tokens each contributes. Every rank
// sharing the sequences runs the same plan at once (same entries, same order).
//  - A prefill entry adds positions [length, length + T) of its sequence, sharded over the
//    ranks: each rank's entry lists its own part (`ranges`, global positions, increasing; any
//    part may be empty) and their union must tile the T positions exactly. A whole prompt is one
//    prefill entry; a prompt prefilled in chunks is one entry per step, each after the last.
//    Attention sees every earlier position of the sequence on every rank (its policy allowing).
//  - A decode entry adds one token at position `length` on every rank (the same id everywhere);
//    rank ShardPlan::DecodeOwner(length, N) stores its K/V; every rank gets its logits.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "common/shard_plan.h"
#include "common/tensor.h"
#include "worker/engine/sequence.h"

namespace millipede {

enum class StepKind { kPrefill, kDecode };

struct SequenceStep {
  SequenceId sequence = 0;
  StepKind kind = StepKind::kPrefill;
  // Prefill: this rank's positions (increasing). Decode: unused (the position is the length).
  std::vector<TokenRange> ranges;
  // The tokens: prefill, this rank's in `ranges` order; decode, exactly one.
  std::vector<int32_t> ids;
};

struct StepPlan {
  std::vector<SequenceStep> steps;
};

// The result of one step, per entry of the plan: the logits of the entry's last position
// ([vocab] F32, backend memory, valid until the next step) on the ranks that hold them — for a
// prefill entry the rank holding its last position, for a decode entry every rank — else nullopt.
// A prefill entry's attention so far, over every rank: the query-key pairs it computed and the
// causal pairs of the same positions (per KV head, over every layer); attended / causal is the
// achieved density (1 for dense attention).
struct PrefillDensity {
  int64_t attended_pairs = 0;
  int64_t causal_pairs = 0;
};

struct StepOutput {
  std::vector<std::optional<ConstTensorView>> logits;
  // Per entry: the sequence's prefill pairs after this step (prefill entries; zeros for decode).
  std::vector<PrefillDensity> prefill;
};

// This rank's prefill entry for positions [begin, begin + count) of `sequence` sharded by
// ShardPlan over `num_ranks` (zig-zag), the ids taken from `all_ids` (the T ids of the chunk).
StatusOr<SequenceStep> ShardedPrefill(SequenceId sequence, int64_t begin,
                                      std::span<const int32_t> all_ids, int rank, int num_ranks);
// A decode entry.
SequenceStep DecodeStep(SequenceId sequence, int32_t id);

}  // namespace millipede
