// The key/value cache of one sequence on one rank: per layer, K and V rows for the positions this
// rank holds. Rows are stored in arrival order; `ranges()` says which global positions they are
// (contiguous runs, merged when adjacent), so a rank can hold any subset of the sequence.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "common/tensor.h"
#include "worker/backend.h"
#include "worker/dist/shard_plan.h"

namespace millipede {

class KvCache {
 public:
  // Allocates room for `capacity` rows in every layer:
  // K and V of each layer are [capacity, num_kv_heads, head_dim] in `dtype` (F32, BF16 or F16).
  static StatusOr<KvCache> Create(Backend& backend, int64_t num_layers, int64_t num_kv_heads,
                                  int64_t head_dim, int64_t capacity, DType dtype);
  // Bytes one position takes across all layers (K and V).
  static int64_t BytesPerPosition(int64_t num_layers, int64_t num_kv_heads, int64_t head_dim,
                                  DType dtype);

  int64_t capacity() const { return capacity_; }
  // Committed rows.
  int64_t rows() const { return rows_; }
  // Global positions of rows [0, rows()), in row order.
  const std::vector<TokenRange>& ranges() const { return ranges_; }
  DType dtype() const { return dtype_; }
  size_t NumBytes() const;

  // Writes K and V ([n, num_kv_heads, head_dim], any float dtype, backend memory) of `layer` into
  // rows [row, row + n), converting to the cache dtype. Rows must lie inside the capacity.
  Status Write(Backend& backend, int64_t layer, int64_t row, ConstTensorView k, ConstTensorView v);
  // Rows [row, row + n) of `layer`'s K and V ([n, num_kv_heads, head_dim] in the cache dtype),
  // for an op that writes them itself (RopeKv). Rows must lie inside the capacity.
  struct Rows {
    TensorView k, v;
  };
  StatusOr<Rows> MutableRows(int64_t layer, int64_t row, int64_t n);
  // Appends `positions` to the committed rows (after every layer's rows were written).
  Status Commit(const TokenRange& positions);
  // K and V of `layer`, rows [0, rows): [rows, num_kv_heads, head_dim].
  ConstTensorView Keys(int64_t layer, int64_t rows) const;
  ConstTensorView Values(int64_t layer, int64_t rows) const;

 private:
  std::vector<BackendTensor> k_, v_;
  std::vector<TokenRange> ranges_;
  int64_t capacity_ = 0;
  int64_t rows_ = 0;
  DType dtype_ = DType::kBF16;
};

}  // namespace millipede
