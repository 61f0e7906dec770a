// TokenSampler on the CUDA backend against the CPU backend: over 40 steps with a growing token
// history (bias, repetition, presence and frequency penalties, min-p, top-p) both pick the same
// tokens (greedy always; sampled unless the reference's draw lies at a boundary, which these
// well-separated logits make vanishingly rare) and report the same log-probabilities within a
// last-bit difference. Skips without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "tests/kernels/op_harness.h"
#include "worker/backend/backend.h"
#include "worker/backend/backend_factory.h"
#include "worker/backend/cpu_backend.h"
#include "worker/token_sampler.h"

namespace millipede {
namespace {

using testing::HaveGpu;

std::vector<float> RandomLogits(int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-6.0f, 6.0f);
  std::vector<float> v(vocab);
  for (float& x : v) x = dist(rng);
  return v;
}

TEST(TokenSamplerCudaTest, SameTokensAndLogprobsAsTheCpuBackend) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  auto gpu = CreateBackend(BackendKind::kCuda, 0);
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  std::unique_ptr<Backend> cpu = CreateCpuBackend();
  constexpr int64_t kVocab = 32000;
  std::vector<int32_t> prompt;
  for (int i = 0; i < 500; ++i) prompt.push_back((i * 7919) % kVocab);
  for (const float temperature : {0.0f, 0.8f}) {
    SamplingParams p{.temperature = temperature,
                     .top_p = 0.95f,
                     .seed = 5,
                     .repetition_penalty = 1.3f,
                     .presence_penalty = 0.4f,
                     .frequency_penalty = 0.3f,
                     .min_p = 0.01f,
                     .logit_bias = {{11, 8.0f}, {12, -100.0f}},
                     .logprobs = 5};
    auto on_gpu = TokenSampler::Create(**gpu, p, kVocab, prompt);
    auto on_cpu = TokenSampler::Create(*cpu, p, kVocab, prompt);
    ASSERT_TRUE(on_gpu.ok() && on_cpu.ok());
    auto device_logits = (*gpu)->Allocate(DType::kF32, Shape{kVocab});
    ASSERT_TRUE(device_logits.ok());
    for (uint64_t step = 0; step < 40; ++step) {
      const std::vector<float> logits = RandomLogits(kVocab, 100 + step);
      const ConstTensorView host{logits.data(), DType::kF32, Shape{kVocab}};
      ASSERT_TRUE((*gpu)->CopyFromHost(host, device_logits->view()).ok());
      StatusOr<SampledToken> a = (*on_gpu)->Sample(device_logits->cview(), step);
      StatusOr<SampledToken> b = (*on_cpu)->Sample(host, step);
      ASSERT_TRUE(a.ok()) << a.status().ToString();
      ASSERT_TRUE(b.ok()) << b.status().ToString();
      ASSERT_EQ(a->id, b->id) << "step " << step << " temperature " << temperature;
      EXPECT_NEAR(a->logprob, b->logprob, 1e-5);
      ASSERT_EQ(a->top.size(), b->top.size());
      for (size_t i = 0; i < a->top.size(); ++i) {
        EXPECT_EQ(a->top[i].id, b->top[i].id);
        EXPECT_NEAR(a->top[i].logprob, b->top[i].logprob, 1e-5);
      }
      ASSERT_TRUE((*on_gpu)->Accept(a->id).ok());
      ASSERT_TRUE((*on_cpu)->Accept(b->id).ok());
    }
  }
}

}  // namespace
}  // namespace millipede
