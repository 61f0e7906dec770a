// The engine's layer loop: a resolved step (StepPreparer) run through the model on this rank —
// embedding, each layer's projections, attention and MLP, the logits — and the step committed.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "worker/attention/attention_env.h"
#include "worker/engine/engine_context.h"
#include "worker/engine/rank_entry.h"
#include "worker/engine/step_plan.h"

namespace millipede {

class LayerLoop {
 public:
  explicit LayerLoop(EngineContext& ctx) : ctx_(ctx) {}

  // Uploads ids and positions, embeds the step's `rows` tokens into the residual stream.
  Status Embed(const std::vector<RankEntry>& entries, int64_t rows);
  // Uploads the step's ids and positions ([rows] each) into the workspace.
  Status UploadIds(const std::vector<RankEntry>& entries, int64_t rows);
  // The embedding of the ids UploadIds put in the workspace.
  Status EmbedUploaded(int64_t rows);
  // One layer over every entry: projections, RoPE and K/V stores, attention, output projection
  // and MLP.
  Status RunLayer(int64_t layer, std::vector<RankEntry>& entries, int64_t rows,
                  StepProfiler& profiler);
  // The logits of every entry that has them (consecutive rows in one LM-head GEMM).
  Status ComputeLogits(const std::vector<RankEntry>& entries);
  // Commits the step's rows and collects the logits (and, after prefill, the densities).
  StatusOr<StepOutput> FinishStep(std::vector<RankEntry>& entries, bool prefill);

 private:
  Status ProjectLayer(int64_t layer, std::vector<RankEntry>& entries, int64_t rows);
  // RoPE of the decode tokens `run` (consecutive rows of the chunk starting at step row
  // `chunk_begin`, one RoPE table) and their K/V into each owner's store, as one op.
  Status RopeAndStoreDecode(int64_t layer, std::span<RankEntry> run, int64_t chunk_begin);
  // Decode tokens of consecutive entries (one, or several whose strategies are batchable): their
  // partials on this rank, merged across ranks by one gather (decode_attention.cc).
  Status AttendDecode(int64_t layer, std::span<RankEntry> run, AttentionEnv& env);
  // This rank's partials of `run`: o [n, heads, head_dim], lse [n, heads] F32.
  Status DecodePartials(std::span<RankEntry> run, std::span<const DecodeInput> inputs,
                        AttentionEnv& env, TensorView o, TensorView lse);
  // The same for an unrecorded run of batchable strategies: every token's parts
  // (DecodeStrategy::BatchParts) in one BatchDecodeAttention call, a token's parts merged.
  Status BatchedPartials(std::span<RankEntry> run, std::span<const DecodeInput> inputs,
                         AttentionEnv& env, TensorView o, TensorView lse);
  // Each token's AfterMerge once `lse` [n, heads] holds the run's merged log-sum-exps; in an
  // unrecorded run, tokens whose strategies batch it (DecodeStrategy::AfterMergeBatchesWith) in
  // one call per kind.
  Status AfterMerges(std::span<RankEntry> run, std::span<const DecodeInput> inputs,
                     AttentionEnv& env, ConstTensorView lse);
  // Output projection and MLP of the step's rows: in chunks, decode rows split over the ranks
  // (EngineOptions::split_decode_mlp) and the rest whole.
  Status RunMlp(int64_t layer, std::span<const RankEntry> entries, StepProfiler& profiler);
  // Decode rows [begin, end), which every rank holds: each rank's MLP slice, one all-gather of
  // the partials, their sum into the residual stream.
  Status SplitMlp(int64_t layer, int64_t begin, int64_t end, StepProfiler& profiler);
  // After a step with prefill entries (every rank at once): each prefill entry's pairs so far
  // over every rank (StepOutput::prefill), zeros for the others.
  StatusOr<std::vector<PrefillDensity>> PrefillDensities(std::vector<RankEntry>& entries);

  EngineContext& ctx_;
  // Batched decode's partials of tokens with several parts: [parts * tokens, heads, head_dim]
  // and [parts * tokens, heads] F32.
  BackendTensor parts_o_, parts_lse_;
};

}  // namespace millipede
