// Internal interface between the sparse attention launcher (sparse_attention.cu) and its Hopper
// kernel (sparse_attention_wgmma.cu). Include only from those files.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/dtype.h"
#include "common/status.h"

namespace millipede::sparse_attention_internal {

// A call's tensors and sizes, resolved on the host. Items i = g * n_tiles + t as in
// sparse_index.h; packed query rows of an item r = (query row - tile's first row) * group + (q
// head - g * group).
struct SparseAttentionParams {
  const float* q;  // [n_q, num_q_heads, head_dim] F32
  const void* k;   // [n_kv, num_kv_heads, head_dim] of kv_dtype
  const void* v;
  float* o;                       // [n_q, num_q_heads, head_dim] F32
  float* lse;                     // [n_q, num_q_heads] F32
  const int64_t* tiles;           // [n_tiles, 3]
  const int64_t* range_offsets;   // [items + 1]
  const int64_t* ranges;          // [n_ranges, 3]
  const int64_t* column_offsets;  // [items + 1]
  const int64_t* columns;         // [n_columns, 2]
  int64_t n_q = 0;
  int64_t n_kv = 0;
  int64_t n_tiles = 0;
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int group = 1;
  float scale = 1.0f;
  DType kv_dtype = DType::kBF16;
};

// True when the Hopper kernel runs this call's shapes on the current device.
bool SparseAttentionWgmmaSupports(int head_dim, DType kv_dtype);
// Launches it on `stream` (one block per item and 128 packed query rows).
Status LaunchSparseAttentionWgmma(const SparseAttentionParams& params, cudaStream_t stream);

}  // namespace millipede::sparse_attention_internal
