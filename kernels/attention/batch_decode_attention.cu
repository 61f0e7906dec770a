// BatchDecodeAttentionCuda: the batch cut into launches of at most AttentionBatchTable's entries,
// each launch's split-KV plan (from its longest sequence), the launch of the mma.sync decode
// instance over (sequence, KV head, split) and one merge of every sequence's split partials.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/cuda_check.h"
#include "kernels/attention/attention_cuda_internal.h"
#include "kernels/attention/batch_decode_attention_cuda.h"
#include "kernels/attention/merge_state_cuda.h"

namespace millipede {
namespace {

using attention_internal::AttentionBatchTable;
using attention_internal::AttentionFlashShape;
using attention_internal::AttentionKernelParams;
using attention_internal::IsAligned;

// True when every sequence can run on the batched tensor-core kernel.
bool TensorCoresFit(const BatchDecodeAttentionArgs& args) {
  const int64_t batch = BatchDecodeEntries(args), num_q_heads = args.q.dim(1);
  const int64_t head_dim = args.q.dim(2);
  if (batch == 0) return false;
  const ConstTensorView& k0 = args.k[0];
  const int64_t keys_per_tile = attention_internal::AttentionFlashKeysPerTile();
  if (!attention_internal::AttentionFlashSupports(static_cast<int>(head_dim), k0.dtype,
                                                  args.v[0].dtype) ||
      num_q_heads / k0.dim(1) >
          attention_internal::AttentionFlashRowsPerBlock(AttentionFlashShape::kDecode) ||
      !IsAligned(args.q.data, 16) || !IsAligned(args.o.data, 8) ||
      (args.kv_head_window != nullptr && k0.dim(1) > AttentionKernelParams::kMaxWindowHeads))
    return false;
  for (int64_t b = 0; b < batch; ++b) {
    const ConstTensorView& k = args.k[static_cast<size_t>(b)];
    const ConstTensorView& v = args.v[static_cast<size_t>(b)];
    if (std::max(k.dim(0), BatchDecodeEntryKeys(args, b)) >= (int64_t{1} << 31) - keys_per_tile ||
        (k.dim(0) > 0 && (!IsAligned(k.data, 16) || !IsAligned(v.data, 16))))
      return false;
  }
  return true;
}

// One launch: sequences [first, first + count), its splits following the longest.
struct LaunchPlan : attention_internal::SplitLayout {
  int64_t first = 0, count = 0;
};

StatusOr<LaunchPlan> PlanLaunch(const BatchDecodeAttentionArgs& args, int64_t first,
                                int64_t count, const AttentionCudaOptions& options) {
  const int64_t num_q_heads = args.q.dim(1), head_dim = args.q.dim(2);
  const ConstTensorView& k0 = args.k[0];
  const int64_t keys_per_tile = attention_internal::AttentionFlashKeysPerTile();
  int64_t longest = 0;
  for (int64_t b = first; b < first + count; ++b)
    longest = std::max(longest, BatchDecodeEntryKeys(args, b));
  const int64_t tiles = std::max<int64_t>(1, (longest + keys_per_tile - 1) / keys_per_tile);
  int64_t splits = options.num_splits;
  if (splits <= 0) {
    const int64_t heads = attention_internal::HeavyKvHeads(args.kv_head_window, args.sink_tokens,
                                                           k0.dim(1), longest);
    MP_ASSIGN_OR_RETURN(splits, attention_internal::AttentionFlashSplits(
                                    static_cast<int>(head_dim), k0.dtype,
                                    AttentionFlashShape::kDecode, count * heads, tiles));
  }
  LaunchPlan plan;
  static_cast<attention_internal::SplitLayout&>(plan) = attention_internal::MakeSplitLayout(
      tiles, splits, keys_per_tile, count, num_q_heads, head_dim, args.lse.data != nullptr);
  plan.first = first;
  plan.count = count;
  return plan;
}

StatusOr<std::vector<LaunchPlan>> PlanLaunches(const BatchDecodeAttentionArgs& args,
                                               const AttentionCudaOptions& options) {
  std::vector<LaunchPlan> plans;
  const int64_t batch = BatchDecodeEntries(args);
  for (int64_t first = 0; first < batch; first += AttentionBatchTable::kMaxEntries) {
    const int64_t count = std::min<int64_t>(AttentionBatchTable::kMaxEntries, batch - first);
    MP_ASSIGN_OR_RETURN(LaunchPlan plan, PlanLaunch(args, first, count, options));
    plans.push_back(plan);
  }
  return plans;
}

// The workspace the launches share (they run in turn on one stream).
size_t WorkspaceBytes(const std::vector<LaunchPlan>& plans) {
  size_t bytes = 0;
  for (const LaunchPlan& plan : plans) bytes = std::max(bytes, plan.WorkspaceBytes());
  return bytes;
}

// Runs one launch (and its merge) with its partials in `workspace`.
Status RunLaunch(const BatchDecodeAttentionArgs& args, const LaunchPlan& plan, char* workspace,
                 cudaStream_t stream) {
  const int64_t num_q_heads = args.q.dim(1), head_dim = args.q.dim(2);
  const int64_t row_elems = num_q_heads * head_dim;
  AttentionBatchTable table;
  for (int64_t i = 0; i < plan.count; ++i) {
    const size_t b = static_cast<size_t>(plan.first + i);
    table.k[i] = args.k[b].data;
    table.v[i] = args.v[b].data;
    table.n_kv[i] = args.k[b].dim(0);
    table.q_row[i] = args.q_rows.empty() ? static_cast<int32_t>(b) : args.q_rows[b];
    const bool indexed = !args.kv_row_index.empty() && args.kv_row_index[b].data != nullptr;
    table.row_index[i] = indexed ? static_cast<const int64_t*>(args.kv_row_index[b].data) : nullptr;
    if (indexed) table.n_kv[i] = args.kv_row_index[b].dim(0);
    table.head_rows[i] = args.kv_head_rows.empty() || args.kv_head_rows[b].data == nullptr
                             ? nullptr
                             : static_cast<const int32_t*>(args.kv_head_rows[b].data);
  }
  table.lengths =
      args.lengths.data != nullptr ? args.lengths.as<const int64_t>() + plan.first : nullptr;
  AttentionKernelParams p;
  p.q = args.q.as<const float>();  // the table's rows
  p.n_q = plan.count;
  p.n_kv = 0;  // per sequence, in the table
  p.num_q_heads = static_cast<int>(num_q_heads);
  p.num_kv_heads = static_cast<int>(args.k[0].dim(1));
  p.head_dim = static_cast<int>(head_dim);
  p.group = p.num_q_heads / p.num_kv_heads;
  p.causal = false;
  p.scale = args.scale == 0.0f
                ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)))
                : args.scale;
  p.num_splits = plan.num_splits;
  p.keys_per_split = plan.keys_per_split;
  p.k_dtype = args.k[0].dtype;
  p.v_dtype = args.v[0].dtype;
  if (args.kv_head_window != nullptr) {
    // Each block clamps the sinks to its sequence's keys.
    p.windowed = true;
    p.sink_rows = std::max<int64_t>(0, args.sink_tokens);
    for (int g = 0; g < p.num_kv_heads; ++g)
      p.window[g] = static_cast<int32_t>(std::min<int64_t>(
          args.kv_head_window[g], std::numeric_limits<int32_t>::max()));
  }
  float* const o = args.o.as<float>() + plan.first * row_elems;
  float* const lse = args.lse.data == nullptr ? nullptr
                                              : args.lse.as<float>() + plan.first * num_q_heads;
  if (plan.num_splits == 1) {
    p.o = o;
    p.lse = lse;
    return attention_internal::LaunchAttentionFlashBatch(p, table, stream);
  }
  float* const o_parts = reinterpret_cast<float*>(workspace);
  float* const lse_parts = reinterpret_cast<float*>(workspace + plan.o_parts_bytes);
  p.o = o_parts;
  p.lse = lse_parts;
  MP_RETURN_IF_ERROR(attention_internal::LaunchAttentionFlashBatch(p, table, stream));
  float* const merged_lse =
      lse != nullptr ? lse
                     : reinterpret_cast<float*>(workspace + plan.o_parts_bytes +
                                                plan.lse_parts_bytes);
  const MergeStateArgs merge{
      {o_parts, DType::kF32, Shape{plan.num_splits, plan.count, num_q_heads, head_dim}},
      {lse_parts, DType::kF32, Shape{plan.num_splits, plan.count, num_q_heads}},
      {o, DType::kF32, Shape{plan.count, num_q_heads, head_dim}},
      {merged_lse, DType::kF32, Shape{plan.count, num_q_heads}}};
  return MergeStateCuda(merge, stream);
}

}  // namespace

