#include "worker/attention/scratch_buffer.h"

#include <algorithm>

namespace millipede {

StatusOr<TensorView> ScratchBuffer(Backend& backend, BackendTensor* t, DType dtype,
                                   const Shape& shape) {
  if (t->view().data == nullptr || t->view().dtype != dtype ||
      t->view().NumElements() < shape.NumElements()) {
    MP_ASSIGN_OR_RETURN(*t,
                        backend.Allocate(dtype, Shape{std::max<int64_t>(shape.NumElements(), 1)}));
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

}  // namespace millipede
