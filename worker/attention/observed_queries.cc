#include "worker/attention/observed_queries.h"

#include <algorithm>

#include "worker/attention/scratch_buffer.h"

namespace millipede {

StatusOr<ConstTensorView> ObservedQueries::Gather(AttentionEnv& env, const PrefillInput& in,
                                                  int64_t begin, int64_t n) {
  const ModelConfig& c = env.config;
  Backend& b = env.backend;
  const int64_t heads = c.num_attention_heads;
  MP_ASSIGN_OR_RETURN(TensorView q,
                      ScratchBuffer(b, &q_, DType::kF32, Shape{n, heads * c.head_dim}));
  MP_ASSIGN_OR_RETURN(TensorView lse, ScratchBuffer(b, &acc_lse_, DType::kF32, Shape{n, heads}));
  // Zeros where other ranks hold the rows (the state of no keys has o = 0).
  MP_ASSIGN_OR_RETURN(TensorView q3, Reshape(q, Shape{n, heads, c.head_dim}));
  MP_RETURN_IF_ERROR(b.ClearState(q3, lse));
  int64_t row = 0;
  for (const TokenRange& r : in.q_ranges) {
    const int64_t first = std::max(r.begin, begin), last = std::min(r.end, begin + n);
    if (first < last)
      MP_RETURN_IF_ERROR(b.Convert(SliceRows(in.q, row + first - r.begin, last - first),
                                   SliceRows(q, first - begin, last - first)));
    row += r.size();
  }
  if (env.comm.size() > 1) {
    MP_RETURN_IF_ERROR(env.comm.AllReduce(q, ReduceOp::kSum));
    env.stats.comm_bytes += static_cast<int64_t>(q.NumBytes());
  }
  return AsConst(q3);
}

StatusOr<ConstTensorView> ObservedQueries::GlobalLse(AttentionEnv& env, ConstTensorView q,
                                                     int64_t begin, ConstKvRows rows,
                                                     std::span<const TokenRange> ranges) {
  Backend& b = env.backend;
  const int64_t n = q.dim(0), heads = q.dim(1);
  const Shape o_shape{n, heads, env.config.head_dim}, lse_shape{n, heads};
  MP_ASSIGN_OR_RETURN(TensorView acc_o, ScratchBuffer(b, &acc_o_, DType::kF32, o_shape));
  MP_ASSIGN_OR_RETURN(TensorView acc_lse, ScratchBuffer(b, &acc_lse_, DType::kF32, lse_shape));
  MP_ASSIGN_OR_RETURN(TensorView part_o, ScratchBuffer(b, &part_o_, DType::kF32, o_shape));
  MP_ASSIGN_OR_RETURN(TensorView part_lse, ScratchBuffer(b, &part_lse_, DType::kF32, lse_shape));
  MP_RETURN_IF_ERROR(b.ClearState(acc_o, acc_lse));
  int64_t row = 0;
  for (const TokenRange& r : ranges) {
    AttentionArgs a;
    a.q = q;
    a.k = SliceRows(rows.k, row, r.size());
    a.v = SliceRows(rows.v, row, r.size());
    a.q_offset = begin;
    a.k_offset = r.begin;
    a.mask = AttentionMask::kCausal;
    a.o = part_o;
    a.lse = part_lse;
    MP_RETURN_IF_ERROR(b.Attention(a));
    MP_RETURN_IF_ERROR(b.MergeStateInPlace(acc_o, acc_lse, AsConst(part_o), AsConst(part_lse)));
    row += r.size();
  }
  const int ranks = env.comm.size();
  if (ranks > 1) {
    MP_ASSIGN_OR_RETURN(TensorView all_o, ScratchBuffer(b, &all_o_, DType::kF32,
                                                        Shape{ranks, n, heads, o_shape.dims[2]}));
    MP_ASSIGN_OR_RETURN(TensorView all_lse,
                        ScratchBuffer(b, &all_lse_, DType::kF32, Shape{ranks, n, heads}));
    MP_RETURN_IF_ERROR(env.comm.AllGather(AsConst(acc_o), all_o));
    MP_RETURN_IF_ERROR(env.comm.AllGather(AsConst(acc_lse), all_lse));
    MP_RETURN_IF_ERROR(b.MergeState({AsConst(all_o), AsConst(all_lse), acc_o, acc_lse}));
    env.stats.comm_bytes += static_cast<int64_t>(acc_o.NumBytes() + acc_lse.NumBytes());
  }
  return AsConst(acc_lse);
}

}  // namespace millipede
