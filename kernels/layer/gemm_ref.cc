#include <algorithm>
#include <vector>

#include "kernels/layer/gemm.h"
#include "kernels/memory/float_rows.h"

namespace millipede {
namespace {

// Rows of `a` processed per pass over `b`: each converted weight row is reused this many times,
// and the block of `a` (kRowBlock * k floats) stays in cache while every weight row streams by.
constexpr int64_t kRowBlock = 16;

// Products of two floats are exact in double (24 + 24 significant bits < 53), so the only
// rounding is in the sum, whose error is ~k * 2^-53 relative to sum |a_p b_p|: far below fp32
// resolution for any realistic k, which makes this a fair oracle for fp32 GPU kernels.
double Dot(const float* a, const float* b, int64_t k) {
  double acc = 0.0;
  for (int64_t p = 0; p < k; ++p) acc += static_cast<double>(a[p]) * b[p];
  return acc;
}

}  // namespace

Status GemmCheckArgs(const GemmArgs& args) {
  MP_REQUIRE(args.a.rank() == 2, "gemm a: rank ", args.a.rank(), ", expected 2");
  MP_RETURN_IF_ERROR(CheckFloatTensor(args.b, "gemm b", 2));
  const int64_t m = args.a.dim(0);
  const int64_t k = args.a.dim(1);
  const int64_t n = args.b.dim(0);
  const bool rounded_a = (args.a.dtype == DType::kBF16 || args.a.dtype == DType::kF16) &&
                         args.a.dtype == args.b.dtype;
  MP_REQUIRE(args.a.dtype == DType::kF32 || rounded_a, "gemm a: dtype ", DTypeName(args.a.dtype),
             " with a ", DTypeName(args.b.dtype),
             " weight (expected F32, or BF16/F16 equal to the weight's dtype)");
  MP_RETURN_IF_ERROR(CheckTensor(args.a, "gemm a", args.a.dtype, Shape{m, k}));
  MP_REQUIRE(args.b.dim(1) == k, "gemm b: shape ", args.b.shape.ToString(), ", expected [", n, ", ",
             k, "] (inner dimension of a is ", k, ")");
  MP_REQUIRE(args.b_row_stride == 0 || args.b_row_stride >= k, "gemm b: row stride ",
             args.b_row_stride, " is shorter than its rows (", k, ")");
  const bool has_bias = args.bias.data != nullptr;
  if (has_bias) {
    MP_RETURN_IF_ERROR(CheckFloatTensor(args.bias, "gemm bias", 1));
    MP_REQUIRE(args.bias.dim(0) == n, "gemm bias: shape ", args.bias.shape.ToString(),
               ", expected [", n, "]");
  }
  return CheckTensor(args.out, "gemm out", DType::kF32, Shape{m, n});
}

Status GemmRef(const GemmArgs& args) {
  MP_RETURN_IF_ERROR(GemmCheckArgs(args));
  const int64_t m = args.a.dim(0);
  const int64_t k = args.a.dim(1);
  const int64_t n = args.b.dim(0);
  const int64_t ldb = GemmBRowStride(args);
  const bool has_bias = args.bias.data != nullptr;

  std::vector<float> bias(n, 0.0f);
  if (has_bias) LoadFloatRow(args.bias.data, args.bias.dtype, 0, n, bias.data());
  float* out = args.out.as<float>();
  std::vector<float> b_row(args.b.dtype == DType::kF32 ? 0 : k);
  // BF16/F16 activations are widened (exactly) one row block at a time.
  std::vector<float> a_block(args.a.dtype == DType::kF32 ? 0 : kRowBlock * k);
  for (int64_t i0 = 0; i0 < m; i0 += kRowBlock) {
    const int64_t i1 = std::min(m, i0 + kRowBlock);
    // Row i of the block starts at a + (i - i0) * k.
    const float* a = a_block.data();
    if (args.a.dtype == DType::kF32)
      a = args.a.as<const float>() + i0 * k;
    else
      LoadFloatRow(args.a.data, args.a.dtype, i0 * k, (i1 - i0) * k, a_block.data());
    for (int64_t j = 0; j < n; ++j) {
      const float* b;
      if (args.b.dtype == DType::kF32) {
        b = args.b.as<const float>() + j * ldb;
      } else {
        LoadFloatRow(args.b.data, args.b.dtype, j * ldb, k, b_row.data());
        b = b_row.data();
      }
      for (int64_t i = i0; i < i1; ++i) {
        const double value = Dot(a + (i - i0) * k, b, k) + bias[j];
        float& dst = out[i * n + j];
        dst = args.accumulate ? static_cast<float>(dst + value) : static_cast<float>(value);
      }
    }
  }
  return OkStatus();
}

}  // namespace millipede
