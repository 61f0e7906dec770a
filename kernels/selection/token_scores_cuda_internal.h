// Shared by TokenScoresCuda and BatchTokenScoresCuda: the fast path's kernel over a table of
// entries (one query and its keys each), defined in token_scores.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/status.h"
#include "common/tensor.h"

namespace millipede::token_scores_internal {

// Entries per launch of the rows kernel (its table is a kernel parameter).
inline constexpr int kMaxRowsEntries = 64;

// One query's scores over its keys: q [num_heads, head_dim], k [n_k, num_kv_heads, head_dim],
// lse [num_heads], score [num_kv_heads, score_stride] (columns [0, n_k) written).
struct RowsEntry {
  const void* k = nullptr;
  const float* q = nullptr;
  const float* lse = nullptr;
  float* score = nullptr;
  int64_t n_k = 0;
};

struct RowsTable {
  RowsEntry entry[kMaxRowsEntries];
  int64_t num_kv_heads = 0;
  int64_t score_stride = 0;
  int group = 0;
  float scale = 0.0f;
};

// A table without entries for keys of num_kv_heads heads and query heads of head_dim, `group`
// per KV head, rows of scores score_stride apart; scale as TokenScoresArgs::scale (0: 1 /
// sqrt(head_dim)).
RowsTable MakeRowsTable(int64_t num_kv_heads, int64_t group, int64_t head_dim, int64_t score_stride,
                        float scale);

// The fast path's 16-byte chunks per key row for these keys (64, 128 or 256 BF16/F16 columns,
// 16-byte aligned, at most 8 query heads per KV head), or 0 when it does not take them.
int RowsPathChunks(DType k_dtype, int64_t head_dim, int64_t group, bool aligned);

// The GPU kernels' limits: head_dim <= 256, at most 65535 KV heads, a group's queries within
// 48 KiB of shared memory (InvalidArgument otherwise).
Status CheckGpuLimits(int64_t head_dim, int64_t num_kv_heads, int64_t group);

// Scores the first `entries` entries of `table` (keys of dtype `k_dtype`, `aligned` when every
// entry's keys start 16-byte aligned): one launch on the fast path, else one per entry.
Status ScoreEntries(const RowsTable& table, int entries, DType k_dtype, int64_t head_dim,
                    bool aligned, cudaStream_t stream);

}  // namespace millipede::token_scores_internal
