// What a layer's attention strategies work with during a step: the backend, the ranks sharing
// the sequence, the model's shape, scratch buffers shared by every sequence of the engine (the
// step's views and the sparse prefill's grow-only buffers), and the engine's counters.
// Strategies are built per sequence (attention_strategy.h); this is the engine's part they
// borrow.
#pragma once

#include <chrono>
#include <cstdint>

#include "checkpoint/model_config.h"
#include "worker/attention/prefill_exchange.h"
#include "worker/backend/backend.h"
#include "worker/dist/communicator.h"

namespace millipede {

// Where one rank's time and bytes went, cumulative since the engine was created (ResetStats).
// Seconds are measured only with EngineOptions::profile.
struct EngineStats {
  double embed_s = 0;       // embeddings and host uploads of a step
  double qkv_s = 0;         // RMSNorm, Q/K/V projections, RoPE, K/V into the cache
  double attention_s = 0;   // attention kernels and (o, lse) merges
  double sparse_select_s = 0;  // sparse prefill: scoring and choosing columns, diagonals, blocks
  double sparse_index_s = 0;   // sparse prefill: building the index of each chunk of queries
  double omnikv_select_s = 0;  // OmniKV's filter layers: token scores, top-k, gather index
  double load_wait_s = 0;      // compute waiting for host-tier loads beyond the compute before
  double comm_wait_s = 0;   // waiting for ring transfers / decode partials beyond the compute
  double mlp_s = 0;         // output projection and MLP
  double logits_s = 0;      // final norm and LM head
  int64_t comm_bytes = 0;   // bytes this rank sent over the data plane
  int64_t host_load_bytes = 0;  // bytes OmniKV's packed loads read from the host tier
  int64_t prefill_layers = 0;  // layer passes of sharded steps
  // Ring passes of dense and A-shape heads (one per layer, sequence and group of heads) that
  // exchanged queries and partials instead of K/V blocks (prefill_exchange.h).
  int64_t pass_q_passes = 0;
  // MLP passes over decode rows split by intermediate columns over the ranks (one per layer and
  // chunk of decode tokens; EngineOptions::split_decode_mlp).
  int64_t split_mlp_passes = 0;
  int64_t decode_layers = 0;   // layer passes of decode steps
  int64_t recorded_steps = 0;  // decode steps recorded (decode graphs)
  int64_t replayed_steps = 0;  // decode steps run by replaying a recording
};

// With profiling on, Mark waits for the backend and adds the time since the previous mark to a
// bucket; off, it does nothing (no synchronisation).
class StepProfiler {
 public:
  StepProfiler(Backend& backend, bool enabled) : backend_(backend), enabled_(enabled) {}
  bool enabled() const { return enabled_; }
  Status Mark(double* bucket) {
    if (!enabled_) return OkStatus();
    MP_RETURN_IF_ERROR(backend_.Synchronize());
    const auto now = std::chrono::steady_clock::now();
    if (bucket != nullptr) *bucket += std::chrono::duration<double>(now - mark_).count();
    mark_ = now;
    return OkStatus();
  }

 private:
  Backend& backend_;
  bool enabled_;
  std::chrono::steady_clock::time_point mark_;
};

// Scratch the strategies share (sized by the engine's workspace before a step).
struct AttentionScratch {
  TensorView o_part;   // [rows, heads * head_dim] F32: one attention call's output
  TensorView lse_part; // [rows, heads] F32
  // [ring_rows, kv_heads, head_dim] KV dtype (several ranks); a pass-Q exchange uses ring_k[0],
  // ring_k[1] and ring_v[0] as plain buffers.
  TensorView ring_k[2], ring_v[2];
  // Decode partials of up to gather_rows tokens at once, for n tokens laid out as o
  // [n, heads, head_dim] then lse [n, heads] F32 (one all-gather moves both): this rank's, and
  // every rank's one after another (n * heads * (head_dim + 1) apart).
  // (The engine's split decode MLP borrows them for [rows, hidden] partials between layers.)
  TensorView partials;  // [gather_rows * max(heads * (head_dim + 1), hidden)] F32
  TensorView gathered;  // [ranks, the same] F32
  int64_t gather_rows = 0;
  int64_t attention_rows = 0;  // query rows per attention call in prefill
};

struct SparsePrefillScratch;  // sparse_prefill_scratch.h

struct AttentionEnv {
  Backend& backend;
  Communicator& comm;
  const ModelConfig& config;
  AttentionScratch scratch;
  EngineStats& stats;
  StepProfiler& profiler;
  // The sparse prefill's buffers, grown by whichever layer needs more.
  SparsePrefillScratch& sparse;
  PrefillExchange prefill_exchange = PrefillExchange::kAuto;
};

}  // namespace millipede
