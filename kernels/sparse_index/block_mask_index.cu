#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/cuda_check.h"
#include "kernels/sparse_index/block_mask_index_cuda.h"
#include "kernels/sparse_index/block_ranges.cuh"

namespace millipede {
namespace {

using namespace block_ranges_cuda;  // NOLINT(build/namespaces): the builders' shared internals

CallFingerprint Fingerprint(const BlockMaskIndexArgs& args) {
  CallFingerprint f;
  f.Add(int64_t{3}).Add(args.tiles).Add(args.runs).Add(args.kept).Add(args.qb_begin);
  f.Add(args.block).Add(args.skip_absent).Add(args.out.range_offsets).Add(args.out.column_offsets);
  for (int64_t g = 0; g < args.kept.dim(0); ++g) f.Add(args.heads[g] != 0 ? 1 : 0);
  return f;
}

}  // namespace

Status BlockMaskIndexCuda(const BlockMaskIndexArgs& args, SparseIndexCudaWorkspace& workspace,
                          cudaStream_t stream) {
  MP_RETURN_IF_ERROR(BlockMaskIndexCheckArgs(args));
  SparseIndexCudaWorkspace::Impl& ws = workspace.impl();
  const int64_t heads = args.kept.dim(0), n_qb = args.kept.dim(1);
  const int64_t n_tiles = args.tiles.dim(0);
  CallFingerprint call = Fingerprint(args);
  const bool reuse = ReusesCountPass(ws, call, args.out, args.inputs_unchanged_since_count);
  MP_RETURN_IF_ERROR(BeginChecks(ws, args.tiles, args.runs, stream));
  MP_RETURN_IF_ERROR(
      ws.heads.Reserve(static_cast<size_t>(std::max<int64_t>(heads, 1)) * 8, stream));
  if (heads > 0 && !reuse) {
    // From pageable memory: the call returns once `active` is staged.
    std::vector<int64_t> active(static_cast<size_t>(heads));
    for (int64_t g = 0; g < heads; ++g) active[g] = args.heads[g] != 0 ? 1 : 0;
    MP_CUDA_CHECK(cudaMemcpyAsync(ws.heads.data(), active.data(), heads * sizeof(int64_t),
                                  cudaMemcpyHostToDevice, stream));
  }
  if (n_tiles > 0 && !reuse) {
    CheckTilesKernel<<<static_cast<unsigned>(std::min<int64_t>((n_tiles + 255) / 256, 1024)),
                       kThreads, 0, stream>>>(args.tiles.as<const int64_t>(), n_tiles, args.block,
                                              args.qb_begin, args.qb_begin + n_qb, nullptr,
                                              ws.error);
    MP_CUDA_CHECK_LAUNCH();
  }
  const bool fill = !args.out.CountPass();
  RangeParams p{args.tiles.as<const int64_t>(),
                n_tiles,
                args.runs.as<const int64_t>(),
                args.runs.dim(0),
                static_cast<const int64_t*>(ws.heads.data()),
                heads,
                args.block,
                args.kept.dim(2),
                args.qb_begin,
                args.qb_begin + n_qb,
                reinterpret_cast<const uint32_t*>(args.kept.as<const int32_t>()),
                true,
                args.skip_absent,
                args.out.range_offsets.as<int64_t>(),
                args.out.column_offsets.as<int64_t>(),
                fill ? args.out.ranges.as<int64_t>() : nullptr,
                fill ? args.out.ranges.dim(0) : 0,
                ws.error};
  return RunRangePasses(ws, p, args.out, reuse, "block_mask_index", std::move(call), stream);
}

}  // namespace millipede
