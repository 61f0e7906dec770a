// The key/value cache of one sequence: per layer, K and V rows for positions [0, length).
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "common/tensor.h"
#include "worker/backend.h"

namespace millipede {

class KvCache {
 public:
  // Allocates room for `capacity` positions in every layer:
  // K and V of each layer are [capacity, num_kv_heads, head_dim] in `dtype` (F32, BF16 or F16).
  static StatusOr<KvCache> Create(Backend& backend, int64_t num_layers, int64_t num_kv_heads,
                                  int64_t head_dim, int64_t capacity, DType dtype);
  // Bytes one position takes across all layers (K and V).
  static int64_t BytesPerPosition(int64_t num_layers, int64_t num_kv_heads, int64_t head_dim,
                                  DType dtype);

  int64_t capacity() const { return capacity_; }
  int64_t length() const { return length_; }
  DType dtype() const { return dtype_; }
  size_t NumBytes() const;

  // Writes K and V rows ([n, num_kv_heads, head_dim], any float dtype, backend memory) of
  // `layer` at positions [position, position + n), converting to the cache dtype.
  // Positions must lie inside the capacity.
  Status Write(Backend& backend, int64_t layer, int64_t position, ConstTensorView k,
               ConstTensorView v);
  // Marks positions [0, length) as valid (after every layer has been written).
  Status SetLength(int64_t length);
  // K and V of `layer` for positions [0, length): [length, num_kv_heads, head_dim].
  ConstTensorView Keys(int64_t layer, int64_t length) const;
  ConstTensorView Values(int64_t layer, int64_t length) const;

 private:
  std::vector<BackendTensor> k_, v_;
  int64_t capacity_ = 0;
  int64_t length_ = 0;
  DType dtype_ = DType::kBF16;
};

}  // namespace millipede
