#include "worker/engine/workspace.h"

#include <algorithm>

namespace millipede {

Status Workspace::Reserve(int64_t step_rows, int64_t ring_rows, int ranks, int64_t logit_rows) {
  MP_RETURN_IF_ERROR(ReserveStep(step_rows));
  MP_RETURN_IF_ERROR(ReserveScratch(std::min(std::max<int64_t>(step_rows, 1),
                                             shape_.prefill_chunk)));
  logit_rows = std::max<int64_t>(logit_rows, 1);
  if (ranks > 1) {
    MP_RETURN_IF_ERROR(ReserveRing(ring_rows));
    MP_RETURN_IF_ERROR(ReserveGather(ranks, logit_rows));
  }
  if (logit_rows > logit_rows_) {
    MP_ASSIGN_OR_RETURN(logits, backend_.Allocate(DType::kF32,
                                                  Shape{logit_rows, config_.vocab_size}));
    logit_rows_ = logit_rows;
    ++epoch_;
  }
  return OkStatus();
}

Status Workspace::ReserveStep(int64_t n) {
  n = std::max<int64_t>(n, 1);
  if (n <= step_rows_) return OkStatus();
  const ModelConfig& c = config_;
  const int64_t q_width = c.num_attention_heads * c.head_dim;
  Backend& b = backend_;
  MP_ASSIGN_OR_RETURN(hidden, b.Allocate(DType::kF32, Shape{n, c.hidden_size}));
  MP_ASSIGN_OR_RETURN(q, b.Allocate(DType::kF32, Shape{n, q_width}));
  MP_ASSIGN_OR_RETURN(o_acc, b.Allocate(DType::kF32, Shape{n, q_width}));
  MP_ASSIGN_OR_RETURN(lse_acc, b.Allocate(DType::kF32, Shape{n, c.num_attention_heads}));
  MP_ASSIGN_OR_RETURN(positions, b.Allocate(DType::kI64, Shape{n}));
  MP_ASSIGN_OR_RETURN(ids, b.Allocate(DType::kI32, Shape{n}));
  MP_ASSIGN_OR_RETURN(decode_meta, b.Allocate(DType::kI64, Shape{3, n}));
  step_rows_ = n;
  ++epoch_;
  // The attention partials follow the step size (up to attention_chunk rows).
  scratch_rows_ = 0;
  return OkStatus();
}

Status Workspace::ReserveScratch(int64_t chunk) {
  chunk = std::max<int64_t>(chunk, 1);
  if (chunk <= scratch_rows_) return OkStatus();
  const ModelConfig& c = config_;
  const int64_t kv_width = c.num_key_value_heads * c.head_dim;
  const int64_t q_width = c.num_attention_heads * c.head_dim;
  Backend& b = backend_;
  MP_ASSIGN_OR_RETURN(normed, b.Allocate(shape_.gemm_input_dtype, Shape{chunk, c.hidden_size}));
  MP_ASSIGN_OR_RETURN(k, b.Allocate(DType::kF32, Shape{chunk, kv_width}));
  MP_ASSIGN_OR_RETURN(v, b.Allocate(DType::kF32, Shape{chunk, kv_width}));
  MP_ASSIGN_OR_RETURN(qkv, b.Allocate(DType::kF32, Shape{1, q_width + 2 * kv_width}));
  // Attention partials: as many query rows as one attention call takes (at least a chunk).
  const int64_t attention_rows = std::max(chunk, std::min(shape_.attention_chunk, step_rows_));
  MP_ASSIGN_OR_RETURN(o_part, b.Allocate(DType::kF32, Shape{attention_rows, q_width}));
  MP_ASSIGN_OR_RETURN(lse_part,
                      b.Allocate(DType::kF32, Shape{attention_rows, c.num_attention_heads}));
  MP_ASSIGN_OR_RETURN(gate_up, b.Allocate(DType::kF32, Shape{chunk, 2 * c.intermediate_size}));
  silu_out = BackendTensor();
  if (shape_.gemm_input_dtype != DType::kF32) {
    MP_ASSIGN_OR_RETURN(silu_out,
                        b.Allocate(shape_.gemm_input_dtype, Shape{chunk, c.intermediate_size}));
  }
  scratch_rows_ = chunk;
  ++epoch_;
  return OkStatus();
}

Status Workspace::ReserveRing(int64_t rows) {
  rows = std::max<int64_t>(rows, 1);
  if (rows <= ring_rows_) return OkStatus();
  const Shape shape{rows, config_.num_key_value_heads, config_.head_dim};
  for (int i = 0; i < 2; ++i) {
    MP_ASSIGN_OR_RETURN(ring_k_[i], backend_.Allocate(shape_.kv_dtype, shape));
    MP_ASSIGN_OR_RETURN(ring_v_[i], backend_.Allocate(shape_.kv_dtype, shape));
  }
  ring_rows_ = rows;
  ++epoch_;
  return OkStatus();
}

Status Workspace::ReserveGather(int ranks, int64_t rows) {
  if (ranks <= gather_ranks_ && rows <= gather_rows_) return OkStatus();
  ranks = std::max(ranks, gather_ranks_);
  rows = std::max(rows, gather_rows_);
  const ModelConfig& c = config_;
  // Decode partials (o and lse) or, as large, a split MLP's [rows, hidden] partials.
  const int64_t per_rank =
      rows * std::max(c.num_attention_heads * (c.head_dim + 1), c.hidden_size);
  MP_ASSIGN_OR_RETURN(partials_, backend_.Allocate(DType::kF32, Shape{per_rank}));
  MP_ASSIGN_OR_RETURN(gathered_, backend_.Allocate(DType::kF32, Shape{ranks, per_rank}));
  gather_ranks_ = ranks;
  gather_rows_ = rows;
  ++epoch_;
  return OkStatus();
}

ConstTensorView Workspace::DecodeMeta(int64_t part, int64_t row0, int64_t n) const {
  return ConstTensorView{decode_meta.cview().as<const int64_t>() + part * step_rows_ + row0,
                         DType::kI64, Shape{n}};
}

void Workspace::Release() {
  ++epoch_;
  for (BackendTensor* t : {&hidden, &q, &o_acc, &lse_acc, &positions, &ids, &decode_meta, &normed, &k, &v,
                           &qkv, &o_part, &lse_part, &gate_up, &silu_out, &ring_k_[0],
                           &ring_k_[1], &ring_v_[0], &ring_v_[1]})
    *t = BackendTensor();
  sparse = SparsePrefillScratch();
  step_rows_ = scratch_rows_ = ring_rows_ = 0;
}

int64_t Workspace::NumBytes() const {
  size_t bytes = 0;
  for (const BackendTensor* t : {&hidden, &q, &o_acc, &lse_acc, &positions, &ids, &decode_meta,
                                 &normed, &k,
                                 &v, &qkv, &o_part, &lse_part, &gate_up, &silu_out, &logits,
                                 &ring_k_[0], &ring_k_[1], &ring_v_[0], &ring_v_[1],
                                 &partials_, &gathered_})
    bytes += t->NumBytes();
  return static_cast<int64_t>(bytes);
}

AttentionScratch Workspace::Scratch() const {
  AttentionScratch s;
  s.o_part = o_part.view();
  s.lse_part = lse_part.view();
  for (int i = 0; i < 2; ++i) {
    s.ring_k[i] = ring_k_[i].view();
    s.ring_v[i] = ring_v_[i].view();
  }
  s.partials = partials_.view();
  s.gathered = gathered_.view();
  s.gather_rows = gather_rows_;
  s.attention_rows = std::max<int64_t>(1, shape_.attention_chunk);
  return s;
}

}  // namespace millipede
