// Decode attention of a batch of entries in one call: each entry one query token against its own
// keys (every key precedes the token, so no mask), with its own K/V buffer and length. The
// continuous-batching step's decode heads: one launch for every sequence of the step instead of
// one call per sequence (kernels/attention/attention.h is the single-sequence op; a batch of one
// equals it with AttentionMask::kNone). Several entries may read the same query row (`q_rows`)
// and see per-KV-head prefixes of their keys (`kv_head_rows`): a sparse decode token's parts
// (OmniKV's chosen rows and its generated rows, an eviction cache's kept and recent rows), whose
// partial results the caller merges by log-sum-exp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "common/tensor.h"
#include "kernels/attention/attention.h"

namespace millipede {

struct BatchDecodeAttentionArgs {
  // [queries, num_q_heads, head_dim] F32 (after RoPE): row b is entry b's token (queries ==
  // batch), or, with `q_rows`, row q_rows[b] is.
  ConstTensorView q;
  // batch entries, entry b [n_b, num_kv_heads, head_dim] (after RoPE): sequence b's keys and
  // values. Every entry shares num_kv_heads, head_dim and the K dtype (F32, BF16 or F16), and
  // likewise the V dtype; n_b may differ and may be 0. num_q_heads must be a multiple of
  // num_kv_heads: q head h reads kv head h / (num_q_heads / num_kv_heads).
  std::span<const ConstTensorView> k;
  std::span<const ConstTensorView> v;
  // Softmax scale applied to q.k; 0 (the default) means 1 / sqrt(head_dim), else finite and > 0.
  float scale = 0.0f;
  // [batch, num_q_heads, head_dim] F32: softmax(scale * q_b.k) @ v over sequence b's keys; 0 for
  // a sequence without keys.
  TensorView o;
  // [batch, num_q_heads] F32: natural-log LSE over sequence b's keys; -inf for a sequence without
  // keys. Optional: not written when `lse.data == nullptr`.
  TensorView lse;
  // A-shape heads (DuoAttention's streaming heads) of every sequence: when set, KV head g with
  // kv_head_window[g] > 0 sees only the keys at positions k < sink_tokens or p - k <
  // kv_head_window[g], sequence b's keys being at positions 0 .. n_b - 1 and its token at
  // p = n_b - 1 (a cache that holds every position, the token's own last). Host memory,
  // [num_kv_heads]; null: every key.
  const int64_t* kv_head_window = nullptr;
  int64_t sink_tokens = 0;
  // Optional: [batch] I64 in the memory of q. Sequence b then has only the first lengths[b] rows
  // of k[b] / v[b] (0 <= lengths[b] <= n_b; its token at position lengths[b] - 1 for the
  // windows), read when the op runs: a call recorded once and replayed as the sequences grow
  // (decode graphs) passes views as long as the longest it may see. The references refuse a
  // length outside [0, n_b]; a GPU clamps it. On a GPU it needs the tensor-core decode kernel
  // (BatchDecodeAttentionCudaTakesLengths).
  ConstTensorView lengths = {};
  // Optional: [batch] host memory, entry b's query row of q (each in [0, queries)); empty: row b.
  std::span<const int32_t> q_rows = {};
  // Optional: batch entries, entry b empty (every row) or [num_kv_heads] I32 in the memory of q:
  // KV head g of entry b sees only its first kv_head_rows[b][g] rows (clamped to [0, n_b]), as
  // AttentionArgs::kv_head_rows; read when the op runs. Not with kv_head_window or lengths.
  std::span<const ConstTensorView> kv_head_rows = {};
  // Optional: batch entries, entry b empty (its rows in order) or [m_b, num_kv_heads] I64 in the
  // memory of q: entry b then has m_b keys, key j of KV head g being the flat row
  // kv_row_index[b][j][g] of k[b] / v[b] viewed as [n_b * num_kv_heads, head_dim] (OmniKV's chosen
  // rows, read in place rather than gathered first). Each value must lie in [0, n_b *
  // num_kv_heads): the references refuse others, a GPU reads what they name. Not with
  // kv_head_window or lengths; on a GPU it needs the tensor-core decode kernel.
  std::span<const ConstTensorView> kv_row_index = {};
};

// An indexed entry's keys and values gathered on the host (BatchDecodeEntryArgsOnHost).
struct BatchDecodeGathered {
  std::vector<std::byte> k, v;
};

// The entries of a batch: k.size() (q's rows, or q_rows' size).
inline int64_t BatchDecodeEntries(const BatchDecodeAttentionArgs& args) {
  return static_cast<int64_t>(args.k.size());
}

// Shapes, dtypes and the scale (not the data, which may live on a device).
Status BatchDecodeAttentionCheckArgs(const BatchDecodeAttentionArgs& args);

// Entry b's call of the single-sequence op over the first `rows` of its keys (AttentionMask::
// kNone, its query row, row b of o and lse, its kv_head_rows; with windows, the token at position
// rows - 1 and the keys from position 0); rows < 0: all n_b (args.lengths is not read).
AttentionArgs BatchDecodeEntryArgs(const BatchDecodeAttentionArgs& args, int64_t b,
                                   int64_t rows = -1);
// Entry b's keys: n_b, or m_b for an indexed entry.
int64_t BatchDecodeEntryKeys(const BatchDecodeAttentionArgs& args, int64_t b);
// Sequence b's call with args.lengths applied (host memory; OutOfRange outside [0, n_b]).
StatusOr<AttentionArgs> BatchDecodeEntryArgsAtLength(const BatchDecodeAttentionArgs& args,
                                                     int64_t b);

// Entry b's call with everything in host memory: lengths applied, an indexed entry's rows
// gathered into `storage` (OutOfRange for an index outside its rows).
StatusOr<AttentionArgs> BatchDecodeEntryArgsOnHost(const BatchDecodeAttentionArgs& args, int64_t b,
                                                   BatchDecodeGathered* storage);

// Computes o and lse, sequence by sequence with AttentionRef (mask kNone).
Status BatchDecodeAttentionRef(const BatchDecodeAttentionArgs& args);

}  // namespace millipede
