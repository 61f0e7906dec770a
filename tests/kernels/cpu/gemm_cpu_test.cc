// GemmCpu against GemmRef: random inputs, odd sizes, every weight/bias dtype, BF16/F16
// activations, accumulate, the dot-product (decode) and sgemm paths, inner dimensions long enough
// to be widened in slices, guard bands and argument errors.
#include "kernels/cpu/gemm_cpu.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "tests/kernels/cpu/cpu_test_util.h"

namespace millipede {
namespace {

using testing::CView;
using testing::GuardedTensor;
using testing::PoisonedF32;
using testing::RandomTensor;
using testing::ToFloats;

struct Case {
  int64_t m, n, k;
  DType a_dtype, b_dtype, bias_dtype;
  bool bias, accumulate;
  // Nonzero: b is columns [col0, col0 + k) of a [n, ldb] weight (GemmArgs::b_row_stride).
  int64_t ldb = 0, col0 = 0;
};

// Every element within an fp32 summation bound of GemmRef: a few ulps of sum_p |a_ip b_jp|
// times sqrt(k) (sgemm's blocked fp32 sums), far below any single term's size (1/k of that sum
// on average) — a dropped, doubled or misplaced term fails.
void ExpectGemmMatches(const Case& c, uint64_t seed) {
  const HostTensor a = RandomTensor(c.a_dtype, {c.m, c.k}, seed);
  const int64_t ldb = c.ldb > 0 ? c.ldb : c.k;
  const HostTensor b = RandomTensor(c.b_dtype, {c.n, ldb}, seed + 1);
  const HostTensor bias = RandomTensor(c.bias_dtype, {c.n}, seed + 2);
  const HostTensor init = RandomTensor(DType::kF32, {c.m, c.n}, seed + 3);
  auto columns = [&](ConstTensorView whole) {
    return ConstTensorView{static_cast<const char*>(whole.data) + c.col0 * DTypeSize(c.b_dtype),
                           c.b_dtype, Shape{c.n, c.k}};
  };
  HostTensor ref_out = c.accumulate ? testing::CopyF32(init) : PoisonedF32({c.m, c.n});
  GemmArgs ref{CView(a), columns(CView(b)), c.bias ? CView(bias) : ConstTensorView{},
               ref_out.view(), c.accumulate, c.ldb};
  ASSERT_TRUE(GemmRef(ref).ok());

  GuardedTensor ga(a), gb(b), gbias(bias);
  GuardedTensor out(c.accumulate ? testing::CopyF32(init) : PoisonedF32({c.m, c.n}));
  GemmArgs fast{ga.cview(), columns(gb.cview()), c.bias ? gbias.cview() : ConstTensorView{},
                out.view(), c.accumulate, c.ldb};
  ASSERT_TRUE(GemmCpu(fast).ok());
  EXPECT_TRUE(ga.Unchanged(a));
  EXPECT_TRUE(gb.Unchanged(b));
  const std::vector<float> got = ToFloats(out.Read()), want = ToFloats(ref_out);
  const std::vector<float> av = ToFloats(a), bv = ToFloats(b);
  const double eps = std::numeric_limits<float>::epsilon();
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      double magnitude = 0.0;
      for (int64_t p = 0; p < c.k; ++p)
        magnitude += std::abs(double{av[i * c.k + p]} * bv[j * ldb + c.col0 + p]);
      const double e = want[i * c.n + j];
      const double tol = 8.0 * eps * std::sqrt(static_cast<double>(c.k) + 1.0) * magnitude +
                         4.0 * eps * (std::abs(e) + 2.0);
      ASSERT_NEAR(got[i * c.n + j], e, tol)
          << "m " << c.m << " n " << c.n << " k " << c.k << " at (" << i << ", " << j << ")";
    }
}

TEST(GemmCpuTest, MatchesReferenceOverShapesAndDtypes) {
  uint64_t seed = 100;
  for (const DType w : {DType::kF32, DType::kBF16, DType::kF16, DType::kF64})
    for (const auto& [m, n, k] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{1, 1, 1},
                                                                                    {1, 300, 65},
                                                                                    {3, 129, 200},
                                                                                    {4, 7, 513},
                                                                                    {5, 33, 64},
                                                                                    {17, 1, 9},
                                                                                    {130, 257, 96},
                                                                                    {600, 70, 33}})
      for (const bool accumulate : {false, true}) {
        ExpectGemmMatches({m, n, k, DType::kF32, w, w, /*bias=*/true, accumulate}, seed++);
        ExpectGemmMatches({m, n, k, DType::kF32, w, DType::kF32, /*bias=*/false, accumulate},
                          seed++);
      }
}

