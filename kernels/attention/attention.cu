// AttentionCuda: argument checks, the choice between the kernels (Hopper wgmma for prefill,
// mma.sync for decode, CUDA cores for the rest), the split-KV plan and the merge of split
// partials.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "common/cuda_check.h"
#include "kernels/attention/attention_cuda.h"
#include "kernels/attention/attention_cuda_internal.h"
#include "kernels/attention/merge_state_cuda.h"

namespace millipede {
namespace {

using attention_internal::AttentionFlashShape;
using attention_internal::AttentionKernelParams;

// A split shorter than this many key tiles costs more in setup and merge than it gains.
constexpr int64_t kMinTilesPerSplit = 4;
constexpr int64_t kMaxSplits = 1024;
constexpr size_t kWorkspaceAlign = 256;
// Positions beyond this could overflow q_offset - k_offset + row.
constexpr int64_t kMaxAbsOffset = int64_t{1} << 62;

size_t AlignUp(size_t n) { return (n + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign; }
using attention_internal::IsAligned;

// AttentionRef's checks plus the limits of the CUDA launch (offsets, head counts).
Status CheckArgs(const AttentionArgs& args) {
  MP_RETURN_IF_ERROR(AttentionCheckArgs(args));
  if (AttentionHasWindow(args) && args.k.dim(1) > AttentionKernelParams::kMaxWindowHeads)
    return UnimplementedError(detail::StrCat(
        "attention on the GPU: A-shape (sink + window) heads with more than ",
        AttentionKernelParams::kMaxWindowHeads, " KV heads are not available"));
  if (args.kv_row_visible != nullptr)
    return UnimplementedError("attention on the GPU: evicted key rows are not available yet");
  MP_REQUIRE(std::abs(args.q_offset) < kMaxAbsOffset && std::abs(args.k_offset) < kMaxAbsOffset,
             "attention: offsets ", args.q_offset, ", ", args.k_offset, " out of range");
  MP_REQUIRE(args.q.dim(1) < (int64_t{1} << 31) && args.k.dim(1) < 65536,
             "attention: too many heads");
  return OkStatus();
}

// What one call runs: its kernel and its split layout (the workspace's, too).
struct Plan : attention_internal::SplitLayout {
  bool tensor_cores = false;
  AttentionFlashShape shape = AttentionFlashShape::kPrefill;
  bool wgmma = false;  // kPrefill runs on the Hopper wgmma kernel instead of mma.sync
};

StatusOr<int64_t> SplitsFor(const AttentionArgs& args, const Plan& plan, int64_t tiles,
                            const AttentionCudaOptions& options) {
  if (options.num_splits > 0) return std::min<int64_t>(options.num_splits, tiles);
  const int64_t n_q = args.q.dim(0), group = args.q.dim(1) / args.k.dim(1);
  const int64_t rows_per_block =
      plan.wgmma ? attention_internal::AttentionWgmmaRowsPerBlock()
                 : attention_internal::AttentionFlashRowsPerBlock(plan.shape);
  const int64_t heads = attention_internal::HeavyKvHeads(
      AttentionHasWindow(args) ? args.kv_head_window : nullptr, args.sink_tokens, args.k.dim(1),
      args.k.dim(0));
  const int64_t blocks = (n_q * group + rows_per_block - 1) / rows_per_block * heads;
  if (!plan.wgmma)
    return attention_internal::AttentionFlashSplits(static_cast<int>(args.q.dim(2)), args.k.dtype,
                                                    plan.shape, blocks, tiles);
  return attention_internal::OneBlockPerSmSplits(blocks, tiles);
}

StatusOr<Plan> MakePlan(const AttentionArgs& args, const AttentionCudaOptions& options) {
  MP_RETURN_IF_ERROR(CheckArgs(args));
  const int64_t n_q = args.q.dim(0), num_q_heads = args.q.dim(1), head_dim = args.q.dim(2);
  const int64_t n_kv = args.k.dim(0);
  const int64_t keys_per_tile = attention_internal::AttentionFlashKeysPerTile();
  Plan plan;
  // Vector loads of q (16 bytes), cp.async of K/V (16 bytes) and float2 stores of o.
  plan.tensor_cores = attention_internal::AttentionFlashSupports(static_cast<int>(head_dim),
                                                                 args.k.dtype, args.v.dtype) &&
                      n_kv > 0 && n_kv < (int64_t{1} << 31) - keys_per_tile &&
                      IsAligned(args.q.data, 16) && IsAligned(args.k.data, 16) &&
                      IsAligned(args.v.data, 16) && IsAligned(args.o.data, 8);
  if (!plan.tensor_cores) {
    if (head_dim > attention_internal::kAttentionGenericMaxHeadDim)
      return UnimplementedError(detail::StrCat("attention: head_dim ", head_dim, " with ",
                                               DTypeName(args.k.dtype), " K/V is not supported"));
    plan.keys_per_split = n_kv;
    return plan;
  }
  const int64_t rows = n_q * (num_q_heads / args.k.dim(1));
  plan.shape = rows <= attention_internal::AttentionFlashRowsPerBlock(AttentionFlashShape::kDecode)
                   ? AttentionFlashShape::kDecode
                   : AttentionFlashShape::kPrefill;
  plan.wgmma = options.allow_wgmma && plan.shape == AttentionFlashShape::kPrefill &&
               attention_internal::AttentionWgmmaSupports(static_cast<int>(head_dim),
                                                          args.k.dtype, args.v.dtype);
  const int64_t tiles = (n_kv + keys_per_tile - 1) / keys_per_tile;
  int64_t splits = 1;
  if (n_q > 0) {
    MP_ASSIGN_OR_RETURN(splits, SplitsFor(args, plan, tiles, options));
  }
  static_cast<attention_internal::SplitLayout&>(plan) = attention_internal::MakeSplitLayout(
      tiles, splits, keys_per_tile, n_q, num_q_heads, head_dim, args.lse.data != nullptr);
  return plan;
}

AttentionKernelParams KernelParams(const AttentionArgs& args, const Plan& plan) {
  AttentionKernelParams p = attention_internal::ShapeParams(args);
  p.num_splits = plan.num_splits;
  p.keys_per_split = plan.keys_per_split;
  p.kv_head_rows = args.kv_head_rows.as<const int32_t>();
  if (AttentionHasWindow(args)) {
    p.windowed = true;
    p.sink_rows = std::clamp<int64_t>(args.sink_tokens - args.k_offset, 0, p.n_kv);
    for (int g = 0; g < p.num_kv_heads; ++g)
      p.window[g] = static_cast<int32_t>(
          std::min<int64_t>(args.kv_head_window[g], std::numeric_limits<int32_t>::max()));
  }
  return p;
}

Status Launch(const Plan& plan, const AttentionKernelParams& p, cudaStream_t stream) {
  return plan.wgmma ? attention_internal::LaunchAttentionWgmma(p, stream)
                    : attention_internal::LaunchAttentionFlash(p, plan.shape, stream);
}

// Split-KV: each split writes its partial (o, lse) into the workspace, then one merge.
Status RunSplit(const AttentionArgs& args, const Plan& plan, AttentionKernelParams p,
                char* workspace, cudaStream_t stream) {
  const int64_t n_q = args.q.dim(0), num_q_heads = args.q.dim(1), head_dim = args.q.dim(2);
  float* const o_parts = reinterpret_cast<float*>(workspace);
  float* const lse_parts = reinterpret_cast<float*>(workspace + plan.o_parts_bytes);
  p.o = o_parts;
  p.lse = lse_parts;
  MP_RETURN_IF_ERROR(Launch(plan, p, stream));
  TensorView lse = args.lse;
  if (lse.data == nullptr)
    lse = {workspace + plan.o_parts_bytes + plan.lse_parts_bytes, DType::kF32,
           Shape{n_q, num_q_heads}};
  const MergeStateArgs merge{
      {o_parts, DType::kF32, Shape{plan.num_splits, n_q, num_q_heads, head_dim}},
      {lse_parts, DType::kF32, Shape{plan.num_splits, n_q, num_q_heads}},
      args.o,
      lse};
  return MergeStateCuda(merge, stream);
}

}  // namespace

namespace attention_internal {

StatusOr<int64_t> OneBlockPerSmSplits(int64_t blocks, int64_t tiles) {
  int device = 0, sms = 0;
  MP_CUDA_CHECK(cudaGetDevice(&device));
  MP_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  if (blocks == 0 || blocks >= sms) return 1;
  return std::clamp<int64_t>(sms / blocks, 1, std::max<int64_t>(1, tiles / kMinTilesPerSplit));
}

AttentionKernelParams ShapeParams(const AttentionArgs& args) {
  AttentionKernelParams p;
  p.q = args.q.as<const float>();
  p.k = args.k.data;
  p.v = args.v.data;
  p.o = args.o.as<float>();
  p.lse = args.lse.as<float>();
  p.n_q = args.q.dim(0);
  p.n_kv = args.k.dim(0);
  p.num_q_heads = static_cast<int>(args.q.dim(1));
  p.num_kv_heads = static_cast<int>(args.k.dim(1));
  p.head_dim = static_cast<int>(args.q.dim(2));
  p.group = p.num_q_heads / p.num_kv_heads;
  p.causal = args.mask == AttentionMask::kCausal;
  p.causal_shift = args.q_offset - args.k_offset;
  p.scale = args.scale == 0.0f
                ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.head_dim)))
                : args.scale;
  p.k_dtype = args.k.dtype;
  p.v_dtype = args.v.dtype;
  return p;
}

