// K and V row buffers of one layer in backend memory: [capacity, num_kv_heads, head_dim] each,
// the storage the device and streaming KV stores are made of.
#pragma once

#include <cstdint>

#include "worker/backend/backend.h"
#include "worker/kv/kv_store.h"

namespace millipede {

struct KvLayout {
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  DType dtype = DType::kBF16;  // F32, BF16 or F16
  // Bytes of one row of K and V together.
  int64_t RowBytes() const {
    return 2 * num_kv_heads * head_dim * static_cast<int64_t>(DTypeSize(dtype));
  }
};

class KvBuffer {
 public:
  static StatusOr<KvBuffer> Create(Backend& backend, const KvLayout& layout, int64_t capacity);
  int64_t capacity() const { return capacity_; }
  // Rows [row, row + n); the range must lie inside the capacity.
  StatusOr<KvRows> Slice(int64_t row, int64_t n) const;
  ConstKvRows Prefix(int64_t n) const;
  int64_t NumBytes() const {
    return capacity_ == 0 ? 0 : static_cast<int64_t>(k_.NumBytes() + v_.NumBytes());
  }

 private:
  BackendTensor k_, v_;
  int64_t capacity_ = 0;
};

}  // namespace millipede
