#include <algorithm>
#include <cmath>
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/cuda_util.cuh"
#include "kernels/selection/batch_token_scores_cuda.h"
#include "kernels/selection/token_scores_cuda_internal.h"

namespace millipede {
namespace {

using token_scores_internal::kMaxRowsEntries;
using token_scores_internal::RowsTable;

constexpr int kThreads = 256;

struct Tails {
  int64_t n[kMaxRowsEntries];  // entry e's keys: its columns from n[e] on are NaN
};

// Writes NaN to columns [n_e, cols) of every KV head's row of entry blockIdx.y.
//   score [entries, num_kv_heads, cols] (this launch's first entry at `score`).
__global__ void __launch_bounds__(kThreads)
    FillTailsKernel(float* __restrict__ score, const __grid_constant__ Tails tails,
                    int64_t num_kv_heads, int64_t cols) {
  const int64_t e = blockIdx.y, begin = tails.n[e];
  float* rows = score + e * num_kv_heads * cols;
  const int64_t width = cols - begin, total = width * num_kv_heads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads)
    rows[(i / width) * cols + begin + i % width] = NAN;
}

}  // namespace

Status BatchTokenScoresCuda(const BatchTokenScoresArgs& args, cudaStream_t stream) {
  MP_RETURN_IF_ERROR(BatchTokenScoresCheckArgs(args));
  const int64_t entries = static_cast<int64_t>(args.k.size());
  if (entries == 0) return OkStatus();
  const int64_t num_heads = args.q.dim(1), head_dim = args.q.dim(2);
  const int64_t num_kv_heads = args.score.dim(1), cols = args.score.dim(2);
  const int64_t group = num_heads / num_kv_heads;
  MP_RETURN_IF_ERROR(token_scores_internal::CheckGpuLimits(head_dim, num_kv_heads, group));
  const DType dtype = args.k[0].dtype;
  const float* q = args.q.as<const float>();
  const float* lse = args.lse.as<const float>();
  float* score = args.score.as<float>();
  RowsTable table =
      token_scores_internal::MakeRowsTable(num_kv_heads, group, head_dim, cols, args.scale);
  for (int64_t first = 0; first < entries; first += kMaxRowsEntries) {
    const int count = static_cast<int>(std::min<int64_t>(kMaxRowsEntries, entries - first));
    Tails tails;
    int64_t widest_tail = 0;
    bool aligned = true;
    for (int i = 0; i < count; ++i) {
      const size_t e = static_cast<size_t>(first + i);
      const int64_t row = args.q_rows[e], n = args.k[e].dim(0);
      table.entry[i] = {args.k[e].data, q + row * num_heads * head_dim, lse + row * num_heads,
                        score + static_cast<int64_t>(e) * num_kv_heads * cols, n};
      tails.n[i] = n;
      widest_tail = std::max(widest_tail, cols - n);
      aligned = aligned && cuda_util::IsAligned(args.k[e].data, 16);
    }
    if (widest_tail > 0) {
      const int64_t blocks =
          std::min<int64_t>(1024, (widest_tail * num_kv_heads + kThreads - 1) / kThreads);
      const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(count));
      FillTailsKernel<<<grid, kThreads, 0, stream>>>(score + first * num_kv_heads * cols, tails,
                                                     num_kv_heads, cols);
      MP_CUDA_CHECK_LAUNCH();
    }
    MP_RETURN_IF_ERROR(
        token_scores_internal::ScoreEntries(table, count, dtype, head_dim, aligned, stream));
  }
  return OkStatus();
}

}  // namespace millipede