bool BatchDecodeAttentionCudaTakesLengths(const BatchDecodeAttentionArgs& args) {
  return TensorCoresFit(args);
}

bool BatchDecodeAttentionCudaTakesLengthsFor(int64_t head_dim, int64_t group, DType kv_dtype) {
  return attention_internal::AttentionFlashSupports(static_cast<int>(head_dim), kv_dtype,
                                                    kv_dtype) &&
         group <= attention_internal::AttentionFlashRowsPerBlock(AttentionFlashShape::kDecode);
}

StatusOr<size_t> BatchDecodeAttentionCudaWorkspaceBytes(const BatchDecodeAttentionArgs& args,
                                                        const AttentionCudaOptions& options) {
  MP_RETURN_IF_ERROR(BatchDecodeAttentionCheckArgs(args));
  if (TensorCoresFit(args)) {
    MP_ASSIGN_OR_RETURN(const std::vector<LaunchPlan> plans, PlanLaunches(args, options));
    return WorkspaceBytes(plans);
  }
  size_t bytes = 0;
  for (int64_t b = 0; b < BatchDecodeEntries(args); ++b) {
    MP_ASSIGN_OR_RETURN(const size_t one,
                        AttentionCudaWorkspaceBytes(BatchDecodeEntryArgs(args, b), options));
    bytes = std::max(bytes, one);
  }
  return bytes;
}

