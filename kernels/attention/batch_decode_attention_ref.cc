#include <cmath>
#include <cstring>

#include "kernels/attention/batch_decode_attention.h"

namespace millipede {

AttentionArgs BatchDecodeEntryArgs(const BatchDecodeAttentionArgs& args, int64_t b,
                                   int64_t rows) {
  AttentionArgs one;
  one.q = SliceRows(args.q, args.q_rows.empty() ? b : args.q_rows[static_cast<size_t>(b)], 1);
  one.k = args.k[static_cast<size_t>(b)];
  one.v = args.v[static_cast<size_t>(b)];
  if (rows >= 0) {
    one.k = SliceRows(one.k, 0, rows);
    one.v = SliceRows(one.v, 0, rows);
  }
  one.mask = AttentionMask::kNone;
  one.scale = args.scale;
  one.o = SliceRows(args.o, b, 1);
  if (args.lse.data != nullptr) one.lse = SliceRows(args.lse, b, 1);
  if (args.kv_head_window != nullptr) {
    one.q_offset = one.k.dim(0) - 1;
    one.kv_head_window = args.kv_head_window;
    one.sink_tokens = args.sink_tokens;
  }
  if (!args.kv_head_rows.empty()) one.kv_head_rows = args.kv_head_rows[static_cast<size_t>(b)];
  return one;
}

int64_t BatchDecodeEntryKeys(const BatchDecodeAttentionArgs& args, int64_t b) {
  const size_t i = static_cast<size_t>(b);
  if (!args.kv_row_index.empty() && args.kv_row_index[i].data != nullptr)
    return args.kv_row_index[i].dim(0);
  return args.k[i].dim(0);
}

StatusOr<AttentionArgs> BatchDecodeEntryArgsOnHost(const BatchDecodeAttentionArgs& args, int64_t b,
                                                   BatchDecodeGathered* storage) {
  MP_ASSIGN_OR_RETURN(AttentionArgs one, BatchDecodeEntryArgsAtLength(args, b));
  const size_t i = static_cast<size_t>(b);
  if (args.kv_row_index.empty() || args.kv_row_index[i].data == nullptr) return one;
  const ConstTensorView& index = args.kv_row_index[i];
  const ConstTensorView& k = args.k[i];
  const ConstTensorView& v = args.v[i];
  const int64_t m = index.dim(0), heads = k.dim(1), d = k.dim(2);
  const int64_t flat_rows = k.dim(0) * heads;
  const size_t k_row = static_cast<size_t>(d) * DTypeSize(k.dtype);
  const size_t v_row = static_cast<size_t>(d) * DTypeSize(v.dtype);
  storage->k.resize(static_cast<size_t>(m * heads) * k_row);
  storage->v.resize(static_cast<size_t>(m * heads) * v_row);
  const int64_t* rows = index.as<const int64_t>();
  for (int64_t e = 0; e < m * heads; ++e) {
    const int64_t r = rows[e];
    if (r < 0 || r >= flat_rows)
      return OutOfRangeError(detail::StrCat("batch decode attention: entry ", b, "'s row index ", r,
                                            " is outside its ", flat_rows, " rows"));
    std::memcpy(storage->k.data() + e * k_row, static_cast<const std::byte*>(k.data) + r * k_row,
                k_row);
    std::memcpy(storage->v.data() + e * v_row, static_cast<const std::byte*>(v.data) + r * v_row,
                v_row);
  }
  one.k = {storage->k.data(), k.dtype, Shape{m, heads, d}};
  one.v = {storage->v.data(), v.dtype, Shape{m, heads, d}};
  return one;
}

StatusOr<AttentionArgs> BatchDecodeEntryArgsAtLength(const BatchDecodeAttentionArgs& args,
                                                     int64_t b) {
  if (args.lengths.data == nullptr) return BatchDecodeEntryArgs(args, b);
  const int64_t rows = args.lengths.as<const int64_t>()[b];
  const int64_t n = args.k[static_cast<size_t>(b)].dim(0);
  if (rows < 0 || rows > n)
    return OutOfRangeError(detail::StrCat("batch decode attention: sequence ", b, "'s length ",
                                          rows, " is outside its ", n, " rows"));
  return BatchDecodeEntryArgs(args, b, rows);
}

Status BatchDecodeAttentionCheckArgs(const BatchDecodeAttentionArgs& args) {
  MP_REQUIRE(args.q.rank() == 3, "batch decode attention q: rank ", args.q.rank(), ", expected 3");
  const int64_t queries = args.q.dim(0), num_q_heads = args.q.dim(1), head_dim = args.q.dim(2);
  const int64_t batch = args.q_rows.empty() ? queries : static_cast<int64_t>(args.q_rows.size());
  MP_REQUIRE(static_cast<int64_t>(args.k.size()) == batch &&
                 static_cast<int64_t>(args.v.size()) == batch,
             "batch decode attention: ", args.k.size(), " K and ", args.v.size(),
             " V entries for a batch of ", batch);
  MP_RETURN_IF_ERROR(CheckTensor(args.q, "batch decode attention q", DType::kF32,
                                 Shape{queries, num_q_heads, head_dim}));
  for (size_t b = 0; b < args.q_rows.size(); ++b)
    MP_REQUIRE(args.q_rows[b] >= 0 && args.q_rows[b] < queries, "batch decode attention: entry ", b,
               "'s query row ", args.q_rows[b], " is outside the ", queries, " of q");
  // Per-entry counts and indices: one per entry, and with neither windows nor lengths.
  auto check_per_entry = [&](std::span<const ConstTensorView> views, const char* what) {
    if (views.empty()) return OkStatus();
    MP_REQUIRE(static_cast<int64_t>(views.size()) == batch,
               "batch decode attention: ", views.size(), " ", what, " entries for a batch of ",
               batch);
    MP_REQUIRE(args.kv_head_window == nullptr && args.lengths.data == nullptr,
               "batch decode attention: ", what, " go with neither windows nor lengths");
    return OkStatus();
  };
  MP_RETURN_IF_ERROR(check_per_entry(args.kv_head_rows, "kv_head_rows"));
  MP_RETURN_IF_ERROR(check_per_entry(args.kv_row_index, "kv_row_index"));
  if (!args.kv_row_index.empty()) {
    for (int64_t b = 0; b < batch; ++b) {
      const ConstTensorView& index = args.kv_row_index[static_cast<size_t>(b)];
      if (index.data == nullptr) continue;
      MP_REQUIRE(index.rank() == 2 && index.dtype == DType::kI64 &&
                     index.dim(1) == args.k[static_cast<size_t>(b)].dim(1),
                 "batch decode attention: entry ", b, "'s kv_row_index must be [rows, ",
                 args.k[static_cast<size_t>(b)].dim(1), "] I64");
    }
  }
  MP_RETURN_IF_ERROR(CheckTensor(args.o, "batch decode attention o", DType::kF32,
                                 Shape{batch, num_q_heads, head_dim}));
  if (args.lse.data != nullptr)
    MP_RETURN_IF_ERROR(CheckTensor(args.lse, "batch decode attention lse", DType::kF32,
                                   Shape{batch, num_q_heads}));
  if (args.lengths.data != nullptr)
    MP_RETURN_IF_ERROR(CheckTensor(args.lengths, "batch decode attention lengths", DType::kI64,
                                   Shape{batch}));
  MP_REQUIRE(args.scale == 0.0f || (args.scale > 0.0f && std::isfinite(args.scale)),
             "batch decode attention: scale ", args.scale,
             " must be 0 (meaning 1/sqrt(head_dim)) or > 0");
  for (int64_t b = 0; b < batch; ++b) {
    const ConstTensorView& k = args.k[static_cast<size_t>(b)];
    const ConstTensorView& v = args.v[static_cast<size_t>(b)];
    MP_REQUIRE(k.rank() == 3 && v.rank() == 3, "batch decode attention: entry ", b,
               "'s K and V must have rank 3");
    const ConstTensorView& k0 = args.k[0];
    const ConstTensorView& v0 = args.v[0];
    MP_REQUIRE(k.dim(1) == k0.dim(1) && k.dim(2) == head_dim && k.dtype == k0.dtype &&
                   v.dtype == v0.dtype,
               "batch decode attention: entry ", b, "'s K/V (", DTypeName(k.dtype), "/",
               DTypeName(v.dtype), ", ", k.dim(1), " heads of ", k.dim(2),
               ") differ from entry 0's or from q's head_dim ", head_dim);
    MP_RETURN_IF_ERROR(AttentionCheckArgs(BatchDecodeEntryArgs(args, b)));
  }
  return OkStatus();
}

Status BatchDecodeAttentionRef(const BatchDecodeAttentionArgs& args) {
  MP_RETURN_IF_ERROR(BatchDecodeAttentionCheckArgs(args));
  BatchDecodeGathered gathered;
  for (int64_t b = 0; b < BatchDecodeEntries(args); ++b) {
    MP_ASSIGN_OR_RETURN(const AttentionArgs one, BatchDecodeEntryArgsOnHost(args, b, &gathered));
    MP_RETURN_IF_ERROR(AttentionRef(one));
  }
  return OkStatus();
}

}  // namespace millipede