TEST(GemmCpuTest, LowPrecisionActivationsWithTheirWeights) {
  for (const DType d : {DType::kBF16, DType::kF16})
    for (const int64_t m : {2, 40})
      ExpectGemmMatches({m, 90, 77, d, d, DType::kF32, true, false}, 7);
}

TEST(GemmCpuTest, LongInnerDimensionIsWidenedInSlices) {
  // 128-row panels of 2048-float slices: k = 5000 takes three, the last one partial.
  ExpectGemmMatches({64, 200, 5000, DType::kF32, DType::kBF16, DType::kBF16, true, true}, 11);
  ExpectGemmMatches({9, 130, 5000, DType::kF32, DType::kF16, DType::kF32, false, false}, 12);
}

TEST(GemmCpuTest, LargeEnoughToRunOnSeveralThreads) {
  ExpectGemmMatches({512, 384, 256, DType::kF32, DType::kBF16, DType::kBF16, true, false}, 13);
  ExpectGemmMatches({1, 4096, 512, DType::kF32, DType::kBF16, DType::kF32, false, true}, 14);
}

// Columns of a wider weight (decode's MLP split over ranks) on the dot-product path and the
// sgemm path, F32 read in place and 16-bit widened in slices.
TEST(GemmCpuTest, RowStrideReadsAColumnBlock) {
  ExpectGemmMatches({1, 300, 70, DType::kF32, DType::kBF16, DType::kF32, true, true, 150, 80}, 21);
  ExpectGemmMatches({3, 64, 33, DType::kF32, DType::kF32, DType::kF32, false, false, 70, 37}, 22);
  ExpectGemmMatches({40, 200, 96, DType::kF32, DType::kF32, DType::kF32, true, true, 200, 100},
                    23);
  ExpectGemmMatches({20, 130, 3000, DType::kF32, DType::kF16, DType::kF32, false, true, 6000, 2999},
                    24);
}

TEST(GemmCpuTest, EmptyInnerDimensionGivesTheBias) {
  for (const bool accumulate : {false, true}) {
    const HostTensor a(DType::kF32, {3, 0}), b(DType::kBF16, {5, 0});
    const HostTensor bias = RandomTensor(DType::kF32, {5}, 3);
    const HostTensor init = RandomTensor(DType::kF32, {3, 5}, 4);
    HostTensor ref_out = testing::CopyF32(init), out = testing::CopyF32(init);
    ASSERT_TRUE(GemmRef({CView(a), CView(b), CView(bias), ref_out.view(), accumulate}).ok());
    ASSERT_TRUE(GemmCpu({CView(a), CView(b), CView(bias), out.view(), accumulate}).ok());
    EXPECT_TRUE(testing::AllClose(out, ref_out, 1e-7));
  }
}

TEST(GemmCpuTest, EmptyOutputIsFine) {
  const HostTensor a(DType::kF32, {0, 4}), b(DType::kF32, {3, 4});
  HostTensor out(DType::kF32, {0, 3});
  EXPECT_TRUE(GemmCpu({CView(a), CView(b), ConstTensorView{}, out.view()}).ok());
}

TEST(GemmCpuTest, RefusesWhatTheReferenceRefuses) {
  const HostTensor a = RandomTensor(DType::kF32, {4, 8}, 1);
  const HostTensor b_bad = RandomTensor(DType::kF32, {6, 7}, 2);
  const HostTensor b = RandomTensor(DType::kBF16, {6, 8}, 2);
  const HostTensor a_f16 = RandomTensor(DType::kF16, {4, 8}, 1);
  const HostTensor bias_bad = RandomTensor(DType::kF32, {5}, 3);
  HostTensor out = PoisonedF32({4, 6}), out_bad = PoisonedF32({4, 5});
  const std::vector<GemmArgs> bad = {
      {CView(a), CView(b_bad), ConstTensorView{}, out.view()},  // inner dimensions differ
      {CView(a_f16), CView(b), ConstTensorView{}, out.view()},  // F16 a with BF16 b
      {CView(a), CView(b), CView(bias_bad), out.view()},        // bias of the wrong size
      {CView(a), CView(b), ConstTensorView{}, out_bad.view()},  // out of the wrong shape
  };
  for (const GemmArgs& args : bad) {
    const Status want = GemmRef(args), got = GemmCpu(args);
    EXPECT_FALSE(got.ok());
    EXPECT_EQ(got.ToString(), want.ToString());
  }
}

}  // namespace
}  // namespace millipede
