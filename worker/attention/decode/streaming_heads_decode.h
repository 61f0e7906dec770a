// DuoAttention's mixed decode layers: in one layer, streaming KV heads see only the attention
// sinks and a recent window (positions p - k < window, or k < sink, for the token at p) while
// retrieval heads (decode role "full") see every key. The layer's store keeps every row (the
// retrieval heads need them); the streaming heads' keys between sinks and window are skipped by
// the attention kernels' per-KV-head windows (AttentionArgs::kv_head_window), so a streaming head
// reads sink + window keys per token whatever the context.
//
// Exact under context parallelism: each rank attends over its own rows, one call per contiguous
// run of positions (the windows are in global positions), and the engine merges the ranks'
// partials. On one rank the rows are positions 0 .. n - 1 in order, and the tokens of many
// sequences decode in one batched call (BatchDecodeAttention's windows). A layer whose every head
// streams keeps the constant-size streaming store instead (FullDecode over KvRetention).
#pragma once

#include <cstdint>
#include <vector>

#include "worker/attention/attention_strategy.h"

namespace millipede {

class StreamingHeadsDecode final : public DecodeStrategy {
 public:
  // `windows`: [kv_heads] the window of each KV head, 0 for a retrieval (full) head; `sink`: the
  // streaming heads' sink tokens; `batchable`: the sequence has one rank.
  StreamingHeadsDecode(std::vector<int64_t> windows, int64_t sink, bool batchable)
      : windows_(std::move(windows)), sink_(sink), batchable_(batchable) {}
  const char* name() const override { return "streaming-heads"; }
  Status Partial(AttentionEnv& env, const DecodeInput& in, TensorView o, TensorView lse) override;
  bool batchable() const override { return batchable_; }
  bool batches_recorded() const override { return batchable_; }
  // One part: every row, which must be positions 0 .. n - 1 (one rank).
  Status BatchParts(AttentionEnv& env, const DecodeInput& in,
                    std::vector<DecodePart>* parts) override;
  Windows batch_windows() const override { return {&windows_, sink_}; }

 private:
  std::vector<int64_t> windows_;
  int64_t sink_;
  bool batchable_;
  BackendTensor tmp_o_, tmp_lse_;  // a later run's partial, merged into (o, lse)
};

}  // namespace millipede
