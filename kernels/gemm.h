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

// out[i, j] (+)= sum_p a[i, p] * b[j, p] + bias[j], with BF16/F16 activations widened exactly.
Status GemmRef(const GemmArgs& args);

}  // namespace millipede
