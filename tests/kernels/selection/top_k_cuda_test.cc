// TopKCuda against TopKRef: the same indices and the same value bits on random rows (uniform,
// heavy ties, one value everywhere, NaN/inf/signed zeros), from one column to 2^21, k from 1 to
// 16384 and beyond cols, rows past the grid's y limit, in value and in column order; guard bands
// around the outputs; one workspace reused across sizes and orders. Skips without a GPU.
#include "kernels/selection/top_k_cuda.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/selection/top_k.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/op_harness.h"

namespace millipede {
namespace {

using testing::DeviceTensor;
using testing::HaveGpu;
using testing::kInf;
using testing::kNaN;
using testing::OpCheck;
using testing::Tolerance;

enum class Values { kUniform, kTies, kConstant, kSpecial };

struct Case {
  int64_t rows, cols, k;
  Values values;
  TopKOrder order = TopKOrder::kValue;
};

HostTensor MakeScores(const Case& c, uint64_t seed) {
  HostTensor t(DType::kF32, {c.rows, c.cols});
  float* x = t.data<float>();
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  for (int64_t i = 0; i < t.NumElements(); ++i) {
    switch (c.values) {
      case Values::kUniform:
        x[i] = dist(rng);
        break;
      case Values::kTies:
        x[i] = std::round(dist(rng));
        break;  // 9 distinct values
      case Values::kConstant:
        x[i] = 0.5f;
        break;
      case Values::kSpecial: {
        const float special[] = {kNaN, -kNaN, kInf, -kInf, 0.0f, -0.0f, 1.0f, -1.0f};
        x[i] = rng() % 3 == 0 ? special[rng() % 8] : dist(rng);
        break;
      }
    }
  }
  // The last row, when there are several, is all NaN: nothing selectable.
  if (c.rows > 1 && c.values == Values::kSpecial)
    for (int64_t j = 0; j < c.cols; ++j) x[(c.rows - 1) * c.cols + j] = kNaN;
  return t;
}

class TopKCudaTest : public testing::GpuOpTest<Case> {};

// The same indices and the same value bits as the reference.
void ExpectSameAsReference(const Case& c, TopKCudaWorkspace& workspace, uint64_t seed) {
  HostTensor poison_index(DType::kI32, {c.rows, c.k});
  std::memset(poison_index.view().data, 0x7b, poison_index.NumBytes());
  OpCheck check("top_k");
  const int scores = check.Input(MakeScores(c, seed));
  const int index = check.Output("index", poison_index, Tolerance::Bitwise(), 4);
  const int value =
      check.Output("value", testing::PoisonedF32({c.rows, c.k}), Tolerance::Bitwise());
  check.Run(
      [&](const OpCheck::Tensors& t) {
        return TopKArgs{t.cview(scores), c.k, t.view(index), t.view(value), c.order};
      },
      TopKRef,
      [&](const TopKArgs& args, cudaStream_t stream) { return TopKCuda(args, workspace, stream); });
}

TEST_P(TopKCudaTest, MatchesReferenceExactly) {
  auto workspace = TopKCudaWorkspace::Create();
  ASSERT_TRUE(workspace.ok());
  ExpectSameAsReference(GetParam(), **workspace, 17);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, TopKCudaTest,
    ::testing::Values(Case{1, 1, 1, Values::kUniform}, Case{3, 37, 8, Values::kTies},
                      Case{5, 1000, 999, Values::kSpecial}, Case{4, 513, 513, Values::kTies},
                      Case{3, 300, 1000, Values::kSpecial}, Case{2, 5, 3, Values::kConstant},
                      Case{64, 4096, 100, Values::kUniform}, Case{7, 100000, 1, Values::kTies},
                      Case{2, 1 << 21, 16384, Values::kUniform},
                      Case{3, 1 << 20, 16384, Values::kTies},
                      Case{2, 300000, 4000, Values::kConstant},
                      Case{4, 200000, 20000, Values::kSpecial}, Case{70000, 9, 3, Values::kSpecial},
                      Case{3, 0, 4, Values::kUniform},
                      // Column order (OmniKV's selection): no sort, the compaction places them.
                      Case{3, 37, 8, Values::kTies, TopKOrder::kColumn},
                      Case{5, 1000, 999, Values::kSpecial, TopKOrder::kColumn},
                      Case{3, 300, 1000, Values::kSpecial, TopKOrder::kColumn},
                      Case{8, 131072, 2048, Values::kConstant, TopKOrder::kColumn},
                      Case{8, 131072, 4096, Values::kUniform, TopKOrder::kColumn},
                      Case{3, 1 << 20, 16384, Values::kTies, TopKOrder::kColumn},
                      Case{4, 200000, 20000, Values::kSpecial, TopKOrder::kColumn},
                      Case{70000, 9, 3, Values::kSpecial, TopKOrder::kColumn}));

// One workspace across growing and shrinking sizes (the scratch is reused and regrown).
TEST(TopKCudaWorkspaceTest, ReusedAcrossSizes) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  auto workspace = TopKCudaWorkspace::Create();
  ASSERT_TRUE(workspace.ok());
  uint64_t seed = 100;
  for (const Case& c : {Case{2, 1000, 10, Values::kTies}, Case{8, 50000, 2048, Values::kUniform},
                        Case{1, 17, 5, Values::kSpecial}, Case{8, 50000, 2048, Values::kTies},
                        Case{8, 50000, 2048, Values::kTies, TopKOrder::kColumn}})
    ExpectSameAsReference(c, **workspace, ++seed);
}

TEST(TopKCudaArgsTest, RejectsWhatTheReferenceRejects) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  auto workspace = TopKCudaWorkspace::Create();
  ASSERT_TRUE(workspace.ok());
  HostTensor scores(DType::kF32, {2, 5}), index(DType::kI32, {2, 2}), value(DType::kF32, {2, 3});
  DeviceTensor d_scores(scores), d_index(index), d_value(value);
  EXPECT_EQ(
      TopKCuda({d_scores.cview(), 3, d_index.view(), d_value.view()}, **workspace, nullptr).code(),
      StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace millipede
