// What follows a layer's Q/K/V projections, as one op: RoPE of the queries and keys, and the
// rotated keys and the values stored into rows of the KV cache (one GPU launch instead of two
// RoPE calls and two conversions).
#pragma once

#include <span>

#include "common/status.h"
#include "common/tensor.h"
#include "kernels/layer/rope.h"

namespace millipede {

struct RopeKvArgs {
  // [n, num_q_heads, head_dim] F32 queries, rotated in place.
  TensorView q;
  // [n, num_kv_heads, head_dim] F32 keys before RoPE (not modified).
  ConstTensorView k;
  // [n, num_kv_heads, head_dim] F32 values.
  ConstTensorView v;
  // [n] I64: the global position of each row (of q and k alike).
  ConstTensorView positions;
  // [head_dim / 2] F32, from RopeInvFreq.
  ConstTensorView inv_freq;
  // [n, num_kv_heads, head_dim] F32, BF16 or F16 (the KV cache's rows for these tokens): the
  // rotated keys and the values, rounded to nearest even. Must not overlap q, k or v.
  TensorView k_cache;
  TensorView v_cache;
  // Instead of k_cache and v_cache (left empty then): one destination per row, for the decode
  // tokens of several sequences, each stored in its own cache. Row t's key and value go to
  // k_rows[t] and v_rows[t] ([1, num_kv_heads, head_dim] each; every destination of one dtype,
  // F32, BF16 or F16, per tensor), or nowhere when both are empty views (data null): its query is
  // still rotated (a rank that does not store that token). Both n long, or both empty.
  std::span<const TensorView> k_rows = {};
  std::span<const TensorView> v_rows = {};
  // With k_rows / v_rows, optional: [n] I64 in the memory of q. Row t's key and value then go to
  // row cache_rows[t] of k_rows[t] / v_rows[t], which span a whole cache ([rows_t, num_kv_heads,
  // head_dim], 0 <= cache_rows[t] < rows_t), the row read when the op runs: a call recorded once
  // and replayed as the sequences grow (decode graphs) stores each token where the step says. The
  // references refuse a row outside its cache; a GPU, which cannot see the rows without waiting,
  // leaves such a row unwritten.
  ConstTensorView cache_rows = {};
};

// Checks RopeKvArgs' shapes and dtypes (not the data, which may live on a device).
Status RopeKvCheckArgs(const RopeKvArgs& args);

// RopeRef on q; k_cache = k rotated as RopeRef rotates it, converted (ConvertFloats);
// v_cache = v converted. Bit for bit RopeRef on q and on a copy of k, then ConvertRef of that
// copy and of v. With k_rows / v_rows, row by row into its destination.
Status RopeKvRef(const RopeKvArgs& args);

// Row t of a per-row call as a call of its own: q, k, v, positions sliced to row t, the caches
// the row's destinations (with cache_rows, host memory: its row of them, OutOfRange outside);
// with no destination the caches stay empty (rotate q only, RopeArgs).
StatusOr<RopeKvArgs> RopeKvRowArgs(const RopeKvArgs& args, int64_t t);

// A per-row call (args.k_rows set) row by row: `rope` for the rows without destinations,
// `rope_kv` for the others (a backend's own ops, or the references).
Status RopeKvByRow(const RopeKvArgs& args, Status (*rope)(const RopeArgs&),
                   Status (*rope_kv)(const RopeKvArgs&));

}  // namespace millipede
