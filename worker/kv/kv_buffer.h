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
  DType dtype = DType::kBF16;  // F32, BF16, F16 or F8E4M3
  // Bytes of one row of K and V together.
  int64_t RowBytes() const {
    return 2 * num_kv_heads * head_dim * static_cast<int64_t>(DTypeSize(dtype));
  }
};

class KvBuffer {
 public:
  static StatusOr<KvBuffer> Create(Backend& backend, const KvLayout& layout, int64_t capacity);
  // The same in chunks of KvShareChunkRows rows (common/kv_share.h) where the backend has paged
  // memory (else as Create). With `share` (such a buffer), its first `share_rows` rows (whole
  // chunks of it) are share's own memory, mapped rather than copied.
  static StatusOr<KvBuffer> CreatePaged(Backend& backend, const KvLayout& layout, int64_t capacity,
                                        const KvBuffer* share = nullptr, int64_t share_rows = 0);
  int64_t capacity() const { return capacity_; }
  // Rows of one chunk (0: not paged).
  int64_t chunk_rows() const { return chunk_rows_; }
  // Whether a row from `row` on is in a chunk another buffer maps too.
  bool SharedFrom(int64_t row) const;
  // Rows [row, row + n); the range must lie inside the capacity.
  StatusOr<KvRows> Slice(int64_t row, int64_t n) const;
  ConstKvRows Prefix(int64_t n) const;
  int64_t NumBytes() const {
    return capacity_ == 0 ? 0 : static_cast<int64_t>(k_.NumBytes() + v_.NumBytes());
  }

 private:
  BackendTensor k_, v_;
  int64_t capacity_ = 0;
  int64_t chunk_rows_ = 0;
};

}  // namespace millipede