SplitLayout MakeSplitLayout(int64_t tiles, int64_t wanted, int64_t keys_per_tile, int64_t n_q,
                            int64_t num_q_heads, int64_t head_dim, bool want_lse) {
  const int64_t splits = std::clamp<int64_t>(wanted, 1, std::min(kMaxSplits,
                                                                 std::max<int64_t>(tiles, 1)));
  const int64_t tiles_per_split = (tiles + splits - 1) / splits;
  SplitLayout layout;
  layout.keys_per_split = tiles_per_split * keys_per_tile;
  layout.num_splits =
      tiles_per_split > 0 ? static_cast<int>((tiles + tiles_per_split - 1) / tiles_per_split) : 1;
  if (layout.num_splits > 1) {
    const size_t rows_out = static_cast<size_t>(layout.num_splits) * n_q * num_q_heads;
    layout.o_parts_bytes = AlignUp(rows_out * head_dim * sizeof(float));
    layout.lse_parts_bytes = AlignUp(rows_out * sizeof(float));
    if (!want_lse) layout.lse_bytes = AlignUp(n_q * num_q_heads * sizeof(float));
  }
  return layout;
}

}  // namespace attention_internal

StatusOr<size_t> AttentionCudaWorkspaceBytes(const AttentionArgs& args,
                                             const AttentionCudaOptions& options) {
  MP_ASSIGN_OR_RETURN(const Plan plan, MakePlan(args, options));
  return plan.WorkspaceBytes();
}

