#include "kernels/cpu/gemm_cpu.h"

#include <cblas.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vector_math.h"

namespace millipede {
namespace {

using cpu::ParallelFor;

// Up to this many rows of a, each weight row is read once and dotted with every row of a
// (bandwidth-bound decode); above it sgemm's blocking wins.
constexpr int64_t kDotPathRows = 4;
// Weight rows per work item: a multiple of the sgemm kernels' widths.
constexpr int64_t kPanelRows = 128;
// Widened weight floats per panel (1 MiB): longer rows are taken in slices of the inner dimension.
constexpr int64_t kPanelFloats = 256 * 1024;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct GemmPlan {
  const GemmArgs* args;
  int64_t m, n, k;    // out [m, n] = a [m, k] @ b^T
  int64_t ldb;        // elements between rows of b
  const float* a;     // [m, k] F32 (a itself, or its widened copy)
  const float* bias;  // [n] F32, or null
  float* out;
};

void AddBias(const GemmPlan& p, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  if (p.bias == nullptr) return;
  for (int64_t i = i0; i < i1; ++i) {
    float* row = p.out + i * p.n;
#pragma omp simd
    for (int64_t j = j0; j < j1; ++j) row[j] += p.bias[j];
  }
}

// Rows [i0, i1) x columns [j0, j1) of out. An F32 weight is read in place; others are widened
// slice by slice of the inner dimension into a per-thread panel.
void GemmTile(const GemmPlan& p, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  const ConstTensorView& b = p.args->b;
  const int64_t rows = i1 - i0, cols = j1 - j0, k = p.k;
  float* c = p.out + i0 * p.n + j0;
  const float* a = p.a + i0 * k;
  const float first_beta = p.args->accumulate ? 1.0f : 0.0f;
  if (k == 0) {
    // No products: out is the bias (added below), or keeps its value.
    if (!p.args->accumulate)
      for (int64_t i = 0; i < rows; ++i) std::fill_n(c + i * p.n, cols, 0.0f);
  } else if (b.dtype == DType::kF32) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, k, 1.0f, a, k,
                b.as<const float>() + j0 * p.ldb, p.ldb, first_beta, c, p.n);
  } else {
    thread_local std::vector<float> panel;
    const int64_t slice = std::min(k, std::max<int64_t>(64, kPanelFloats / cols));
    panel.resize(static_cast<size_t>(cols * slice));
    for (int64_t p0 = 0; p0 < k; p0 += slice) {
      const int64_t width = std::min(slice, k - p0);
      for (int64_t j = 0; j < cols; ++j)
        cpu::WidenRow(b.data, b.dtype, (j0 + j) * p.ldb + p0, width, panel.data() + j * width);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, width, 1.0f, a + p0, k,
                  panel.data(), width, p0 == 0 ? first_beta : 1.0f, c, p.n);
    }
  }
  AddBias(p, i0, i1, j0, j1);
}

// Weight rows [j0, j1) against every row of a (m <= kDotPathRows).
void DotRows(const GemmPlan& p, int64_t j0, int64_t j1) {
  const ConstTensorView& b = p.args->b;
  thread_local std::vector<float> row;
  row.resize(static_cast<size_t>(p.k));
  for (int64_t j = j0; j < j1; ++j) {
    const float* w = b.as<const float>() + j * p.ldb;
    if (b.dtype != DType::kF32) {
      cpu::WidenRow(b.data, b.dtype, j * p.ldb, p.k, row.data());
      w = row.data();
    }
    for (int64_t i = 0; i < p.m; ++i) {
      float value = cpu::Dot(p.a + i * p.k, w, p.k);
      if (p.bias != nullptr) value += p.bias[j];
      float& dst = p.out[i * p.n + j];
      dst = p.args->accumulate ? dst + value : value;
    }
  }
}

}  // namespace

Status GemmCpu(const GemmArgs& args) {
  MP_RETURN_IF_ERROR(GemmCheckArgs(args));
  GemmPlan p{.args = &args,
             .m = args.a.dim(0),
             .n = args.b.dim(0),
             .k = args.a.dim(1),
             .ldb = GemmBRowStride(args),
             .a = args.a.as<const float>(),
             .bias = nullptr,
             .out = args.out.as<float>()};
  if (p.m == 0 || p.n == 0) return OkStatus();
  const double work = 2.0 * static_cast<double>(p.m) * static_cast<double>(p.n) * p.k;

  std::vector<float> a_wide, bias;
  if (args.a.dtype != DType::kF32) {
    // BF16/F16 activations (a GPU backend's GEMM input) are widened exactly, once.
    a_wide.resize(static_cast<size_t>(p.m * p.k));
    ParallelFor(p.m, static_cast<double>(p.m) * p.k, [&](int64_t i) {
      cpu::WidenRow(args.a.data, args.a.dtype, i * p.k, p.k, a_wide.data() + i * p.k);
    });
    p.a = a_wide.data();
  }
  if (args.bias.data != nullptr) {
    bias.resize(static_cast<size_t>(p.n));
    cpu::WidenRow(args.bias.data, args.bias.dtype, 0, p.n, bias.data());
    p.bias = bias.data();
  }

  if (p.m <= kDotPathRows) {
    const int64_t per_item = 64;
    ParallelFor(CeilDiv(p.n, per_item), work,
                [&](int64_t t) { DotRows(p, t * per_item, std::min(p.n, (t + 1) * per_item)); });
    return OkStatus();
  }
  // Enough tiles to keep every thread busy: the weight in panels of kPanelRows rows, a in as
  // many row blocks as that still needs (a panel is widened once per row block).
  const int64_t col_blocks = CeilDiv(p.n, kPanelRows);
  const int64_t row_blocks =
      std::min(CeilDiv(p.m, 16), CeilDiv(2 * int64_t{cpu::CpuThreads()}, col_blocks));
  const int64_t block_rows = CeilDiv(p.m, row_blocks);
  ParallelFor(row_blocks * col_blocks, work, [&](int64_t t) {
    const int64_t i0 = (t / col_blocks) * block_rows, j0 = (t % col_blocks) * kPanelRows;
    if (i0 >= p.m) return;  // the rounding up of block_rows can leave the last blocks empty
    GemmTile(p, i0, std::min(p.m, i0 + block_rows), j0, std::min(p.n, j0 + kPanelRows));
  });
  return OkStatus();
}

}  // namespace millipede
