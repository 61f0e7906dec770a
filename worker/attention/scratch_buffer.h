// Grow-only device buffers that strategies keep between steps, and the host round trips built on
// them.
#pragma once

#include <cstdint>
#include <vector>

#include "worker/backend/backend.h"

namespace millipede {

// A view of `shape` over `*t`, reallocated only when it must grow (or change dtype), from the
// backend's scratch memory (Backend::AllocateScratch: ops on the compute queue only).
StatusOr<TensorView> ScratchBuffer(Backend& backend, BackendTensor* t, DType dtype,
                                   const Shape& shape);

// `host` (I64) copied into a scratch buffer: a view [host.size()] (no copy when empty).
StatusOr<TensorView> UploadI64(Backend& backend, BackendTensor* t,
                               const std::vector<int64_t>& host);

// `host` [rows, cols] I64 row-major copied into a scratch buffer viewed as [rows, cols].
StatusOr<TensorView> UploadI64(Backend& backend, BackendTensor* t,
                               const std::vector<int64_t>& host, int64_t cols);

// Each row's top `k` of `scores` [rows, n] F32 (Backend::TopK into the scratch buffers `index`
// and `value`), copied to the host: index [rows * k] I32 (-1 past a short row), value [rows * k].
struct HostTopK {
  std::vector<int32_t> index;
  std::vector<float> value;
};
StatusOr<HostTopK> TopKToHost(Backend& backend, ConstTensorView scores, int64_t k,
                              BackendTensor* index, BackendTensor* value);

}  // namespace millipede
