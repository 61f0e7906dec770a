#include <algorithm>
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/sparse_index/block_sums_cuda.h"
#include "kernels/sparse_index/sparse_index.cuh"

namespace millipede {
namespace {

using namespace sparse_index_cuda;  // NOLINT(build/namespaces): the builders' shared internals

constexpr int kThreads = 256;

// One block: each row of x in exactly one run (spans inside [0, n), pairwise disjoint, lengths
// adding up to n) and every position below num_blocks * block. O(n_runs^2), for a handful of runs.
__global__ void CheckRowsKernel(const int64_t* runs, int64_t n_runs, int64_t n, int64_t block,
                                int64_t num_blocks, ErrorWord* error) {
  __shared__ unsigned long long covered;
  if (threadIdx.x == 0) covered = 0;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < n_runs; i += blockDim.x) {
    const int64_t length = runs[3 * i + 1] - runs[3 * i], row = runs[3 * i + 2];
    if (length <= 0) continue;
    bool ok = row >= 0 && row + length <= n;
    for (int64_t j = 0; j < i && ok; ++j) {
      const int64_t other = runs[3 * j + 2], other_length = runs[3 * j + 1] - runs[3 * j];
      ok = other_length <= 0 || row + length <= other || other + other_length <= row;
    }
    if (!ok) Report(error, kRowsNotCovered, i, 0, n);
    atomicAdd(&covered, static_cast<unsigned long long>(length));
    const int64_t last = runs[3 * i + 1] - 1;
    if (last / block >= num_blocks) Report(error, kPositionBeyond, last, last / block, num_blocks);
  }
  __syncthreads();
  if (threadIdx.x == 0 && covered != static_cast<unsigned long long>(n))
    Report(error, kRowsNotCovered, -1, static_cast<int64_t>(covered), n);
}

// One block per position block b; thread e-th output (head group hg, dim c) adds x over the rows
// at positions [b * block, (b + 1) * block) and heads hg * group .. + group - 1. Rows outside
// [0, n) (broken runs, reported by the check) are skipped.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    BlockSumsKernel(const T* __restrict__ x, int64_t n, const int64_t* __restrict__ runs,
                    int64_t n_runs, int64_t num_heads, int64_t head_dim, int64_t group,
                    int64_t block, float* __restrict__ sums, float* __restrict__ counts) {
  const int64_t b = blockIdx.x, p0 = b * block, p1 = p0 + block;
  const int64_t out_heads = num_heads / group;
  const int64_t first = FirstRunEndingAfter(runs, n_runs, p0);
  for (int64_t e = threadIdx.x; e < out_heads * head_dim; e += kThreads) {
    const int64_t hg = e / head_dim, c = e - hg * head_dim;
    float acc = 0.0f;
    for (int64_t i = first; i < n_runs && runs[3 * i] < p1; ++i) {
      const int64_t lo = max(p0, runs[3 * i]), hi = min(p1, runs[3 * i + 1]);
      for (int64_t pos = lo; pos < hi; ++pos) {
        const int64_t row = runs[3 * i + 2] + (pos - runs[3 * i]);
        if (row < 0 || row >= n) continue;
        const int64_t at = (row * num_heads + hg * group) * head_dim + c;
        for (int64_t j = 0; j < group; ++j) acc += cuda_util::LoadFloat(x, at + j * head_dim);
      }
    }
    sums[(b * out_heads + hg) * head_dim + c] = acc;
  }
  if (threadIdx.x == 0) {
    int64_t rows = 0;
    for (int64_t i = first; i < n_runs && runs[3 * i] < p1; ++i)
      rows += max(int64_t{0}, min(p1, runs[3 * i + 1]) - max(p0, runs[3 * i]));
    counts[b] = static_cast<float>(rows);
  }
}

}  // namespace

Status BlockSumsCuda(const BlockSumsArgs& args, SparseIndexCudaWorkspace& workspace,
                     cudaStream_t stream) {
  MP_RETURN_IF_ERROR(BlockSumsCheckArgs(args));
  SparseIndexCudaWorkspace::Impl& ws = workspace.impl();
  const int64_t n = args.x.dim(0), num_heads = args.x.dim(1), head_dim = args.x.dim(2);
  const int64_t num_blocks = args.sums.dim(0), n_runs = args.runs.dim(0);
  MP_REQUIRE(num_blocks <= (int64_t{1} << 31) - 1, "block_sums: ", num_blocks,
             " blocks exceed the grid");
  MP_RETURN_IF_ERROR(BeginChecks(ws, ConstTensorView{}, args.runs, stream));
  CheckRowsKernel<<<1, kThreads, 0, stream>>>(args.runs.as<const int64_t>(), n_runs, n, args.block,
                                              num_blocks, ws.error);
  MP_CUDA_CHECK_LAUNCH();
  if (num_blocks > 0) {
    MP_RETURN_IF_ERROR(
        cuda_util::VisitKvDType(args.x.dtype, "block_sums x", [&](auto tag) -> Status {
          using T = typename decltype(tag)::type;
          BlockSumsKernel<T><<<static_cast<unsigned>(num_blocks), kThreads, 0, stream>>>(
              args.x.as<const T>(), n, args.runs.as<const int64_t>(), n_runs, num_heads, head_dim,
              args.group, args.block, args.sums.as<float>(), args.counts.as<float>());
          MP_CUDA_CHECK_LAUNCH();
          return OkStatus();
        }));
  }
  return Finish(ws, "block_sums", stream);
}

}  // namespace millipede
