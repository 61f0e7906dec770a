// AttentionFp8Cuda: checks, the workspace (FP8 operands, then split partials), the split plan,
// the operands pass, the kernel and the merge.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/attention/attention_cuda_internal.h"
#include "kernels/attention/attention_fp8_cuda.h"
#include "kernels/attention/attention_fp8_operands_cuda.h"
#include "kernels/attention/merge_state_cuda.h"

namespace millipede {
namespace {

using attention_internal::AttentionKernelParams;
using attention_internal::IsAligned;
using attention_internal::kAttentionFp8KeysPerTile;
using attention_internal::kAttentionFp8RowsPerBlock;

constexpr size_t kAlign = 256;
size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Where the workspace's parts start (bytes from its base) and how the keys are split.
struct Plan {
  attention_internal::SplitLayout split;
  size_t k8 = 0, k_scale = 0, v8t = 0, v_scale = 0, parts = 0, total = 0;
};

StatusOr<int64_t> SplitsFor(const AttentionArgs& args, int64_t tiles,
                            const AttentionCudaOptions& options) {
  if (options.num_splits > 0) return std::min<int64_t>(options.num_splits, tiles);
  const int64_t rows = args.q.dim(0) * (args.q.dim(1) / args.k.dim(1));
  const int64_t blocks =
      (rows + kAttentionFp8RowsPerBlock - 1) / kAttentionFp8RowsPerBlock * args.k.dim(1);
  return attention_internal::OneBlockPerSmSplits(blocks, tiles);
}

StatusOr<Plan> MakePlan(const AttentionArgs& args, const AttentionCudaOptions& options) {
  MP_RETURN_IF_ERROR(AttentionFp8CheckArgs(args));
  const int64_t n_q = args.q.dim(0), num_q_heads = args.q.dim(1), head_dim = args.q.dim(2);
  const int64_t n_kv = args.k.dim(0), num_kv_heads = args.k.dim(1);
  if (head_dim != 128 && head_dim != 64)
    return UnimplementedError(detail::StrCat("fp8 attention on the GPU: head_dim ", head_dim,
                                             " (64 and 128 are available)"));
  if (!AttentionFp8CudaRuns(head_dim))
    return UnimplementedError("fp8 attention on the GPU needs a compute capability 9.0 device");
  MP_REQUIRE(IsAligned(args.q.data, 16) && IsAligned(args.k.data, 16) &&
                 IsAligned(args.v.data, 16) && IsAligned(args.o.data, 8),
             "fp8 attention: q, k and v must be 16-byte aligned");
  MP_REQUIRE(n_kv < (int64_t{1} << 31) - kAttentionFp8KeysPerTile && num_kv_heads < 65536 &&
                 num_q_heads < (int64_t{1} << 31),
             "fp8 attention: too many keys or heads");
  MP_REQUIRE(
      std::abs(args.q_offset) < (int64_t{1} << 62) && std::abs(args.k_offset) < (int64_t{1} << 62),
      "fp8 attention: offsets out of range");
  const int64_t tiles = Fp8AttentionKeyBlocks(n_kv);
  int64_t splits = 1;
  if (n_q > 0 && n_kv > 0) {
    MP_ASSIGN_OR_RETURN(splits, SplitsFor(args, tiles, options));
  }
  Plan plan;
  plan.split = attention_internal::MakeSplitLayout(tiles, splits, kAttentionFp8KeysPerTile, n_q,
                                                   num_q_heads, head_dim, args.lse.data != nullptr);
  const size_t row = static_cast<size_t>(num_kv_heads * head_dim);
  plan.k_scale = AlignUp(static_cast<size_t>(n_kv) * row);
  plan.v8t = plan.k_scale + AlignUp(static_cast<size_t>(num_kv_heads * tiles) * sizeof(float));
  plan.v_scale = plan.v8t + AlignUp(static_cast<size_t>(Fp8AttentionPaddedKeys(n_kv)) * row);
  plan.parts = plan.v_scale + AlignUp(row * sizeof(float));
  plan.total = plan.parts + plan.split.WorkspaceBytes();
  return plan;
}

AttentionKernelParams KernelParams(const AttentionArgs& args, const Plan& plan, char* ws) {
  AttentionKernelParams p = attention_internal::ShapeParams(args);
  p.k = ws + plan.k8;
  p.v = ws + plan.v8t;
  p.num_splits = plan.split.num_splits;
  p.keys_per_split = plan.split.keys_per_split;
  p.k_dtype = DType::kF8E4M3;
  p.v_dtype = DType::kF8E4M3;
  return p;
}

Status Run(const AttentionArgs& args, const Plan& plan, char* ws, cudaStream_t stream) {
  const int64_t n_q = args.q.dim(0), num_q_heads = args.q.dim(1), head_dim = args.q.dim(2);
  const int64_t n_kv = args.k.dim(0), num_kv_heads = args.k.dim(1);
  const int64_t blocks = Fp8AttentionKeyBlocks(n_kv), padded = Fp8AttentionPaddedKeys(n_kv);
  const Fp8AttentionOperandsArgs operands{
      args.k,
      args.v,
      {ws + plan.k8, DType::kF8E4M3, args.k.shape},
      {ws + plan.k_scale, DType::kF32, Shape{num_kv_heads, blocks}},
      {ws + plan.v8t, DType::kF8E4M3, Shape{num_kv_heads, head_dim, padded}},
      {ws + plan.v_scale, DType::kF32, Shape{num_kv_heads, head_dim}}};
  MP_RETURN_IF_ERROR(Fp8AttentionOperandsCuda(operands, stream));
  AttentionKernelParams p = KernelParams(args, plan, ws);
  const attention_internal::AttentionFp8Scales scales{
      reinterpret_cast<const float*>(ws + plan.k_scale),
      reinterpret_cast<const float*>(ws + plan.v_scale), blocks, padded};
  if (plan.split.num_splits == 1)
    return attention_internal::LaunchAttentionFp8Wgmma(p, scales, stream);
  char* const parts = ws + plan.parts;
  float* const o_parts = reinterpret_cast<float*>(parts);
  float* const lse_parts = reinterpret_cast<float*>(parts + plan.split.o_parts_bytes);
  p.o = o_parts;
  p.lse = lse_parts;
  MP_RETURN_IF_ERROR(attention_internal::LaunchAttentionFp8Wgmma(p, scales, stream));
  TensorView lse = args.lse;
  if (lse.data == nullptr)
    lse = {parts + plan.split.o_parts_bytes + plan.split.lse_parts_bytes, DType::kF32,
           Shape{n_q, num_q_heads}};
  const MergeStateArgs merge{
      {o_parts, DType::kF32, Shape{plan.split.num_splits, n_q, num_q_heads, head_dim}},
      {lse_parts, DType::kF32, Shape{plan.split.num_splits, n_q, num_q_heads}},
      args.o,
      lse};
  return MergeStateCuda(merge, stream);
}

}  // namespace

bool AttentionFp8CudaRuns(int64_t head_dim) {
  return (head_dim == 64 || head_dim == 128) &&
         attention_internal::AttentionWgmmaSupports(128, DType::kBF16, DType::kBF16);
}

StatusOr<size_t> AttentionFp8CudaWorkspaceBytes(const AttentionArgs& args,
                                                const AttentionCudaOptions& options) {
  MP_ASSIGN_OR_RETURN(const Plan plan, MakePlan(args, options));
  return plan.total;
}

Status AttentionFp8Cuda(const AttentionArgs& args, const AttentionCudaOptions& options,
                        cudaStream_t stream) {
  MP_ASSIGN_OR_RETURN(const Plan plan, MakePlan(args, options));
  if (args.q.NumElements() == 0) return OkStatus();
  if (args.k.dim(0) == 0) {
    // No keys: every row sees none (o = 0, lse = -inf), as the reference writes them.
    return AttentionCuda(args, options, stream);
  }
  if (options.workspace != nullptr) {
    MP_REQUIRE(options.workspace_bytes >= plan.total, "fp8 attention: workspace of ",
               options.workspace_bytes, " bytes, need ", plan.total);
    MP_REQUIRE(IsAligned(options.workspace, 256),
               "fp8 attention: workspace must be 256-byte aligned");
    return Run(args, plan, static_cast<char*>(options.workspace), stream);
  }
  void* workspace = nullptr;
  MP_CUDA_CHECK(cudaMallocAsync(&workspace, plan.total, stream));
  const Status status = Run(args, plan, static_cast<char*>(workspace), stream);
  const cudaError_t freed = cudaFreeAsync(workspace, stream);
  MP_RETURN_IF_ERROR(status);
  MP_CUDA_CHECK(freed);
  return OkStatus();
}

}  // namespace millipede
