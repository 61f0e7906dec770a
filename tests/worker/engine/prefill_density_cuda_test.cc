// The achieved prefill density on the CUDA backend: a policy with vertical-slash, block-sparse,
// A-shape and dense heads counts its attended pairs on the GPU (SparseIndexPairs into the
// sequence's device counter, closed forms for the ring heads) as the CPU engine does on its
// own: the causal pairs equal, the attended pairs below them and within 5% of the CPU's (the
// sparse selections may differ where near-equal scores round apart); the same for a policy with
// antidiagonal heads. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "tests/have_gpu.h"
#include "tests/worker/engine_test_util.h"
#include "worker/generate.h"

namespace millipede {
namespace {

using testing::HaveGpu;
using testing::RandomIds;

// Prefills 3000 random tokens (seed `seed`) under `policy` on a GPU and a CPU engine and compares
// the pairs they count.
void ExpectCountsAsTheCpuEngine(const std::string& policy, uint32_t seed) {
  auto gpu = testing::GpuSmallEngine(BackendKind::kCuda, 512);
  auto cpu = testing::GpuSmallEngine(BackendKind::kCpu, 512);
  ASSERT_TRUE(gpu && cpu);
  ASSERT_TRUE(gpu->SetPolicy(testing::PolicyFor(*gpu, policy)).ok());
  ASSERT_TRUE(cpu->SetPolicy(testing::PolicyFor(*cpu, policy)).ok());
  GenerationRequest r;
  r.prompt_ids = RandomIds(3000, 97, seed);
  r.max_new_tokens = 1;
  auto on_gpu = Generate(*gpu, r);
  auto on_cpu = Generate(*cpu, r);
  ASSERT_TRUE(on_gpu.ok()) << on_gpu.status().ToString();
  ASSERT_TRUE(on_cpu.ok()) << on_cpu.status().ToString();
  const int64_t causal = 4 * 2 * int64_t{3000} * 3001 / 2;
  EXPECT_EQ(on_gpu->prefill.causal_pairs, causal);
  EXPECT_EQ(on_cpu->prefill.causal_pairs, causal);
  EXPECT_LT(on_cpu->prefill.attended_pairs, causal);
  EXPECT_GT(on_gpu->prefill.attended_pairs, causal / 20);
  EXPECT_LT(std::fabs(static_cast<double>(on_gpu->prefill.attended_pairs) -
                      static_cast<double>(on_cpu->prefill.attended_pairs)),
            0.05 * static_cast<double>(on_cpu->prefill.attended_pairs));
}

TEST(PrefillDensityCudaTest, SparsePolicyCountsAsTheCpuEngine) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  ExpectCountsAsTheCpuEngine(R"({"version": 1,
      "default": {"prefill": ["vertical-slash", "block-sparse"]},
      "layers": [{"layer": 1, "prefill": ["a-shape", "dense"]}],
      "vertical_slash": {"last_queries": 64, "vertical": 100, "slash": 200},
      "block_sparse": {"block": 64, "top_blocks": 4},
      "a_shape": {"sink_tokens": 4, "window_tokens": 100}})",
                             9);
}

// XAttention's antidiagonal selection on the GPU (tensor-core scores, AntidiagonalSelectCuda)
// keeps about the blocks the CPU's double-precision reference keeps: the attended pairs within 5%.
TEST(PrefillDensityCudaTest, AntidiagonalPolicyCountsAsTheCpuEngine) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  ExpectCountsAsTheCpuEngine(R"({"version": 1,
      "default": {"prefill": ["antidiagonal", "vertical-slash"]},
      "layers": [{"layer": 1, "prefill": ["antidiagonal", "a-shape"]}],
      "vertical_slash": {"last_queries": 64, "vertical": 100, "slash": 200},
      "antidiagonal": {"block": 64, "stride": 8, "mass_permille": 600},
      "a_shape": {"sink_tokens": 4, "window_tokens": 100}})",
                             10);
}

}  // namespace
}  // namespace millipede
