#include "worker/attention/scratch_buffer.h"

#include <algorithm>

namespace millipede {

StatusOr<TensorView> ScratchBuffer(Backend& backend, BackendTensor* t, DType dtype,
                                   const Shape& shape) {
  if (t->view().data == nullptr || t->view().dtype != dtype ||
      t->view().NumElements() < shape.NumElements()) {
    MP_ASSIGN_OR_RETURN(
        *t, backend.AllocateScratch(dtype, Shape{std::max<int64_t>(shape.NumElements(), 1)}));
  }
  return Reshape(SliceRows(t->view(), 0, shape.NumElements()), shape);
}

StatusOr<TensorView> UploadI64(Backend& backend, BackendTensor* t, const std::vector<int64_t>& host,
                               int64_t cols) {
  const int64_t n = static_cast<int64_t>(host.size());
  MP_REQUIRE(cols > 0 && n % cols == 0, "upload: ", n, " values are not rows of ", cols);
  MP_ASSIGN_OR_RETURN(TensorView dst,
                      ScratchBuffer(backend, t, DType::kI64, Shape{n / cols, cols}));
  if (n > 0)
    MP_RETURN_IF_ERROR(
        backend.CopyFromHost(ConstTensorView{host.data(), DType::kI64, dst.shape}, dst));
  return dst;
}

StatusOr<TensorView> UploadI64(Backend& backend, BackendTensor* t,
                               const std::vector<int64_t>& host) {
  MP_ASSIGN_OR_RETURN(TensorView v, UploadI64(backend, t, host, 1));
  return Reshape(v, Shape{v.dim(0)});
}

StatusOr<HostTopK> TopKToHost(Backend& backend, ConstTensorView scores, int64_t k,
                              BackendTensor* index, BackendTensor* value) {
  const int64_t rows = scores.dim(0);
  MP_ASSIGN_OR_RETURN(TensorView dev_index,
                      ScratchBuffer(backend, index, DType::kI32, Shape{rows, k}));
  MP_ASSIGN_OR_RETURN(TensorView dev_value,
                      ScratchBuffer(backend, value, DType::kF32, Shape{rows, k}));
  MP_RETURN_IF_ERROR(backend.TopK({scores, k, dev_index, dev_value}));
  HostTopK out;
  out.index.resize(static_cast<size_t>(rows * k));
  out.value.resize(out.index.size());
  MP_RETURN_IF_ERROR(backend.CopyToHost(AsConst(dev_index),
                                        {out.index.data(), DType::kI32, dev_index.shape}));
  MP_RETURN_IF_ERROR(backend.CopyToHost(AsConst(dev_value),
                                        {out.value.data(), DType::kF32, dev_value.shape}));
  return out;
}

}  // namespace millipede
