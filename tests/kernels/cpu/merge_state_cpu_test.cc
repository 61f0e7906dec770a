// MergeStateCpu and MergeStateInPlaceCpu against their references: random parts with empty ones
// (lse = -inf, o = NaN that must never be read), zero parts, odd sizes, and the LSE errors.
#include "kernels/cpu/merge_state_cpu.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>
#include <vector>

#include "tests/kernels/cpu/cpu_test_util.h"

namespace millipede {
namespace {

using testing::CView;
using testing::GuardedTensor;
using testing::PoisonedF32;
using testing::RandomTensor;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Random parts in which about a third of the (part, row) pairs are empty: lse -inf, o NaN.
void MakeParts(int64_t parts, int64_t n, int64_t heads, int64_t d, uint64_t seed, HostTensor* o,
               HostTensor* lse) {
  *o = RandomTensor(DType::kF32, {parts, n, heads, d}, seed);
  *lse = RandomTensor(DType::kF32, {parts, n, heads}, seed + 1, -30, 30);
  std::mt19937_64 rng(seed + 2);
  for (int64_t r = 0; r < parts * n * heads; ++r)
    if (rng() % 3 == 0) {
      lse->data<float>()[r] = -kInf;
      for (int64_t c = 0; c < d; ++c) o->data<float>()[r * d + c] = kNaN;
    }
}

TEST(MergeStateCpuTest, MatchesReference) {
  for (const int64_t parts : {0, 1, 2, 5})
    for (const int64_t n : {1, 33, 300}) {
      const int64_t heads = 3, d = 80;
      HostTensor o_parts, lse_parts;
      MakeParts(parts, n, heads, d, 10 + parts * n, &o_parts, &lse_parts);
      HostTensor ref_o = PoisonedF32({n, heads, d}), ref_lse = PoisonedF32({n, heads});
      ASSERT_TRUE(
          MergeStateRef({CView(o_parts), CView(lse_parts), ref_o.view(), ref_lse.view()}).ok());
      GuardedTensor o(PoisonedF32({n, heads, d})), lse(PoisonedF32({n, heads}));
      ASSERT_TRUE(MergeStateCpu({CView(o_parts), CView(lse_parts), o.view(), lse.view()}).ok());
      EXPECT_TRUE(testing::AllClose(o.Read(), ref_o, 1e-6, 1e-7));
      EXPECT_TRUE(testing::AllClose(lse.Read(), ref_lse, 1e-7, 1e-7));
    }
}

// Parts as all-gathered buffers, o then lse, part_stride apart: the reference's result.
TEST(MergeStateCpuTest, PartStrideMatchesReference) {
  for (const int64_t n : {1, 40}) {
    const int64_t parts = 4, heads = 3, d = 80, o_size = n * heads * d;
    const int64_t stride = o_size + n * heads + 3;
    HostTensor o_parts, lse_parts;
    MakeParts(parts, n, heads, d, 70 + n, &o_parts, &lse_parts);
    std::vector<float> gathered(static_cast<size_t>(parts * stride), 0.0f);
    for (int64_t p = 0; p < parts; ++p) {
      std::copy_n(o_parts.data<float>() + p * o_size, o_size, gathered.begin() + p * stride);
      std::copy_n(lse_parts.data<float>() + p * n * heads, n * heads,
                  gathered.begin() + p * stride + o_size);
    }
    HostTensor ref_o = PoisonedF32({n, heads, d}), ref_lse = PoisonedF32({n, heads});
    ASSERT_TRUE(
        MergeStateRef({CView(o_parts), CView(lse_parts), ref_o.view(), ref_lse.view()}).ok());
    GuardedTensor o(PoisonedF32({n, heads, d})), lse(PoisonedF32({n, heads}));
    ASSERT_TRUE(MergeStateCpu({{gathered.data(), DType::kF32, {parts, n, heads, d}},
                               {gathered.data() + o_size, DType::kF32, {parts, n, heads}},
                               o.view(),
                               lse.view(),
                               stride})
                    .ok());
    EXPECT_TRUE(testing::AllClose(o.Read(), ref_o, 1e-6, 1e-7));
    EXPECT_TRUE(testing::AllClose(lse.Read(), ref_lse, 1e-7, 1e-7));
  }
}

TEST(MergeStateCpuTest, InPlaceMatchesReference) {
  for (const int64_t n : {1, 70, 513}) {
    const int64_t heads = 4, d = 64;
    HostTensor o_parts, lse_parts;
    MakeParts(2, n, heads, d, 40 + n, &o_parts, &lse_parts);
    const int64_t size = n * heads * d;
    HostTensor ref_o(DType::kF32, {n, heads, d}), ref_lse(DType::kF32, {n, heads});
    HostTensor other(DType::kF32, {n, heads, d}), other_lse(DType::kF32, {n, heads});
    std::copy_n(o_parts.data<float>(), size, ref_o.data<float>());
    std::copy_n(o_parts.data<float>() + size, size, other.data<float>());
    std::copy_n(lse_parts.data<float>(), n * heads, ref_lse.data<float>());
    std::copy_n(lse_parts.data<float>() + n * heads, n * heads, other_lse.data<float>());
    GuardedTensor o(ref_o), lse(ref_lse);
    ASSERT_TRUE(
        MergeStateInPlaceRef(ref_o.view(), ref_lse.view(), CView(other), CView(other_lse)).ok());
    ASSERT_TRUE(MergeStateInPlaceCpu(o.view(), lse.view(), CView(other), CView(other_lse)).ok());
    EXPECT_TRUE(testing::AllClose(o.Read(), ref_o, 1e-6, 1e-7));
    EXPECT_TRUE(testing::AllClose(lse.Read(), ref_lse, 1e-7, 1e-7));
  }
}

TEST(MergeStateCpuTest, RefusesNanAndPlusInfLse) {
  for (const float bad : {kNaN, kInf}) {
    HostTensor o_parts = RandomTensor(DType::kF32, {2, 3, 1, 4}, 1);
    HostTensor lse_parts = RandomTensor(DType::kF32, {2, 3, 1}, 2);
    lse_parts.data<float>()[4] = bad;
    HostTensor o = PoisonedF32({3, 1, 4}), lse = PoisonedF32({3, 1});
    const MergeStateArgs args{CView(o_parts), CView(lse_parts), o.view(), lse.view()};
    EXPECT_EQ(MergeStateCpu(args).ToString(), MergeStateRef(args).ToString());
    EXPECT_FALSE(MergeStateCpu(args).ok());
    HostTensor o1 = RandomTensor(DType::kF32, {3, 1, 4}, 3),
               lse1 = RandomTensor(DType::kF32, {3, 1}, 4);
    lse1.data<float>()[1] = bad;
    const HostTensor o2 = RandomTensor(DType::kF32, {3, 1, 4}, 5),
                     lse2 = RandomTensor(DType::kF32, {3, 1}, 6);
    EXPECT_FALSE(MergeStateInPlaceCpu(o1.view(), lse1.view(), CView(o2), CView(lse2)).ok());
  }
}

}  // namespace
}  // namespace millipede
