// RopeCuda against RopeRef: q and k of a GQA layer (ratios 1, 4 and 8) rotated with each scaling
// type's inverse frequencies, head dims from 2 to 128, row counts 1 to 4097, positions up to
// past 2^24 (where float(position) rounds), NaN and Inf inputs, guard bands around x. Skips
// without a GPU.
#include "kernels/layer/rope_cuda.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "kernels/layer/rope.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/op_harness.h"

namespace millipede {
namespace {

using testing::kInf;
using testing::kNaN;
using testing::OpCheck;
using testing::RandomTensor;
using testing::Tolerance;

// The angle is the same fp32 product; sincosf is within 2 ulp of the reference's correctly
// rounded cos/sin, and the two products may be fused: a few 1e-7. Non-finite inputs must give
// non-finite outputs in the same places.
const Tolerance kTolerance = Tolerance::Normalised(1e-5).WithNanMatchingNan();

struct Case {
  int64_t n, num_q_heads, gqa_ratio, head_dim;
  RopeScalingType scaling;
  int64_t max_position;  // positions are drawn from [0, max_position)
};

std::string Name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  const char* scaling[] = {"none", "linear", "dynamic", "llama3"};
  return detail::StrCat("n", c.n, "_q", c.num_q_heads, "_gqa", c.gqa_ratio, "_d", c.head_dim, "_",
                        scaling[static_cast<int>(c.scaling)], "_pos", c.max_position);
}

HostTensor InvFreq(const Case& c) {
  RopeScaling scaling;
  scaling.type = c.scaling;
  scaling.factor = 8.0;
  scaling.original_max_position_embeddings = 8192;
  StatusOr<std::vector<float>> inv_freq = RopeInvFreq(c.head_dim, 500000.0, scaling, 8192, 20000);
  EXPECT_TRUE(inv_freq.ok()) << inv_freq.status().ToString();
  return testing::TensorOf(DType::kF32, {c.head_dim / 2}, *inv_freq);
}

HostTensor Positions(const Case& c) {
  HostTensor positions(DType::kI64, {c.n});
  std::mt19937_64 rng(41);
  std::uniform_int_distribution<int64_t> dist(0, c.max_position - 1);
  for (int64_t t = 0; t < c.n; ++t) positions.data<int64_t>()[t] = dist(rng);
  positions.data<int64_t>()[0] = 0;
  if (c.n > 1) positions.data<int64_t>()[c.n - 1] = c.max_position - 1;
  return positions;
}

class RopeCudaTest : public testing::GpuOpTest<Case> {};

TEST_P(RopeCudaTest, MatchesReference) {
  const Case c = GetParam();
  // q and k, as a decoder layer calls it: once per tensor, k with num_q_heads / ratio heads.
  for (const int64_t heads : {c.num_q_heads, c.num_q_heads / c.gqa_ratio}) {
    SCOPED_TRACE(heads == c.num_q_heads ? "q" : "k");
    HostTensor x = RandomTensor(DType::kF32, {c.n, heads, c.head_dim}, 42 + heads, -2.0f, 2.0f);
    if (c.n > 2) {
      x.data<float>()[heads * c.head_dim] = kNaN;                           // row 1
      x.data<float>()[2 * heads * c.head_dim + c.head_dim / 2 - 1] = kInf;  // row 2
    }
    OpCheck check("rope");
    const int ix = check.Output("x", x, kTolerance);
    const int ipositions = check.Input(Positions(c));
    const int iinv_freq = check.Input(InvFreq(c));
    check.Run(
        [&](const OpCheck::Tensors& t) {
          return RopeArgs{t.view(ix), t.cview(ipositions), t.cview(iinv_freq)};
        },
        RopeRef, RopeCuda);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, RopeCudaTest,
                         ::testing::Values(Case{1, 32, 1, 128, RopeScalingType::kNone, 1},
                                           Case{63, 32, 4, 128, RopeScalingType::kLlama3, 131072},
                                           Case{65, 32, 8, 64, RopeScalingType::kLinear, 4096},
                                           Case{4097, 8, 8, 128, RopeScalingType::kNone, 1 << 20},
                                           Case{5, 4, 1, 96, RopeScalingType::kDynamic, 32768},
                                           Case{3, 2, 1, 2, RopeScalingType::kNone, 100},
                                           Case{17, 16, 4, 80, RopeScalingType::kLlama3, 8192},
                                           Case{7, 8, 1, 128, RopeScalingType::kNone,
                                                (1 << 25) + 7},
                                           Case{129, 40, 8, 128, RopeScalingType::kNone, 1 << 17}),
                         Name);

TEST(RopeCudaArgsTest, RejectsBadShapes) {
  std::vector<float> fake(64);
  RopeArgs args{{fake.data(), DType::kF32, {2, 2, 8}},
                {fake.data(), DType::kI32, {2}},
                {fake.data(), DType::kF32, {4}}};
  Status status = RopeCuda(args, nullptr);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("rope positions"), std::string::npos) << status.ToString();
  args.positions.dtype = DType::kI64;
  args.inv_freq.shape = {3};
  status = RopeCuda(args, nullptr);
  EXPECT_NE(status.message().find("rope inv_freq"), std::string::npos) << status.ToString();
}

}  // namespace
}  // namespace millipede
