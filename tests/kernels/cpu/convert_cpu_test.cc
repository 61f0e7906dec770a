// ConvertCpu against ConvertRef, bit for bit, between every pair of float dtypes, over sizes on
// both sides of a work item, with values that round both ways, subnormals, infinities and guard
// bands; and the argument errors.
#include "kernels/cpu/convert_cpu.h"

#include <gtest/gtest.h>

#include <limits>

#include "kernels/memory/convert.h"
#include "tests/kernels/cpu/cpu_test_util.h"

namespace millipede {
namespace {

using testing::CView;
using testing::GuardedTensor;
using testing::Poisoned;
using testing::RandomTensor;

TEST(ConvertCpuTest, EqualsReferenceBitForBit) {
  const DType dtypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kF64};
  for (const DType from : dtypes)
    for (const DType to : dtypes)
      for (const int64_t n : {1, 1000, 40000}) {
        HostTensor src = RandomTensor(from, {n}, n, -70000, 70000);
        // Small magnitudes too: F16 subnormals and values that vanish.
        for (int64_t i = 0; i < n; i += 3)
          StoreFromFloat(src.view().data, from, i, LoadAsFloat(src.view().data, from, i) * 1e-9f);
        StoreFromFloat(src.view().data, from, 0, std::numeric_limits<float>::infinity());
        HostTensor ref = Poisoned(to, {n});
        ASSERT_TRUE(ConvertRef(CView(src), ref.view()).ok());
        GuardedTensor out(Poisoned(to, {n}));
        ASSERT_TRUE(ConvertCpu(CView(src), out.view()).ok());
        EXPECT_TRUE(testing::BitEqual(out.Read(), ref))
            << DTypeName(from) << " -> " << DTypeName(to) << " n " << n;
      }
}

TEST(ConvertCpuTest, RefusesWhatTheReferenceRefuses) {
  const HostTensor src = RandomTensor(DType::kF32, {10}, 1);
  HostTensor ints(DType::kI32, {10}), short_dst(DType::kBF16, {9});
  EXPECT_FALSE(ConvertCpu(CView(src), ints.view()).ok());
  EXPECT_EQ(ConvertCpu(CView(src), short_dst.view()).ToString(),
            ConvertRef(CView(src), short_dst.view()).ToString());
}

}  // namespace
}  // namespace millipede
