#include "worker/attention/decode_parts.h"

#include <algorithm>

#include "worker/attention/scratch_buffer.h"

namespace millipede {

Status AttendParts(AttentionEnv& env, ConstTensorView q,
                   std::span<const std::vector<DecodePart>> parts,
                   const DecodeStrategy::Windows& windows, TensorView o, TensorView lse,
                   BackendTensor* parts_o, BackendTensor* parts_lse) {
  Backend& b = env.backend;
  const int64_t n = static_cast<int64_t>(parts.size());
  size_t most = 0;
  const DecodePart* sample = nullptr;  // for the empty entries' shape and dtype
  bool any_head_rows = false, any_index = false;
  for (const std::vector<DecodePart>& token : parts) {
    MP_ASSERT(token.size() <= kMaxDecodeParts, "a decode token has at most ", kMaxDecodeParts,
              " parts");
    most = std::max(most, token.size());
    for (const DecodePart& part : token) {
      if (sample == nullptr) sample = &part;
      any_head_rows = any_head_rows || part.head_rows.data != nullptr;
      any_index = any_index || part.row_index.data != nullptr;
    }
  }
  if (most == 0) return b.ClearState(o, lse);
  std::vector<ConstTensorView> k, v, head_rows, row_index;
  std::vector<int32_t> q_rows;
  for (size_t p = 0; p < most; ++p) {
    for (size_t i = 0; i < parts.size(); ++i) {
      const bool has = p < parts[i].size();
      const DecodePart& part = has ? parts[i][p] : *sample;
      k.push_back(has ? part.rows.k : SliceRows(part.rows.k, 0, 0));
      v.push_back(has ? part.rows.v : SliceRows(part.rows.v, 0, 0));
      head_rows.push_back(has ? part.head_rows : ConstTensorView{});
      row_index.push_back(has ? part.row_index : ConstTensorView{});
      q_rows.push_back(static_cast<int32_t>(i));
    }
  }
  BatchDecodeAttentionArgs a;
  a.q = q;
  a.k = k;
  a.v = v;
  if (most > 1) a.q_rows = q_rows;
  if (any_head_rows) a.kv_head_rows = head_rows;
  if (any_index) a.kv_row_index = row_index;
  if (windows.window != nullptr) {
    a.kv_head_window = windows.window->data();
    a.sink_tokens = windows.sink;
  }
  if (most == 1) {
    a.o = o;
    a.lse = lse;
    return b.BatchDecodeAttention(a);
  }
  const int64_t m = static_cast<int64_t>(most), heads = q.dim(1), d = q.dim(2);
  MP_ASSIGN_OR_RETURN(a.o, ScratchBuffer(b, parts_o, DType::kF32, Shape{m * n, heads, d}));
  MP_ASSIGN_OR_RETURN(a.lse, ScratchBuffer(b, parts_lse, DType::kF32, Shape{m * n, heads}));
  MP_RETURN_IF_ERROR(b.BatchDecodeAttention(a));
  MP_ASSIGN_OR_RETURN(const ConstTensorView o_parts, Reshape(AsConst(a.o), Shape{m, n, heads, d}));
  MP_ASSIGN_OR_RETURN(const ConstTensorView lse_parts, Reshape(AsConst(a.lse), Shape{m, n, heads}));
  return b.MergeState({o_parts, lse_parts, o, lse});
}

}  // namespace millipede
