// DuoAttention's heads on the CUDA backend: A-shape prefill heads (the attention kernels' sink +
// window) and decode layers mixing streaming and full KV heads give the CPU engine's logits with
// the same policy, bf16 KV, head_dim 64 (the tensor-core kernels: wgmma prefill, split-KV
// decode); the windows are narrower than the prompt, so the policy changes the logits. Skips
// without a GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/have_gpu.h"
#include "tests/worker/engine_test_util.h"

namespace millipede {
namespace {

using testing::HaveGpu;
using testing::MaxRelError;
using testing::RandomIds;

// The last prompt position's logits, then each decode step's.
std::vector<std::vector<float>> Logits(Engine& e, const std::vector<int32_t>& prompt,
                                       const std::vector<int32_t>& decode) {
  const int64_t vocab = e.config().vocab_size;
  std::vector<std::vector<float>> out(1);
  EXPECT_TRUE(e.StartSequence(static_cast<int64_t>(prompt.size() + decode.size())).ok());
  Status s = e.ForwardToHost(prompt, &out[0]);
  EXPECT_TRUE(s.ok()) << s.ToString();
  for (int32_t id : decode) {
    auto step = e.ForwardDecode(id);
    EXPECT_TRUE(step.ok()) << step.status().ToString();
    if (!step.ok()) break;
    out.emplace_back(static_cast<size_t>(vocab));
    EXPECT_TRUE(
        e.backend().CopyToHost(*step, {out.back().data(), DType::kF32, Shape{vocab}}).ok());
  }
  e.EndSequence();
  return out;
}

TEST(StreamingHeadsCudaTest, DuoAttentionPolicyEqualsTheCpuEngine) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  auto gpu = testing::GpuSmallEngine(BackendKind::kCuda, 256);
  auto cpu = testing::GpuSmallEngine(BackendKind::kCpu, 256);
  ASSERT_TRUE(gpu && cpu);
  const std::vector<int32_t> prompt = RandomIds(1500, 97, 7);
  const std::vector<int32_t> decode = RandomIds(4, 97, 8);
  const auto dense = Logits(*gpu, prompt, decode);
  const std::string policy = R"({"version": 1,
      "default": {"prefill": ["a-shape", "dense"], "decode": ["streaming-head", "full"]},
      "layers": [{"layer": 3, "prefill": ["dense", "a-shape"], "decode": ["full", "streaming-head"]}],
      "a_shape": {"sink_tokens": 4, "window_tokens": 100},
      "streaming_head": {"sink_tokens": 4, "window_tokens": 70}})";
  ASSERT_TRUE(gpu->SetPolicy(testing::PolicyFor(*gpu, policy)).ok());
  ASSERT_TRUE(cpu->SetPolicy(testing::PolicyFor(*cpu, policy)).ok());
  const auto duo = Logits(*gpu, prompt, decode);
  const auto reference = Logits(*cpu, prompt, decode);
  ASSERT_EQ(duo.size(), decode.size() + 1);
  ASSERT_EQ(reference.size(), duo.size());
  for (size_t s = 0; s < duo.size(); ++s) {
    // The tensor-core rounding of q and P (attention_cuda.h) against the CPU's fp32 math.
    EXPECT_LT(MaxRelError(duo[s], reference[s]), 3e-2) << "position " << s;
    EXPECT_GT(MaxRelError(duo[s], dense[s]), 5e-2) << "position " << s;
  }
}

}  // namespace
}  // namespace millipede
