// One entry of a step plan as this rank runs it: what StepPreparer resolves and the LayerLoop
// and DecodeGraphRunner run (internal to the engine's parts).
#pragma once

#include <map>
#include <utility>
#include <vector>

#include "common/shard_plan.h"
#include "common/tensor.h"
#include "worker/engine/sequence.h"
#include "worker/engine/step_plan.h"

namespace millipede {

struct RankEntry {
  Sequence* seq = nullptr;
  const SequenceStep* step = nullptr;
  int64_t row0 = 0;  // this rank's first row of the entry in the step's buffers
  int64_t rows = 0;  // this rank's rows (prefill: its share; decode: 1 on every rank)
  // This rank's new positions (decode: the token's position on the rank that stores it).
  std::vector<TokenRange> ranges;
  int64_t length_before = 0, length_after = 0;
  // Prefill: every rank's stored positions before the step and new positions, by rank.
  std::vector<std::vector<TokenRange>> rank_stored, rank_step;
  // Prefill: every rank's ring block ranges this step, by rank, for each kind of store the
  // sequence's layers have (key: the retention's sink and window).
  std::map<std::pair<int64_t, int64_t>, std::vector<std::vector<TokenRange>>> blocks;
  const std::vector<std::vector<TokenRange>>& Blocks(const KvRetention& r) const {
    return blocks.at({r.sink_tokens, r.window_tokens});
  }
  // Decode: whether the storing rank has room (exchanged so every rank fails alike).
  bool fits = true;
  int64_t logit_row = -1;        // row of the workspace's logits, or -1 (not on this rank)
  int64_t logits_step_row = -1;  // the step row whose logits they are
  ConstTensorView inv_freq;      // RoPE frequencies for the sequence's length after the step
  ConstTensorView q;             // the entry's queries in the current layer, after RoPE
  // A recordable decode step: the rows its attention calls span (DecodeGraphBucket); its
  // token's cache row and rows after the step are in the workspace's decode_meta. 0 otherwise.
  int64_t graph_rows = 0;
  bool prefill() const { return step->kind == StepKind::kPrefill; }
  // Rows this rank stores in this step.
  int64_t stored_rows() const {
    int64_t n = 0;
    for (const TokenRange& r : ranges) n += r.size();
    return n;
  }
};

}  // namespace millipede
