// Matrix product with a weight in Hugging Face Linear layout: out = a @ b^T (+ bias).
#pragma once

#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

struct GemmArgs {
  // [m, k] F32 activations, row-major.
  ConstTensorView a;
  // [n, k] F32, BF16, F16 or F64 weight, row-major ([out_features, in_features]).
  ConstTensorView b;
  // Optional [n] F32, BF16, F16 or F64. Absent when `bias.data == nullptr`.
  ConstTensorView bias;
  // [m, n] F32, row-major. Must not overlap `a`.
  TensorView out;
  // false: out = a @ b^T + bias. true: out += a @ b^T + bias (e.g. adding into a residual).
  bool accumulate = false;
};

// Checks GemmArgs' shapes and dtypes (not the data, which may live on a device).
Status GemmCheckArgs(const GemmArgs& args);

// out[i, j] (+)= sum_p a[i, p] * b[j, p] + bias[j].
Status GemmRef(const GemmArgs& args);

}  // namespace millipede
