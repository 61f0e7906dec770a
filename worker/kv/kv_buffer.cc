#include "worker/kv/kv_buffer.h"

#include <algorithm>

#include "common/kv_share.h"

namespace millipede {
namespace {

Status CheckLayout(const KvLayout& layout, int64_t capacity) {
  MP_REQUIRE(IsKvDType(layout.dtype), "KV dtype must be F32, BF16, F16 or F8_E4M3, got ",
             DTypeName(layout.dtype));
  MP_REQUIRE(capacity > 0, "KV store capacity must be positive, got ", capacity);
  return OkStatus();
}

}  // namespace

StatusOr<KvBuffer> KvBuffer::CreatePaged(Backend& backend, const KvLayout& layout, int64_t capacity,
                                         const KvBuffer* share, int64_t share_rows) {
  const int64_t head_bytes = layout.head_dim * static_cast<int64_t>(DTypeSize(layout.dtype));
  const int64_t chunk =
      KvShareChunkRows(capacity, KvShareUnitRows(backend.page_bytes(), head_bytes));
  if (chunk == 0) {
    MP_REQUIRE(share_rows == 0, "KV store: this backend cannot share rows");
    return Create(backend, layout, capacity);
  }
  MP_RETURN_IF_ERROR(CheckLayout(layout, capacity));
  int64_t share_chunks = 0;
  if (share_rows > 0) {
    MP_REQUIRE(share != nullptr && share->chunk_rows_ > 0 && share_rows % share->chunk_rows_ == 0 &&
                   share_rows <= std::min(capacity, share->capacity_),
               "KV store: ", share_rows, " rows cannot be shared");
    share_chunks = share_rows / share->chunk_rows_;
  }
  KvBuffer b;
  const Shape shape{capacity, layout.num_kv_heads, layout.head_dim};
  const int64_t chunk_bytes = chunk * layout.num_kv_heads * head_bytes;
  MP_ASSIGN_OR_RETURN(b.k_, backend.AllocatePaged(layout.dtype, shape, chunk_bytes,
                                                  share ? &share->k_ : nullptr, share_chunks));
  MP_ASSIGN_OR_RETURN(b.v_, backend.AllocatePaged(layout.dtype, shape, chunk_bytes,
                                                  share ? &share->v_ : nullptr, share_chunks));
  b.capacity_ = capacity;
  b.chunk_rows_ = chunk;
  return b;
}

bool KvBuffer::SharedFrom(int64_t row) const {
  if (chunk_rows_ == 0 || k_.paged() == nullptr) return false;
  const int64_t row_bytes = static_cast<int64_t>(k_.NumBytes()) / capacity_;
  for (const BackendTensor* t : {&k_, &v_}) {
    int64_t begin = 0;
    for (const auto& c : t->paged()->chunks) {
      if (begin + c->bytes > row * row_bytes && c.use_count() > 1) return true;
      begin += c->bytes;
    }
  }
  return false;
}

StatusOr<KvBuffer> KvBuffer::Create(Backend& backend, const KvLayout& layout, int64_t capacity) {
  MP_RETURN_IF_ERROR(CheckLayout(layout, capacity));
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
