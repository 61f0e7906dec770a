#include "worker/kv/kv_buffer.h"

namespace millipede {

StatusOr<KvBuffer> KvBuffer::Create(Backend& backend, const KvLayout& layout, int64_t capacity) {
  MP_REQUIRE(layout.dtype == DType::kF32 || layout.dtype == DType::kBF16 ||
                 layout.dtype == DType::kF16,
             "KV dtype must be F32, BF16 or F16, got ", DTypeName(layout.dtype));
  MP_REQUIRE(capacity > 0, "KV store capacity must be positive, got ", capacity);
  KvBuffer b;
  const Shape shape{capacity, layout.num_kv_heads, layout.head_dim};
  MP_ASSIGN_OR_RETURN(b.k_, backend.Allocate(layout.dtype, shape));
  MP_ASSIGN_OR_RETURN(b.v_, backend.Allocate(layout.dtype, shape));
  b.capacity_ = capacity;
  return b;
}

StatusOr<KvRows> KvBuffer::Slice(int64_t row, int64_t n) const {
  MP_REQUIRE(n >= 0 && row >= 0 && row + n <= capacity_, "KV store: rows [", row, ", ", row + n,
             ") exceed the capacity of ", capacity_);
  return KvRows{SliceRows(k_.view(), row, n), SliceRows(v_.view(), row, n)};
}

ConstKvRows KvBuffer::Prefix(int64_t n) const {
  return ConstKvRows{SliceRows(k_.cview(), 0, n), SliceRows(v_.cview(), 0, n)};
}

}  // namespace millipede
