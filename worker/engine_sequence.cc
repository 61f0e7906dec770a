// Engine: sequences and their buffers — the memory plan checked on every rank before a
// sequence starts, the allocations it names, and synthetic sequences for decode benchmarks.
#include <algorithm>

#include "worker/engine.h"

namespace millipede {

MemoryPlanShape Engine::memory_shape() const {
  return MemoryPlanShape{options_.kv_dtype, options_.prefill_chunk, attention_chunk(),
                         comm_->size()};
}

int64_t Engine::attention_chunk() const {
  return options_.attention_chunk > 0 ? options_.attention_chunk : options_.prefill_chunk;
}

SequenceMemoryPlan Engine::PlanSequence(int64_t capacity, int64_t step_tokens,
                                        int64_t ring_rows) const {
  return PlanSequenceMemory(config_, memory_shape(), capacity, step_tokens, ring_rows);
}

StatusOr<int64_t> Engine::MaxSequencePositionsNow() {
  MP_ASSIGN_OR_RETURN(BackendMemory memory, backend_->Memory());
  // The current sequence's memory would be freed first.
  int64_t held = 0;
  if (kv_) held += PlanSequence(kv_->capacity(), step_rows_, ring_rows_).total();
  return MaxSequencePositions(config_, memory_shape(), memory.free_bytes + held);
}

Status Engine::StartSequence(int64_t capacity, int64_t step_tokens,
                             std::optional<AttentionPolicy> policy) {
  EndSequence();
  if (step_tokens <= 0) step_tokens = capacity;
  Status local;
  if (capacity <= 0 || capacity > max_context())
    local = InvalidArgumentError("sequence capacity " + std::to_string(capacity) +
                                 " outside [1, " + std::to_string(max_context()) + "]");
  if (local.ok() && policy) local = CheckPolicy(*policy);
  // Every rank learns every rank's step size (the ring blocks' rows), need and free memory.
  const int num_ranks = comm_->size();
  int64_t mine[3] = {step_tokens, 0, 0};
  BackendMemory memory;
  if (local.ok()) {
    StatusOr<BackendMemory> m = backend_->Memory();
    if (m.ok()) memory = *m; else local = m.status();
  }
  std::vector<int64_t> all(3 * static_cast<size_t>(num_ranks));
  int64_t ring_rows = step_tokens;
  if (num_ranks > 1) {
    MP_RETURN_IF_ERROR(comm_->HostAllGather(mine, all.data(), sizeof(int64_t)));
    for (int r = 0; r < num_ranks; ++r) ring_rows = std::max(ring_rows, all[r]);
  }
  const SequenceMemoryPlan plan = PlanSequence(std::max<int64_t>(capacity, 1), step_tokens,
                                               ring_rows);
  mine[0] = local.ok() ? 1 : 0;
  mine[1] = plan.total();
  mine[2] = memory.free_bytes;
  if (num_ranks > 1) {
    MP_RETURN_IF_ERROR(comm_->HostAllGather(mine, all.data(), sizeof(mine)));
  } else {
    std::copy(mine, mine + 3, all.begin());
  }
  MP_RETURN_IF_ERROR(local);
  for (int r = 0; r < num_ranks; ++r) {
    const int64_t* m = &all[3 * static_cast<size_t>(r)];
    MP_REQUIRE(m[0] == 1, "rank ", r, " refused the sequence (its log says why)");
    if (m[1] > m[2]) {
      const std::string where = backend_->kind() == BackendKind::kCuda ? "GPU" : "host";
      return ResourceExhaustedError(
          "the sequence does not fit: rank " + std::to_string(r) + " needs " +
          FormatBytes(m[1]) + " for " + std::to_string(capacity) + " positions" +
          (r == comm_->rank() ? " = " + plan.ToString() : "") + " but its " + where + " has " +
          FormatBytes(m[2]) + " free (weights already loaded); use more ranks or a shorter "
          "prompt");
    }
  }
  MP_ASSIGN_OR_RETURN(KvCache cache,
                      KvCache::Create(*backend_, config_.num_hidden_layers,
                                      config_.num_key_value_heads, config_.head_dim, capacity,
                                      options_.kv_dtype));
  kv_ = std::make_unique<KvCache>(std::move(cache));
  MP_RETURN_IF_ERROR(EnsureStepBuffers(step_tokens));
  MP_RETURN_IF_ERROR(EnsureScratch(std::min(step_tokens, options_.prefill_chunk)));
  if (num_ranks > 1) MP_RETURN_IF_ERROR(EnsureRingBuffers(ring_rows));
  sequence_policy_ = std::move(policy);
  return OkStatus();
}

Status Engine::StartSyntheticSequence(int64_t length, int64_t decode_positions) {
  const int num_ranks = comm_->size(), rank = comm_->rank();
  MP_REQUIRE(decode_positions >= 0, "synthetic sequence: negative decode positions");
  MP_ASSIGN_OR_RETURN(ShardPlan plan, ShardPlan::Create(length, num_ranks));
  const int64_t mine = plan.RankPromptTokens(rank);
  const int64_t capacity =
      std::max<int64_t>(1, mine + (decode_positions + num_ranks - 1) / num_ranks);
  MP_RETURN_IF_ERROR(StartSequence(capacity, 1));
  const ModelConfig& c = config_;
  const int64_t rows = std::min<int64_t>(std::max<int64_t>(mine, 1), 16384);
  const Shape shape{rows, c.num_key_value_heads, c.head_dim};
  std::vector<float> host_zeros(static_cast<size_t>(shape.NumElements()), 0.0f);
  MP_ASSIGN_OR_RETURN(BackendTensor zeros, backend_->Allocate(DType::kF32, shape));
  MP_RETURN_IF_ERROR(backend_->CopyFromHost(
      ConstTensorView{host_zeros.data(), DType::kF32, shape}, zeros.view()));
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    for (int64_t row = 0; row < mine; row += rows) {
      const int64_t m = std::min(rows, mine - row);
      ConstTensorView z = SliceRows(zeros.cview(), 0, m);
      MP_RETURN_IF_ERROR(kv_->Write(*backend_, layer, row, z, z));
    }
  }
  for (const TokenRange& r : plan.RankPromptRanges(rank))
    if (!r.empty()) MP_RETURN_IF_ERROR(kv_->Commit(r));
  global_length_ = length;
  return backend_->Synchronize();
}

