#include <algorithm>
#include <cstdint>
#include <utility>

#include "common/cuda_check.h"
#include "kernels/sparse_index/block_ranges.cuh"
#include "kernels/sparse_index/block_sparse_index.cuh"
#include "kernels/sparse_index/block_sparse_index_cuda.h"

namespace millipede {
namespace {

using namespace block_ranges_cuda;  // NOLINT(build/namespaces): the builders' shared internals

// The count pass's arguments as its fill pass must repeat them (block_sparse_index.h), fill buffers
// aside.
CallFingerprint Fingerprint(const BlockSparseIndexArgs& args) {
  CallFingerprint f;
  f.Add(int64_t{1}).Add(args.tiles).Add(args.runs).Add(args.q_sums).Add(args.q_counts);
  f.Add(args.k_sums).Add(args.k_counts).Add(args.block).Add(args.group).Add(args.skip_absent);
  f.Add(args.out.range_offsets).Add(args.out.column_offsets);
  for (int64_t g = 0; g < args.q_sums.dim(1); ++g) f.Add(args.top_blocks[g]);
  return f;
}

// The kept-block bitmaps into ws.kept (tile checks, then the selection).
Status SelectBlocks(const BlockSparseIndexArgs& args, const int64_t* top, int64_t max_top,
                    int64_t words, SparseIndexCudaWorkspace::Impl& ws, cudaStream_t stream) {
  const int64_t num_blocks = args.q_sums.dim(0), n_tiles = args.tiles.dim(0);
  const int64_t items = args.q_sums.dim(1) * n_tiles;
  CheckTilesKernel<<<static_cast<unsigned>(std::min<int64_t>((n_tiles + 255) / 256, 1024)),
                     kThreads, 0, stream>>>(args.tiles.as<const int64_t>(), n_tiles, args.block, 0,
                                            num_blocks, args.q_counts.as<const float>(), ws.error);
  MP_CUDA_CHECK_LAUNCH();
  MP_RETURN_IF_ERROR(
      ws.kept.Reserve(static_cast<size_t>(items * words) * sizeof(uint32_t), stream));
  return block_sparse_cuda::Select(args, top, max_top, static_cast<uint32_t*>(ws.kept.data()),
                                   words, ws, stream);
}

}  // namespace

Status BlockSparseIndexCuda(const BlockSparseIndexArgs& args, SparseIndexCudaWorkspace& workspace,
                            cudaStream_t stream) {
  MP_RETURN_IF_ERROR(BlockSparseIndexCheckArgs(args));
  SparseIndexCudaWorkspace::Impl& ws = workspace.impl();
  const int64_t num_blocks = args.q_sums.dim(0), heads = args.q_sums.dim(1);
  const int64_t n_tiles = args.tiles.dim(0), items = heads * n_tiles;
  const int64_t max_top =
      heads > 0 ? *std::max_element(args.top_blocks, args.top_blocks + heads) : 0;
  const int64_t words = num_blocks / 32 + 1;
  CallFingerprint call = Fingerprint(args);
  // Reuse: the count pass's bitmaps (ws.kept), budgets (ws.heads) and offsets are still in place.
  const bool reuse = ReusesCountPass(ws, call, args.out, args.inputs_unchanged_since_count);
  MP_RETURN_IF_ERROR(BeginChecks(ws, args.tiles, args.runs, stream));
  MP_RETURN_IF_ERROR(
      ws.heads.Reserve(static_cast<size_t>(std::max<int64_t>(heads, 1)) * 8, stream));
  const int64_t* top = static_cast<const int64_t*>(ws.heads.data());
  if (heads > 0 && !reuse)
    MP_CUDA_CHECK(cudaMemcpyAsync(ws.heads.data(), args.top_blocks, heads * sizeof(int64_t),
                                  cudaMemcpyHostToDevice, stream));
  const bool select = items > 0 && max_top > 0;
  if (select && !reuse) MP_RETURN_IF_ERROR(SelectBlocks(args, top, max_top, words, ws, stream));
  const bool fill = !args.out.CountPass();
  RangeParams p{args.tiles.as<const int64_t>(),
                n_tiles,
                args.runs.as<const int64_t>(),
                args.runs.dim(0),
                top,
                heads,
                args.block,
                words,
                0,
                num_blocks,
                select ? static_cast<const uint32_t*>(ws.kept.data()) : nullptr,
                false,
                args.skip_absent,
                args.out.range_offsets.as<int64_t>(),
                args.out.column_offsets.as<int64_t>(),
                fill ? args.out.ranges.as<int64_t>() : nullptr,
                fill ? args.out.ranges.dim(0) : 0,
                ws.error};
  return RunRangePasses(ws, p, args.out, reuse, "block_sparse_index", std::move(call), stream);
}

}  // namespace millipede
