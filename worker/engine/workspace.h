// The engine's step buffers, shared by every sequence: the residual stream and the queries of a
// step's tokens, the (o, lse) accumulators, per-chunk scratch for projections and the MLP, the
// attention partials, the ring blocks in flight and the logits. They grow to the largest step
// seen (the memory plan counts them before a sequence starts) and are never freed between steps.
#pragma once

#include <cstdint>

#include "checkpoint/model_config.h"
#include "worker/attention/attention_env.h"
#include "worker/attention/sparse_prefill_scratch.h"
#include "worker/backend/backend.h"

namespace millipede {

struct WorkspaceShape {
  int64_t prefill_chunk = 512;    // tokens per projection / MLP chunk
  int64_t attention_chunk = 512;  // query rows per attention call
  DType kv_dtype = DType::kBF16;
  DType gemm_input_dtype = DType::kF32;  // what RMSNorm and SiLU-mul write for the GEMMs
};

class Workspace {
 public:
  Workspace(Backend& backend, const ModelConfig& config, const WorkspaceShape& shape)
      : backend_(backend), config_(config), shape_(shape) {}

  // Grows the buffers for steps of up to `step_rows` tokens, ring blocks of `ring_rows` rows
  // (0: no ring), decode merges over `ranks` ranks and `logit_rows` rows of logits (also the
  // decode tokens one merge takes at most).
  Status Reserve(int64_t step_rows, int64_t ring_rows, int ranks, int64_t logit_rows);
  // Frees everything (the next Reserve allocates again).
  void Release();
  // Bytes held now (the step, chunk and ring buffers; the sparse prefill's are apart).
  int64_t NumBytes() const;
  // The views the attention strategies borrow.
  AttentionScratch Scratch() const;

  // Changes whenever a buffer is allocated again (recorded steps point into them).
  uint64_t epoch() const { return epoch_; }
  int64_t step_rows() const { return step_rows_; }
  int64_t scratch_rows() const { return scratch_rows_; }
  int64_t ring_rows() const { return ring_rows_; }

  // Per step, [step_rows, ...]:
  BackendTensor hidden;     // [n, hidden] F32 residual stream
  BackendTensor q;          // [n, heads * head_dim] F32 queries (after RoPE)
  BackendTensor o_acc;      // [n, heads * head_dim] F32 attention output
  BackendTensor lse_acc;    // [n, heads] F32 its log-sum-exp
  BackendTensor positions;  // [n] I64 global positions of the step's tokens
  BackendTensor ids;        // [n] I32
  // [3, n] I64 for recorded decode steps: each token's cache row, its sequence's rows after the
  // step (RopeKvArgs::cache_rows, BatchDecodeAttentionArgs::lengths), and those of them after the
  // sequence's context (the rows it generated: OmniKV's selected layers attend to them whole).
  BackendTensor decode_meta;
  ConstTensorView decode_rows(int64_t row0, int64_t n) const { return DecodeMeta(0, row0, n); }
  ConstTensorView decode_lengths(int64_t row0, int64_t n) const { return DecodeMeta(1, row0, n); }
  ConstTensorView decode_generated(int64_t row0, int64_t n) const {
    return DecodeMeta(2, row0, n);
  }
  ConstTensorView DecodeMeta(int64_t part, int64_t row0, int64_t n) const;
  // Per chunk, [scratch_rows, ...]:
  BackendTensor normed;     // [chunk, hidden] in gemm_input_dtype
  BackendTensor k, v;       // [chunk, kv_heads * head_dim] F32
  BackendTensor qkv;        // [1, (heads + 2 * kv_heads) * head_dim]: q | k | v of one token
  BackendTensor o_part;     // [attention rows, heads * head_dim] F32
  BackendTensor lse_part;   // [attention rows, heads] F32
  // [chunk, 2 * intermediate] F32: for m tokens gate in the first m * intermediate elements and
  // up from element chunk * intermediate; for one token through the fused GEMM, gate | up.
  BackendTensor gate_up;
  // [chunk, intermediate] silu(gate) * up in gemm_input_dtype when that is not F32.
  BackendTensor silu_out;
  BackendTensor logits;     // [logit_rows, vocab] F32
  // The sparse prefill's buffers, grown by the layers that use them during a step (not by
  // Reserve); Release frees them too. Their bytes: sparse.NumBytes().
  SparsePrefillScratch sparse;

 private:
  Status ReserveStep(int64_t n);
  Status ReserveScratch(int64_t chunk);
  Status ReserveRing(int64_t rows);
  Status ReserveGather(int ranks, int64_t rows);

  Backend& backend_;
  const ModelConfig& config_;
  WorkspaceShape shape_;
  int64_t step_rows_ = 0, scratch_rows_ = 0, ring_rows_ = 0, logit_rows_ = 0;
  uint64_t epoch_ = 0;
  int gather_ranks_ = 0;
  int64_t gather_rows_ = 0;
  BackendTensor ring_k_[2], ring_v_[2];
  // Decode partials, o then lse, or a split MLP's partials: this rank's [gather_rows *
  // max(heads * (head_dim + 1), hidden)] and every rank's [ranks, the same].
  BackendTensor partials_, gathered_;
};

}  // namespace millipede