void Engine::EndSequence() {
  kv_.reset();
  sequence_policy_.reset();
  heavy_.clear();
  global_length_ = 0;
  step_rows_ = 0;
  hidden_ = BackendTensor();
  q_ = BackendTensor();
  o_acc_ = BackendTensor();
  lse_acc_ = BackendTensor();
  for (int i = 0; i < 2; ++i) {
    ring_k_[i] = BackendTensor();
    ring_v_[i] = BackendTensor();
  }
  ring_rows_ = 0;
  positions_ = BackendTensor();
  ids_ = BackendTensor();
  o_part_ = BackendTensor();
  lse_part_ = BackendTensor();
  scratch_rows_ = 0;
}

Status Engine::EnsureScratch(int64_t chunk) {
  chunk = std::max<int64_t>(chunk, 1);
  if (chunk <= scratch_rows_) return OkStatus();
  const ModelConfig& c = config_;
  const int64_t kv_width = c.num_key_value_heads * c.head_dim;
  const int64_t q_width = c.num_attention_heads * c.head_dim;
  Backend& b = *backend_;
  MP_ASSIGN_OR_RETURN(normed_, b.Allocate(gemm_input_dtype_, Shape{chunk, c.hidden_size}));
  MP_ASSIGN_OR_RETURN(k_, b.Allocate(DType::kF32, Shape{chunk, kv_width}));
  MP_ASSIGN_OR_RETURN(v_, b.Allocate(DType::kF32, Shape{chunk, kv_width}));
  MP_ASSIGN_OR_RETURN(qkv_, b.Allocate(DType::kF32, Shape{1, q_width + 2 * kv_width}));
  // Attention partials: as many query rows as one attention call takes (at least a chunk).
  const int64_t attention_rows = std::max(chunk, std::min(attention_chunk(), step_rows_));
  MP_ASSIGN_OR_RETURN(o_part_, b.Allocate(DType::kF32, Shape{attention_rows, q_width}));
  MP_ASSIGN_OR_RETURN(lse_part_,
                      b.Allocate(DType::kF32, Shape{attention_rows, c.num_attention_heads}));
  MP_ASSIGN_OR_RETURN(gate_up_, b.Allocate(DType::kF32, Shape{chunk, 2 * c.intermediate_size}));
  silu_out_ = BackendTensor();
  if (gemm_input_dtype_ != DType::kF32) {
    MP_ASSIGN_OR_RETURN(silu_out_,
                        b.Allocate(gemm_input_dtype_, Shape{chunk, c.intermediate_size}));
  }
  scratch_rows_ = chunk;
  return OkStatus();
}

Status Engine::EnsureStepBuffers(int64_t n) {
  n = std::max<int64_t>(n, 1);
  if (n <= step_rows_) return OkStatus();
  const ModelConfig& c = config_;
  const int64_t q_width = c.num_attention_heads * c.head_dim;
  Backend& b = *backend_;
  MP_ASSIGN_OR_RETURN(hidden_, b.Allocate(DType::kF32, Shape{n, c.hidden_size}));
  MP_ASSIGN_OR_RETURN(q_, b.Allocate(DType::kF32, Shape{n, q_width}));
  MP_ASSIGN_OR_RETURN(o_acc_, b.Allocate(DType::kF32, Shape{n, q_width}));
  MP_ASSIGN_OR_RETURN(lse_acc_, b.Allocate(DType::kF32, Shape{n, c.num_attention_heads}));
  MP_ASSIGN_OR_RETURN(positions_, b.Allocate(DType::kI64, Shape{n}));
  MP_ASSIGN_OR_RETURN(ids_, b.Allocate(DType::kI32, Shape{n}));
  step_rows_ = n;
  // The attention partials follow the step size (up to attention_chunk rows).
  scratch_rows_ = 0;
  return OkStatus();
}

Status Engine::EnsureRingBuffers(int64_t rows) {
  if (rows <= ring_rows_) return OkStatus();
  const Shape shape{rows, config_.num_key_value_heads, config_.head_dim};
  for (int i = 0; i < 2; ++i) {
    MP_ASSIGN_OR_RETURN(ring_k_[i], backend_->Allocate(options_.kv_dtype, shape));
    MP_ASSIGN_OR_RETURN(ring_v_[i], backend_->Allocate(options_.kv_dtype, shape));
  }
  ring_rows_ = rows;
  return OkStatus();
}
}  // namespace millipede