Status BatchDecodeAttentionCuda(const BatchDecodeAttentionArgs& args,
                                const AttentionCudaOptions& options, cudaStream_t stream) {
  MP_RETURN_IF_ERROR(BatchDecodeAttentionCheckArgs(args));
  if (BatchDecodeEntries(args) == 0 || args.q.NumElements() == 0) return OkStatus();
  if (!TensorCoresFit(args)) {
    if (args.lengths.data != nullptr || !args.kv_row_index.empty())
      return UnimplementedError(
          "batch decode attention: per-sequence lengths and row indices need the tensor-core "
          "decode kernel (head_dim 64 or 128, BF16 or F16 K/V, 16-byte aligned rows)");
    for (int64_t b = 0; b < BatchDecodeEntries(args); ++b)
      MP_RETURN_IF_ERROR(AttentionCuda(BatchDecodeEntryArgs(args, b), options, stream));
    return OkStatus();
  }
  MP_ASSIGN_OR_RETURN(const std::vector<LaunchPlan> plans, PlanLaunches(args, options));
  const size_t bytes = WorkspaceBytes(plans);
  void* workspace = options.workspace;
  if (bytes > 0 && workspace != nullptr) {
    MP_REQUIRE(options.workspace_bytes >= bytes, "batch decode attention: workspace of ",
               options.workspace_bytes, " bytes, need ", bytes);
    MP_REQUIRE(IsAligned(workspace, 16),
               "batch decode attention: workspace must be 16-byte aligned");
  }
  const bool owned = bytes > 0 && workspace == nullptr;
  if (owned) MP_CUDA_CHECK(cudaMallocAsync(&workspace, bytes, stream));
  // The launches share the workspace: they are ordered on the stream.
  auto run_all = [&]() -> Status {
    for (const LaunchPlan& plan : plans)
      MP_RETURN_IF_ERROR(RunLaunch(args, plan, static_cast<char*>(workspace), stream));
    return OkStatus();
  };
  const Status status = run_all();
  if (owned) {
    // Freed even when a launch failed; the launch error is the one worth reporting.
    const cudaError_t freed = cudaFreeAsync(workspace, stream);
    MP_RETURN_IF_ERROR(status);
    MP_CUDA_CHECK(freed);
  }
  return status;
}

}  // namespace millipede
