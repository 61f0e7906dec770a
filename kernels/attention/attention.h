// Causal (or unmasked) grouped-query attention over contiguous runs of query and key positions,
// returning the output and the log-sum-exp so that partial results can be merged
// (kernels/merge_state.h): chunked prefill, decode, split-KV and ring-attention steps.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

enum class AttentionMask {
  kCausal,  // query at position p sees keys at positions <= p
  kNone,    // every query sees every key
};

struct AttentionArgs {
  // [n_q, num_q_heads, head_dim] F32 (after RoPE).
  ConstTensorView q;
  // [n_kv, num_kv_heads, head_dim] F32, BF16 or F16 (after RoPE). num_q_heads must be a multiple
  // of num_kv_heads: q head h reads kv head h / (num_q_heads / num_kv_heads).
  ConstTensorView k;
  // [n_kv, num_kv_heads, head_dim] F32, BF16 or F16 (may differ from k's dtype).
  ConstTensorView v;
  // Global position of query row 0; row t is at q_offset + t.
  int64_t q_offset = 0;
  // Global position of key row 0; row j is at k_offset + j.
  int64_t k_offset = 0;
  AttentionMask mask = AttentionMask::kCausal;
  // Softmax scale applied to q.k. 0 (the default) means 1 / sqrt(head_dim); otherwise it must be
  // finite and > 0.
  float scale = 0.0f;
  // [n_q, num_q_heads, head_dim] F32: softmax(scale * q.k) @ v over the visible keys; 0 for a
  // query that sees no key.
  TensorView o;
  // [n_q, num_q_heads] F32: natural-log log(sum_j exp(scale * q.k_j)) over the visible keys;
  // -inf for a query that sees no key. Optional: not written when `lse.data == nullptr`.
  TensorView lse;
  // A-shape (StreamingLLM) heads, on top of `mask`: when `kv_head_window` is set and
  // kv_head_window[g] > 0, a query of KV head g at position p sees only keys at positions
  // k < sink_tokens or p - k < kv_head_window[g] (the attention sinks and a recent window).
  // Host memory, one entry per KV head (>= 0); null: every head sees what `mask` allows.
  const int64_t* kv_head_window = nullptr;
  int64_t sink_tokens = 0;
  // Token eviction (H2O-style static selection), on top of the above: when set,
  // kv_row_visible[j * num_kv_heads + g] == 0 hides key row j from KV head g's queries.
  // Host memory, [n_kv, num_kv_heads]; null: no row is hidden. CPU reference only so far.
  const uint8_t* kv_row_visible = nullptr;
  // Per-KV-head key counts, on top of the above: when set, KV head g's queries see only key rows
  // j < kv_head_rows[g] (a value outside [0, n_kv] is clamped to it). For keys gathered per head
  // and padded to the head with most (OmniKV's chosen tokens): every head in one call.
  // [num_kv_heads] I32 in the memory the op runs on (device memory for the CUDA kernels, which
  // read it without the host waiting; host memory for the CPU ops); null: every row.
  ConstTensorView kv_head_rows{};
};

// True when args.kv_head_window limits at least one head.
bool AttentionHasWindow(const AttentionArgs& args);

// Computes o and lse. Every element of o (and lse) is written; never NaN for finite inputs.
Status AttentionRef(const AttentionArgs& args);
// AttentionRef's argument checks (shapes, dtypes, scale), for any backend: the data may live on a
// device and is not read.
Status AttentionCheckArgs(const AttentionArgs& args);

}  // namespace millipede
