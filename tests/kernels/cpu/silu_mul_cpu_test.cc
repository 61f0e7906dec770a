// SiluMulCpu against SiluMulRef: F32/BF16/F16 outputs, in place, large |gate| (exp overflow and
// underflow), odd sizes, guard bands and argument errors.
#include "kernels/cpu/silu_mul_cpu.h"

#include <gtest/gtest.h>

#include "tests/kernels/cpu/cpu_test_util.h"

namespace millipede {
namespace {

using testing::CView;
using testing::GuardedTensor;
using testing::Poisoned;
using testing::RandomTensor;

TEST(SiluMulCpuTest, MatchesReference) {
  uint64_t seed = 1;
  for (const int64_t n : {1, 3, 100})
    for (const int64_t inter : {1, 176, 1537})
      for (const DType out_dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
        // Gates far into both tails: e^-gate overflows (silu = -0) and underflows (silu = gate).
        const HostTensor gate = RandomTensor(DType::kF32, {n, inter}, seed++, -120, 120);
        const HostTensor up = RandomTensor(DType::kF32, {n, inter}, seed++, -2, 2);
        HostTensor ref_out = Poisoned(out_dtype, {n, inter});
        ASSERT_TRUE(SiluMulRef({CView(gate), CView(up), ref_out.view()}).ok());
        GuardedTensor g(gate), u(up), out(Poisoned(out_dtype, {n, inter}));
        ASSERT_TRUE(SiluMulCpu({g.cview(), u.cview(), out.view()}).ok());
        EXPECT_TRUE(g.Unchanged(gate));
        EXPECT_TRUE(u.Unchanged(up));
        // A few fp32 ulps (after rounding to a 16-bit output, at most one of its ulps: those
        // compare within their own resolution).
        const double rtol = out_dtype == DType::kF32    ? 1e-6
                            : out_dtype == DType::kBF16 ? 8e-3
                                                        : 1e-3;
        // F16 subnormals are 6e-8 apart.
        const double atol = out_dtype == DType::kF16 ? 6e-8 : 1e-30;
        EXPECT_TRUE(testing::AllClose(out.Read(), ref_out, rtol, atol));
      }
}

TEST(SiluMulCpuTest, InPlaceOverGate) {
  const HostTensor gate = RandomTensor(DType::kF32, {70, 300}, 5, -8, 8);
  const HostTensor up = RandomTensor(DType::kF32, {70, 300}, 6);
  HostTensor ref_out(DType::kF32, {70, 300});
  ASSERT_TRUE(SiluMulRef({CView(gate), CView(up), ref_out.view()}).ok());
  HostTensor inplace = testing::CopyF32(gate);
  ASSERT_TRUE(SiluMulCpu({CView(inplace), CView(up), inplace.view()}).ok());
  EXPECT_TRUE(testing::AllClose(inplace, ref_out, 1e-6, 1e-30));
}

TEST(SiluMulCpuTest, RefusesWhatTheReferenceRefuses) {
  const HostTensor gate = RandomTensor(DType::kF32, {4, 8}, 1);
  const HostTensor up = RandomTensor(DType::kF32, {4, 9}, 2);
  HostTensor out(DType::kF32, {4, 8});
  const SiluMulArgs args{CView(gate), CView(up), out.view()};
  EXPECT_FALSE(SiluMulCpu(args).ok());
  EXPECT_EQ(SiluMulCpu(args).ToString(), SiluMulRef(args).ToString());
}

}  // namespace
}  // namespace millipede
