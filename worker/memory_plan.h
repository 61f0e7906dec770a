// The memory plan of one sequence on one rank (its KV stores and the step buffers it needs), computed before anything is allocated, so that a
// job that cannot fit is refused with the numbers instead of running out of memory half-way.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "checkpoint/model_config.h"
#include "common/dtype.h"

namespace millipede {

// What shapes the engine's buffers (see Engine: step buffers hold every token of a step, chunk
// scratch `prefill_chunk` tokens, attention scratch `attention_chunk` query rows).
struct MemoryPlanShape {
  DType kv_dtype = DType::kBF16;
  int64_t prefill_chunk = 512;
  int64_t attention_chunk = 512;
  int num_ranks = 1;
};

struct SequenceMemoryPlan {
  // K and V of every layer in backend memory: capacity x 2 x kv_heads x d per device-tier layer,
  // the generated rows of host-tier layers and their staging slots.
  int64_t kv_bytes = 0;
  // The context rows of host-tier layers (OmniKV's selected layers), in pinned host memory.
  int64_t host_kv_bytes = 0;
  // OmniKV's selection buffers in backend memory: the filter layers' scores and top-k, the
  // gathers of chosen rows and the groups' packed load buffers with their indices; static
  // eviction's kept-row indices and its prefill's scores.
  int64_t selection_bytes = 0;
  // Layers that keep a store per group of KV heads (DuoAttention): a step's rows of every head
  // before they go to the groups, and a group's packed queries, outputs and LSE of a step.
  int64_t head_group_bytes = 0;
  // Layers with vertical-slash or block-sparse heads: the sparse prefill scratch their steps
  // need (key scores and diagonal sums over the context, block sums, one chunk's index lists and
  // partials, ring heads packed apart), which every layer and sequence of the engine shares and
  // which grows to the widest need (sparse_prefill_scratch.h).
  int64_t index_bytes = 0;
  // A policy with fp8_attention: one attention call's FP8 operands (K and V in E4M3 over the
  // most keys a call sees, the sequence's rows on this rank, and their scales), which the
  // backend's attention scratch grows to.
  int64_t fp8_bytes = 0;
  int64_t step_bytes = 0;        // per-step F32 buffers: residual stream, queries, (o, lse)
  int64_t scratch_bytes = 0;     // per-chunk scratch: norms, K/V, MLP, attention partials, GEMM
  int64_t ring_bytes = 0;        // two K/V blocks in flight (several ranks only)
  int64_t reserve_bytes = 0;     // kernel workspaces, sampling, allocator slack
  // Step buffers the engine already holds for other sequences (they are shared, so only what
  // the new sequence needs beyond them counts).
  int64_t workspace_held_bytes = 0;
  // The sparse prefill scratch the engine already holds (shared the same way).
  int64_t index_held_bytes = 0;
  int64_t total() const {
    const int64_t workspace = step_bytes + scratch_bytes + ring_bytes;
    return kv_bytes + selection_bytes + head_group_bytes + fp8_bytes +
           std::max<int64_t>(0, index_bytes - index_held_bytes) +
           std::max<int64_t>(0, workspace - workspace_held_bytes) + reserve_bytes;
  }
  // What the backend's memory must hold: total(). What pinned host memory must hold:
  // host_kv_bytes.
  // "9.3 GiB (KV 8.0 GiB, step 1.1 GiB, scratch 0.1 GiB, ring 0 B, reserve 0.1 GiB)", then the
  // selection buffers and the host tier when there are any.
  std::string ToString() const;
};

// The plan for `capacity` positions on this rank, steps of up to `step_tokens` tokens and ring
// blocks of up to `ring_rows` rows (ignored with one rank).
SequenceMemoryPlan PlanSequenceMemory(const ModelConfig& config, const MemoryPlanShape& shape,
                                      int64_t capacity, int64_t step_tokens, int64_t ring_rows);

// The most positions one rank can hold in `free_bytes` when a whole sequence is one step of its
// own length (a prompt shard): 0 if not even one fits.
int64_t MaxSequencePositions(const ModelConfig& config, const MemoryPlanShape& shape,
                             int64_t free_bytes);

// "1.5 GiB", "512 MiB", "12 B".
std::string FormatBytes(int64_t bytes);

}  // namespace millipede
