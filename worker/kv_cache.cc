#include "worker/kv_cache.h"

namespace millipede {

StatusOr<KvCache> KvCache::Create(Backend& backend, int64_t num_layers, int64_t num_kv_heads,
                                  int64_t head_dim, int64_t capacity, DType dtype) {
  MP_REQUIRE(dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16,
             "KV cache dtype must be F32, BF16 or F16, got ", DTypeName(dtype));
  MP_REQUIRE(capacity > 0, "KV cache capacity must be positive, got ", capacity);
  KvCache cache;
  cache.capacity_ = capacity;
  cache.dtype_ = dtype;
  for (int64_t l = 0; l < num_layers; ++l) {
    MP_ASSIGN_OR_RETURN(BackendTensor k,
                        backend.Allocate(dtype, Shape{capacity, num_kv_heads, head_dim}));
    MP_ASSIGN_OR_RETURN(BackendTensor v,
                        backend.Allocate(dtype, Shape{capacity, num_kv_heads, head_dim}));
    cache.k_.push_back(std::move(k));
    cache.v_.push_back(std::move(v));
  }
  return cache;
}

int64_t KvCache::BytesPerPosition(int64_t num_layers, int64_t num_kv_heads, int64_t head_dim,
                                  DType dtype) {
  return 2 * num_layers * num_kv_heads * head_dim * static_cast<int64_t>(DTypeSize(dtype));
}

size_t KvCache::NumBytes() const {
  size_t total = 0;
  for (const auto& t : k_) total += t.NumBytes();
  for (const auto& t : v_) total += t.NumBytes();
  return total;
}

StatusOr<KvCache::Rows> KvCache::MutableRows(int64_t layer, int64_t row, int64_t n) {
  MP_REQUIRE(layer >= 0 && layer < static_cast<int64_t>(k_.size()), "KV cache: layer ", layer,
             " out of range");
  MP_REQUIRE(n >= 0 && row >= 0 && row + n <= capacity_, "KV cache: rows [", row, ", ", row + n,
             ") exceed the capacity of ", capacity_);
  return Rows{SliceRows(k_[layer].view(), row, n), SliceRows(v_[layer].view(), row, n)};
}

Status KvCache::Write(Backend& backend, int64_t layer, int64_t row, ConstTensorView k,
                      ConstTensorView v) {
  MP_REQUIRE(v.shape == k.shape, "KV cache: K ", k.shape.ToString(), " and V ",
             v.shape.ToString(), " differ");
  MP_ASSIGN_OR_RETURN(Rows rows, MutableRows(layer, row, k.shape.dims[0]));
  MP_RETURN_IF_ERROR(backend.Convert(k, rows.k));
  MP_RETURN_IF_ERROR(backend.Convert(v, rows.v));
  return OkStatus();
}

Status KvCache::Commit(const TokenRange& positions) {
  MP_REQUIRE(positions.size() > 0, "KV cache: empty commit");
  MP_REQUIRE(rows_ + positions.size() <= capacity_, "KV cache: ", rows_ + positions.size(),
             " rows exceed the capacity of ", capacity_);
  MP_REQUIRE(ranges_.empty() || positions.begin >= ranges_.back().end,
             "KV cache: positions must be appended in increasing order");
  AppendRange(&ranges_, positions);
  rows_ += positions.size();
  return OkStatus();
}

ConstTensorView KvCache::Keys(int64_t layer, int64_t rows) const {
  return SliceRows(k_[layer].cview(), 0, rows);
}

ConstTensorView KvCache::Values(int64_t layer, int64_t rows) const {
  return SliceRows(v_[layer].cview(), 0, rows);
}

}  // namespace millipede
