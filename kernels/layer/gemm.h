// Matrix product with a weight in Hugging Face Linear layout: out = a @ b^T (+ bias).
#pragma once

#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

struct GemmArgs {
  // [m, k] activations, row-major: F32, or already rounded to the weight's dtype when that is
  // BF16 or F16 (what a producer op writes for a GPU GEMM, which would round F32 activations to
  // that dtype itself: see Backend::GemmInputDType).
  ConstTensorView a;
  // [n, k] F32, BF16, F16 or F64 weight, row-major ([out_features, in_features]), its rows
  // `b_row_stride` elements apart.
  ConstTensorView b;
  // Optional [n] F32, BF16, F16 or F64. Absent when `bias.data == nullptr`.
  ConstTensorView bias;
  // [m, n] F32, row-major. Must not overlap `a`.
  TensorView out;
  // false: out = a @ b^T + bias. true: out += a @ b^T + bias (e.g. adding into a residual).
  bool accumulate = false;
  // Elements from one row of `b` to the next; 0: k (contiguous). A larger stride takes a block
  // of columns out of a wider weight (decode's MLP split over ranks: down_proj[:, c0:c1] is
  // `b.data` at column c0 with stride intermediate_size). Must be 0 or at least k.
  int64_t b_row_stride = 0;
};

// Elements between rows of args.b.
inline int64_t GemmBRowStride(const GemmArgs& args) {
  return args.b_row_stride > 0 ? args.b_row_stride : args.b.dim(1);
}

// Checks GemmArgs' shapes and dtypes (not the data, which may live on a device).
Status GemmCheckArgs(const GemmArgs& args);

// out[i, j] (+)= sum_p a[i, p] * b[j, p] + bias[j], with BF16/F16 activations widened exactly.
Status GemmRef(const GemmArgs& args);

}  // namespace millipede
