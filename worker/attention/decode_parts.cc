#include "worker/attention/decode_parts.h"

#include <vector>

#include "worker/attention/scratch_buffer.h"

namespace millipede {

Status AttendParts(AttentionEnv& env, ConstTensorView q, std::span<const DecodePart> parts,
                   TensorView o, TensorView lse, BackendTensor* parts_o, BackendTensor* parts_lse) {
  Backend& b = env.backend;
  if (parts.empty()) return b.ClearState(o, lse);
  const int64_t m = static_cast<int64_t>(parts.size());
  std::vector<ConstTensorView> k, v, head_rows, row_index;
  bool any_head_rows = false, any_index = false;
  for (const DecodePart& part : parts) {
    k.push_back(part.rows.k);
    v.push_back(part.rows.v);
    head_rows.push_back(part.head_rows);
    row_index.push_back(part.row_index);
    any_head_rows = any_head_rows || part.head_rows.data != nullptr;
    any_index = any_index || part.row_index.data != nullptr;
  }
  const std::vector<int32_t> q_rows(parts.size(), 0);
  BatchDecodeAttentionArgs a;
  a.q = q;
  a.k = k;
  a.v = v;
  a.q_rows = q_rows;
  if (any_head_rows) a.kv_head_rows = head_rows;
  if (any_index) a.kv_row_index = row_index;
  if (m == 1) {
    a.o = o;
    a.lse = lse;
    return b.BatchDecodeAttention(a);
  }
  const int64_t heads = q.dim(1), d = q.dim(2);
  MP_ASSIGN_OR_RETURN(a.o, ScratchBuffer(b, parts_o, DType::kF32, Shape{m, heads, d}));
  MP_ASSIGN_OR_RETURN(a.lse, ScratchBuffer(b, parts_lse, DType::kF32, Shape{m, heads}));
  MP_RETURN_IF_ERROR(b.BatchDecodeAttention(a));
  MP_ASSIGN_OR_RETURN(const ConstTensorView o_parts, Reshape(AsConst(a.o), Shape{m, 1, heads, d}));
  MP_ASSIGN_OR_RETURN(const ConstTensorView lse_parts, Reshape(AsConst(a.lse), Shape{m, 1, heads}));
  return b.MergeState({o_parts, lse_parts, o, lse});
}

}  // namespace millipede
