// RMS normalisation (Hugging Face LlamaRMSNorm, computed in fp32), optionally fused with the
// residual add that precedes it in a decoder layer.
#pragma once

#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

struct RmsNormArgs {
  // [n, hidden] F32: the input (or, with `residual`, the sub-layer output to add to it).
  ConstTensorView x;
  // [hidden] F32, BF16, F16 or F64: the per-channel gain.
  ConstTensorView weight;
  // Optional [n, hidden] F32, read and written. Absent when `residual.data == nullptr`.
  // When present: residual += x first, then the updated residual is normalised (HF:
  // hidden = residual + attn_out; out = norm(hidden)).
  TensorView residual;
  // [n, hidden] F32, BF16 or F16 (rounded to nearest even: a GEMM input already in the weights'
  // dtype, see GemmArgs::a). An F32 `out` may be the same buffer as `x` or `residual` (row-wise
  // in-place is safe); a BF16/F16 one must not overlap them.
  TensorView out;
  // Added to mean(x^2) before the square root (config.json `rms_norm_eps`). Must be >= 0.
  float eps = 1e-5f;
};

// Checks RmsNormArgs' shapes, dtypes and eps (not the data, which may live on a device).
Status RmsNormCheckArgs(const RmsNormArgs& args);

// Per row r (of x, or of the updated residual when present):
//   out[r, j] = weight[j] * (r[j] * rsqrt(mean(r^2) + eps)),
// an fp32 value, then rounded to out's dtype: a BF16/F16 `out` holds exactly what converting the
// F32 result would give.
Status RmsNormRef(const RmsNormArgs& args);

}  // namespace millipede
