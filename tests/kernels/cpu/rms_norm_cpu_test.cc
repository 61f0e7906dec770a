// RmsNormCpu against RmsNormRef: residual or not, weight dtypes, F32/BF16/F16 outputs, in place,
// odd sizes, guard bands and argument errors.
#include "kernels/cpu/rms_norm_cpu.h"

#include <gtest/gtest.h>

#include "tests/kernels/cpu/cpu_test_util.h"

namespace millipede {
namespace {

using testing::CView;
using testing::GuardedTensor;
using testing::Poisoned;
using testing::RandomTensor;

TEST(RmsNormCpuTest, MatchesReference) {
  uint64_t seed = 1;
  for (const int64_t n : {1, 17, 300})
    for (const int64_t hidden : {1, 64, 77, 512})
      for (const DType out_dtype : {DType::kF32, DType::kBF16, DType::kF16})
        for (const bool residual : {false, true}) {
          const HostTensor x = RandomTensor(DType::kF32, {n, hidden}, seed++, -3, 3);
          const HostTensor weight = RandomTensor(DType::kBF16, {hidden}, seed++);
          const HostTensor res = RandomTensor(DType::kF32, {n, hidden}, seed++);
          HostTensor ref_res = testing::CopyF32(res), ref_out = Poisoned(out_dtype, {n, hidden});
          ASSERT_TRUE(RmsNormRef({CView(x), CView(weight), residual ? ref_res.view() : TensorView{},
                                  ref_out.view(), 1e-5f})
                          .ok());
          GuardedTensor gx(x), gres(res), out(Poisoned(out_dtype, {n, hidden}));
          ASSERT_TRUE(RmsNormCpu({gx.cview(), CView(weight), residual ? gres.view() : TensorView{},
                                  out.view(), 1e-5f})
                          .ok());
          EXPECT_TRUE(gx.Unchanged(x));
          // The same fp32 operations as the reference after a double sum: equal but for a rare
          // last-bit difference in the variance.
          EXPECT_TRUE(testing::AllClose(out.Read(), ref_out, 2e-7, 0));
          if (residual) {
            EXPECT_TRUE(testing::BitEqual(gres.Read(), ref_res));
          }
        }
}

TEST(RmsNormCpuTest, InPlaceOverTheInput) {
  const HostTensor x = RandomTensor(DType::kF32, {40, 96}, 3);
  const HostTensor weight = RandomTensor(DType::kF32, {96}, 4);
  HostTensor ref_out(DType::kF32, {40, 96});
  ASSERT_TRUE(RmsNormRef({CView(x), CView(weight), TensorView{}, ref_out.view(), 1e-6f}).ok());
  HostTensor inplace = testing::CopyF32(x);
  ASSERT_TRUE(
      RmsNormCpu({CView(inplace), CView(weight), TensorView{}, inplace.view(), 1e-6f}).ok());
  EXPECT_TRUE(testing::AllClose(inplace, ref_out, 2e-7, 0));
}

TEST(RmsNormCpuTest, RefusesWhatTheReferenceRefuses) {
  const HostTensor x = RandomTensor(DType::kF32, {4, 8}, 1);
  const HostTensor weight = RandomTensor(DType::kF32, {7}, 2);
  HostTensor out(DType::kF32, {4, 8});
  const RmsNormArgs args{CView(x), CView(weight), TensorView{}, out.view(), 1e-5f};
  EXPECT_FALSE(RmsNormCpu(args).ok());
  EXPECT_EQ(RmsNormCpu(args).ToString(), RmsNormRef(args).ToString());
}

}  // namespace
}  // namespace millipede
