#include "kernels/attention/merge_state.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "tests/kernels/kernel_test_util.h"

namespace millipede {
namespace {

using testing::AllClose;
using testing::CView;
using testing::kInf;
using testing::kNaN;
using testing::PoisonedF32;
using testing::RandomTensor;
using testing::TensorOf;
using testing::ToFloats;

constexpr int64_t kN = 3, kHeads = 2, kDim = 8;

// One partial result: o [kN, kHeads, kDim], lse [kN, kHeads].
struct Part {
  std::vector<float> o;
  std::vector<float> lse;
};

Part RandomPart(uint64_t seed) {
  return {ToFloats(RandomTensor(DType::kF32, {kN, kHeads, kDim}, seed, -2.0f, 2.0f)),
          ToFloats(RandomTensor(DType::kF32, {kN, kHeads}, seed + 1000, -10.0f, 10.0f))};
}

// The empty part: lse = -inf, and an o that must never be read.
Part EmptyPart() {
  return {std::vector<float>(kN * kHeads * kDim, kNaN), std::vector<float>(kN * kHeads, -kInf)};
}

Part Merge(const std::vector<Part>& parts) {
  const int64_t p = static_cast<int64_t>(parts.size());
  HostTensor o_parts(DType::kF32, {p, kN, kHeads, kDim}), lse_parts(DType::kF32, {p, kN, kHeads});
  for (int64_t i = 0; i < p; ++i) {
    std::copy(parts[i].o.begin(), parts[i].o.end(), o_parts.data<float>() + i * kN * kHeads * kDim);
    std::copy(parts[i].lse.begin(), parts[i].lse.end(), lse_parts.data<float>() + i * kN * kHeads);
  }
  HostTensor o = PoisonedF32({kN, kHeads, kDim}), lse = PoisonedF32({kN, kHeads});
  Status status = MergeStateRef({CView(o_parts), CView(lse_parts), o.view(), lse.view()});
  EXPECT_TRUE(status.ok()) << status.ToString();
  return {ToFloats(o), ToFloats(lse)};
}

::testing::AssertionResult Same(const Part& a, const Part& b, double rtol) {
  ::testing::AssertionResult o = AllClose(a.o, b.o, rtol, 1e-7);
  if (!o) return o << " (o)";
  ::testing::AssertionResult lse = AllClose(a.lse, b.lse, rtol, 1e-7);
  if (!lse) return lse << " (lse)";
  return ::testing::AssertionSuccess();
}

TEST(MergeStateTest, HandValues) {
  // lse 0 and ln 3: weights 1/4 and 3/4; o = (1, 2)/4 + 3 (5, -2)/4 = (4, -1); lse = ln 4.
  HostTensor o_parts = TensorOf(DType::kF32, {2, 1, 1, 2}, {1, 2, 5, -2});
  HostTensor lse_parts = TensorOf(DType::kF32, {2, 1, 1}, {0, std::log(3.0f)});
  HostTensor o = PoisonedF32({1, 1, 2}), lse = PoisonedF32({1, 1});
  ASSERT_TRUE(MergeStateRef({CView(o_parts), CView(lse_parts), o.view(), lse.view()}).ok());
  EXPECT_TRUE(AllClose(ToFloats(o), {4, -1}, 1e-6));
  EXPECT_TRUE(AllClose(ToFloats(lse), {std::log(4.0f)}, 1e-6));
}

TEST(MergeStateTest, Commutative) {
  const Part a = RandomPart(1), b = RandomPart(2);
  EXPECT_TRUE(Same(Merge({a, b}), Merge({b, a}), 1e-6));
}

TEST(MergeStateTest, Associative) {
  const Part a = RandomPart(3), b = RandomPart(4), c = RandomPart(5);
  const Part all = Merge({a, b, c});
  EXPECT_TRUE(Same(Merge({Merge({a, b}), c}), all, 1e-6));
  EXPECT_TRUE(Same(Merge({a, Merge({b, c})}), all, 1e-6));
}

TEST(MergeStateTest, EmptyPartIsTheIdentity) {
  const Part a = RandomPart(6);
  EXPECT_TRUE(Same(Merge({a}), a, 0.0));
  EXPECT_TRUE(Same(Merge({a, EmptyPart()}), a, 0.0));
  EXPECT_TRUE(Same(Merge({EmptyPart(), a, EmptyPart()}), a, 0.0));
}

TEST(MergeStateTest, AllEmptyGivesZeroAndMinusInfinityWithoutNaN) {
  for (int parts : {0, 1, 3}) {
    const Part merged = Merge(std::vector<Part>(parts, EmptyPart()));
    for (float x : merged.o) EXPECT_EQ(x, 0.0f) << parts;
    for (float x : merged.lse) EXPECT_EQ(x, -kInf) << parts;
  }
}

TEST(MergeStateTest, MixedEmptyRowsMergePerRow) {
  // Part b is empty in row 0 only; rows merge independently.
  const Part a = RandomPart(7);
  Part b = RandomPart(8);
  for (int64_t h = 0; h < kHeads; ++h) {
    b.lse[h] = -kInf;
    for (int64_t c = 0; c < kDim; ++c) b.o[h * kDim + c] = kNaN;
  }
  const Part merged = Merge({a, b});
  const Part whole = Merge({a, RandomPart(8)});
  for (int64_t i = 0; i < kHeads * kDim; ++i) EXPECT_EQ(merged.o[i], a.o[i]);
  for (int64_t i = kHeads * kDim; i < kN * kHeads * kDim; ++i) EXPECT_EQ(merged.o[i], whole.o[i]);
}

TEST(MergeStateTest, HugeLseDoesNotOverflow) {
  Part big = RandomPart(9), small = RandomPart(10), also_big = RandomPart(11);
  std::fill(big.lse.begin(), big.lse.end(), 1e30f);
  std::fill(also_big.lse.begin(), also_big.lse.end(), 1e30f);
  // exp(0 - 1e30) underflows to 0: the small part vanishes exactly.
  EXPECT_TRUE(Same(Merge({small, big}), big, 0.0));
  // Two equal huge parts: weights 1/2 each, lse = 1e30 + ln 2 = 1e30 in fp32.
  const Part merged = Merge({big, also_big});
  for (size_t i = 0; i < merged.o.size(); ++i)
    EXPECT_NEAR(merged.o[i], 0.5 * (big.o[i] + also_big.o[i]), 1e-6);
  for (float x : merged.lse) EXPECT_EQ(x, 1e30f);
  // And the other sign: a hugely negative (but finite) part is nearly empty.
  Part tiny = RandomPart(12);
  std::fill(tiny.lse.begin(), tiny.lse.end(), -1e30f);
  EXPECT_TRUE(Same(Merge({tiny, small}), small, 0.0));
  EXPECT_TRUE(Same(Merge({tiny}), tiny, 0.0));
}

TEST(MergeStateTest, InPlaceFormEqualsTwoPartMerge) {
  const Part a = RandomPart(13), b = RandomPart(14);
  const Part expected = Merge({a, b});
  HostTensor o = TensorOf(DType::kF32, {kN, kHeads, kDim}, a.o);
  HostTensor lse = TensorOf(DType::kF32, {kN, kHeads}, a.lse);
  HostTensor o_b = TensorOf(DType::kF32, {kN, kHeads, kDim}, b.o);
  HostTensor lse_b = TensorOf(DType::kF32, {kN, kHeads}, b.lse);
  ASSERT_TRUE(MergeStateInPlaceRef(o.view(), lse.view(), CView(o_b), CView(lse_b)).ok());
  EXPECT_TRUE(Same({ToFloats(o), ToFloats(lse)}, expected, 1e-6));
}

TEST(MergeStateTest, InPlaceFromEmptyStateAndWithEmptyOther) {
  const Part a = RandomPart(15), empty = EmptyPart();
  HostTensor o = TensorOf(DType::kF32, {kN, kHeads, kDim}, empty.o);
  HostTensor lse = TensorOf(DType::kF32, {kN, kHeads}, empty.lse);
  HostTensor o_empty = TensorOf(DType::kF32, {kN, kHeads, kDim}, empty.o);
  HostTensor lse_empty = TensorOf(DType::kF32, {kN, kHeads}, empty.lse);
  // empty + empty: o = 0, lse = -inf, the NaN garbage is never read.
  ASSERT_TRUE(MergeStateInPlaceRef(o.view(), lse.view(), CView(o_empty), CView(lse_empty)).ok());
  for (float x : ToFloats(o)) EXPECT_EQ(x, 0.0f);
  for (float x : ToFloats(lse)) EXPECT_EQ(x, -kInf);
  // empty + a = a; a + empty = a.
  HostTensor o_a = TensorOf(DType::kF32, {kN, kHeads, kDim}, a.o);
  HostTensor lse_a = TensorOf(DType::kF32, {kN, kHeads}, a.lse);
  ASSERT_TRUE(MergeStateInPlaceRef(o.view(), lse.view(), CView(o_a), CView(lse_a)).ok());
  EXPECT_TRUE(Same({ToFloats(o), ToFloats(lse)}, a, 0.0));
  ASSERT_TRUE(MergeStateInPlaceRef(o.view(), lse.view(), CView(o_empty), CView(lse_empty)).ok());
  EXPECT_TRUE(Same({ToFloats(o), ToFloats(lse)}, a, 0.0));
}

// Parts laid out as several ranks' all-gathered buffers (o then lse, one buffer per part, with
// room to spare): part_stride merges them where they lie, as the packed parts merge. A stride
// below a part's output is refused.
TEST(MergeStateTest, PartStrideMergesGatheredBuffersInPlace) {
  const std::vector<Part> parts = {RandomPart(21), EmptyPart(), RandomPart(22), RandomPart(23)};
  const int64_t o_size = kN * kHeads * kDim, stride = o_size + kN * kHeads + 5;
  const int64_t p = static_cast<int64_t>(parts.size());
  std::vector<float> gathered(static_cast<size_t>(p * stride), kNaN);
  for (int64_t i = 0; i < p; ++i) {
    std::copy(parts[i].o.begin(), parts[i].o.end(), gathered.begin() + i * stride);
    std::copy(parts[i].lse.begin(), parts[i].lse.end(), gathered.begin() + i * stride + o_size);
  }
  HostTensor o = PoisonedF32({kN, kHeads, kDim}), lse = PoisonedF32({kN, kHeads});
  MergeStateArgs args{{gathered.data(), DType::kF32, {p, kN, kHeads, kDim}},
                      {gathered.data() + o_size, DType::kF32, {p, kN, kHeads}},
                      o.view(),
                      lse.view(),
                      stride};
  ASSERT_TRUE(MergeStateRef(args).ok());
  EXPECT_TRUE(Same({ToFloats(o), ToFloats(lse)}, Merge(parts), 0));
  args.part_stride = o_size - 1;
  EXPECT_EQ(MergeStateRef(args).code(), StatusCode::kInvalidArgument);
}

TEST(MergeStateTest, RejectsNaNAndPlusInfinityLse) {
  for (float bad : {kNaN, kInf}) {
    Part a = RandomPart(16);
    a.lse[3] = bad;
    HostTensor o_parts = TensorOf(DType::kF32, {1, kN, kHeads, kDim}, a.o);
    HostTensor lse_parts = TensorOf(DType::kF32, {1, kN, kHeads}, a.lse);
    HostTensor o = PoisonedF32({kN, kHeads, kDim}), lse = PoisonedF32({kN, kHeads});
    Status status = MergeStateRef({CView(o_parts), CView(lse_parts), o.view(), lse.view()});
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("lse_parts[3]"), std::string::npos) << status.ToString();
  }
}

TEST(MergeStateTest, RejectsMismatchedShapes) {
  HostTensor o_parts = RandomTensor(DType::kF32, {2, kN, kHeads, kDim}, 1);
  HostTensor lse_parts = RandomTensor(DType::kF32, {2, kN, kHeads + 1}, 2);
  HostTensor lse_ok = RandomTensor(DType::kF32, {2, kN, kHeads}, 2);
  HostTensor o = PoisonedF32({kN, kHeads, kDim}), lse = PoisonedF32({kN, kHeads});
  HostTensor o_bad = PoisonedF32({kN, kHeads, kDim + 1});
  EXPECT_EQ(MergeStateRef({CView(o_parts), CView(lse_parts), o.view(), lse.view()}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(MergeStateRef({CView(o_parts), CView(lse_ok), o_bad.view(), lse.view()}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(MergeStateInPlaceRef(o.view(), lse.view(), CView(o_bad), CView(lse)).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace millipede