Status AttentionCuda(const AttentionArgs& args, cudaStream_t stream) {
  return AttentionCuda(args, AttentionCudaOptions{}, stream);
}

Status AttentionCuda(const AttentionArgs& args, const AttentionCudaOptions& options,
                     cudaStream_t stream) {
  MP_ASSIGN_OR_RETURN(const Plan plan, MakePlan(args, options));
  if (args.q.NumElements() == 0) return OkStatus();
  const AttentionKernelParams params = KernelParams(args, plan);
  if (!plan.tensor_cores) return attention_internal::LaunchAttentionGeneric(params, stream);
  if (plan.num_splits == 1) return Launch(plan, params, stream);

  const size_t bytes = plan.WorkspaceBytes();
  if (options.workspace != nullptr) {
    MP_REQUIRE(options.workspace_bytes >= bytes, "attention: workspace of ",
               options.workspace_bytes, " bytes, need ", bytes);
    MP_REQUIRE(IsAligned(options.workspace, 16), "attention: workspace must be 16-byte aligned");
    return RunSplit(args, plan, params, static_cast<char*>(options.workspace), stream);
  }
  void* workspace = nullptr;
  MP_CUDA_CHECK(cudaMallocAsync(&workspace, bytes, stream));
  const Status status = RunSplit(args, plan, params, static_cast<char*>(workspace), stream);
  // Freed even when a launch failed; the launch error is the one worth reporting.
  const cudaError_t freed = cudaFreeAsync(workspace, stream);
  MP_RETURN_IF_ERROR(status);
  MP_CUDA_CHECK(freed);
  return OkStatus();
}

}  // namespace millipede
