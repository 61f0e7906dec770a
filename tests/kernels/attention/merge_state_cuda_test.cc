// MergeStateCuda against MergeStateRef on random inputs (with empty parts), checked for every
// element and for writes outside the outputs (guard bands). Skips without a GPU.
#include "kernels/attention/merge_state_cuda.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kernels/attention/merge_state.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/op_harness.h"

namespace millipede {
namespace {

using testing::kInf;
using testing::kNaN;
using testing::OpCheck;
using testing::PoisonedF32;
using testing::RandomTensor;
using testing::Tolerance;

struct Case {
  int64_t num_parts, n, num_heads, head_dim;
};

class MergeStateCudaTest : public testing::GpuOpTest<Case> {};

// The merged o and lse a check compares, NaN-poisoned: their indices in `check`.
struct MergeOutputs {
  int o, lse;
};
MergeOutputs AddOutputs(OpCheck& check, const Case& c) {
  return {check.Output("o", PoisonedF32({c.n, c.num_heads, c.head_dim}),
                       Tolerance::Elementwise(1e-5, 1e-6)),
          check.Output("lse", PoisonedF32({c.n, c.num_heads}), Tolerance::Elementwise(1e-6, 1e-6))};
}

TEST_P(MergeStateCudaTest, MatchesReference) {
  const Case c = GetParam();
  const Shape o_parts_shape{c.num_parts, c.n, c.num_heads, c.head_dim};
  const Shape lse_parts_shape{c.num_parts, c.n, c.num_heads};
  HostTensor o_parts = RandomTensor(DType::kF32, o_parts_shape, 11, -2.0f, 2.0f);
  HostTensor lse_parts = RandomTensor(DType::kF32, lse_parts_shape, 12, -30.0f, 30.0f);
  // Empty parts (with garbage o), whole rows of empty parts, and a huge-magnitude LSE.
  std::mt19937 rng(13);
  const int64_t rows = c.n * c.num_heads;
  for (int64_t i = 0; i < lse_parts.NumElements(); ++i) {
    if (rng() % 4 == 0) {
      lse_parts.data<float>()[i] = -kInf;
      for (int64_t d = 0; d < c.head_dim; ++d) o_parts.data<float>()[i * c.head_dim + d] = kNaN;
    }
  }
  for (int64_t p = 0; p < c.num_parts; ++p) lse_parts.data<float>()[p * rows] = -kInf;
  if (rows > 1 && c.num_parts > 0) {
    lse_parts.data<float>()[1] = 1e30f;  // part 0, row 1 (which may have been marked empty)
    for (int64_t d = 0; d < c.head_dim; ++d) o_parts.data<float>()[c.head_dim + d] = 0.25f;
  }

  OpCheck check("merge_state");
  const int io_parts = check.Input(o_parts);
  const int ilse_parts = check.Input(lse_parts);
  const auto [io, ilse] = AddOutputs(check, c);
  ASSERT_TRUE(check.Run(
      [&](const OpCheck::Tensors& t) {
        return MergeStateArgs{t.cview(io_parts), t.cview(ilse_parts), t.view(io), t.view(ilse)};
      },
      MergeStateRef, MergeStateCuda));

  // Row 0: every part empty.
  const HostTensor& o = check.actual(io);
  for (int64_t d = 0; d < c.head_dim; ++d) EXPECT_EQ(o.data<float>()[d], 0.0f);
  EXPECT_EQ(check.actual(ilse).data<float>()[0], -kInf);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MergeStateCudaTest,
                         ::testing::Values(Case{1, 3, 2, 64}, Case{2, 5, 4, 128},
                                           Case{7, 33, 8, 128}, Case{3, 1, 32, 96},
                                           Case{0, 4, 2, 64}));

// Partials as several ranks' all-gathered buffers, o then lse, merged where they lie
// (part_stride): the kernel reads what the reference reads.
TEST(MergeStateCudaStrideTest, GatheredBuffersMatchReference) {
  if (!testing::HaveGpu()) GTEST_SKIP() << "no CUDA device";
  for (const Case c : {Case{2, 1, 32, 128}, Case{4, 3, 8, 64}, Case{8, 2, 32, 128}}) {
    const int64_t o_size = c.n * c.num_heads * c.head_dim, rows = c.n * c.num_heads;
    const int64_t stride = o_size + rows;
    HostTensor gathered = RandomTensor(DType::kF32, {c.num_parts * stride}, 31, -2.0f, 2.0f);
    std::mt19937 rng(32);
    for (int64_t p = 0; p < c.num_parts; ++p)
      for (int64_t r = 0; r < rows; ++r)
        gathered.data<float>()[p * stride + o_size + r] =
            rng() % 5 == 0 ? -kInf : static_cast<float>(rng() % 2000) / 100.0f - 10.0f;
    OpCheck check("merge_state strided");
    const int ig = check.Input(gathered);
    const auto [io, ilse] = AddOutputs(check, c);
    ASSERT_TRUE(check.Run(
        [&](const OpCheck::Tensors& t) {
          const float* g = t.cview(ig).as<const float>();
          return MergeStateArgs{{g, DType::kF32, {c.num_parts, c.n, c.num_heads, c.head_dim}},
                                {g + o_size, DType::kF32, {c.num_parts, c.n, c.num_heads}},
                                t.view(io),
                                t.view(ilse),
                                stride};
        },
        MergeStateRef, MergeStateCuda));
  }
}

TEST(MergeStateCudaArgsTest, RejectsBadShapes) {
  // Host memory stands in for device memory: validation fails before anything is launched.
  std::vector<float> fake(2 * 3 * 4 * 9);
  MergeStateArgs args{{fake.data(), DType::kF32, {2, 3, 4, 8}},
                      {fake.data(), DType::kF32, {2, 3, 4}},
                      {fake.data(), DType::kF32, {3, 4, 9}},
                      {fake.data(), DType::kF32, {3, 4}}};
  Status status = MergeStateCuda(args, nullptr);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("merge_state o"), std::string::npos) << status.ToString();
}

}  // namespace
}  // namespace millipede
