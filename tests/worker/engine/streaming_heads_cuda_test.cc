// DuoAttention's heads on the CUDA backend: A-shape prefill heads (the attention kernels' sink +
// window) and decode layers mixing streaming and full KV heads give the CPU engine's logits with
// the same policy, bf16 KV, head_dim 64 (the tensor-core kernels: wgmma prefill, split-KV
// decode); the windows are narrower than the prompt, so the policy changes the logits. Prompts
// prefilled in chunks keep a store per group of KV heads in the mixed layers (the streaming heads
// only their sinks and window) and give what one store gives, in less memory. Skips without a
// GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/have_gpu.h"
#include "tests/worker/engine/single_sequence.h"
#include "tests/worker/engine_test_util.h"
#include "worker/engine/step_plan.h"

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
  EXPECT_TRUE(testing::StartSequence(e, static_cast<int64_t>(prompt.size() + decode.size())).ok());
  Status s = testing::ForwardToHost(e, prompt, &out[0]);
  EXPECT_TRUE(s.ok()) << s.ToString();
  for (int32_t id : decode) {
    auto step = testing::ForwardDecode(e, id);
    EXPECT_TRUE(step.ok()) << step.status().ToString();
    if (!step.ok()) break;
    out.emplace_back(static_cast<size_t>(vocab));
    EXPECT_TRUE(
        e.backend().CopyToHost(*step, {out.back().data(), DType::kF32, Shape{vocab}}).ok());
  }
  testing::EndSequence(e);
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

// `prompt` prefilled in steps of `chunk` tokens, then `decode`: the last chunk's logits and each
// decode step's; `kv_bytes`: the sequence's KV bytes.
std::vector<std::vector<float>> ChunkedLogits(Engine& e, const std::vector<int32_t>& prompt,
                                              const std::vector<int32_t>& decode, int64_t chunk,
                                              int64_t* kv_bytes) {
  const int64_t n = static_cast<int64_t>(prompt.size()), vocab = e.config().vocab_size;
  std::vector<std::vector<float>> out;
  EXPECT_TRUE(e.StartSequence(1, {n + static_cast<int64_t>(decode.size()), chunk, e.policy()}).ok());
  *kv_bytes = e.KvBytes();
  auto record = [&](const std::optional<ConstTensorView>& logits) {
    out.emplace_back(static_cast<size_t>(vocab));
    EXPECT_TRUE(logits.has_value());
    if (logits.has_value()) {
      EXPECT_TRUE(
          e.backend().CopyToHost(*logits, {out.back().data(), DType::kF32, Shape{vocab}}).ok());
    }
  };
  for (int64_t begin = 0; begin < n; begin += chunk) {
    const int64_t count = std::min(chunk, n - begin);
    auto step = ShardedPrefill(1, begin, std::span(prompt).subspan(begin, count), 0, 1);
    auto done = e.RunStep(StepPlan{{*step}});
    EXPECT_TRUE(done.ok()) << done.status().ToString();
    if (!done.ok()) return out;
    if (begin + count == n) record(done->logits[0]);
  }
  for (int32_t id : decode) {
    auto done = e.RunStep(StepPlan{{DecodeStep(1, id)}});
    EXPECT_TRUE(done.ok()) << done.status().ToString();
    if (!done.ok()) return out;
    record(done->logits[0]);
  }
  e.EndSequence(1);
  return out;
}

TEST(StreamingHeadsCudaTest, AStorePerHeadGroupEqualsOneStoreAndTheCpuEngine) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  auto split = testing::GpuSmallEngine(BackendKind::kCuda, 256);
  auto one = testing::GpuSmallEngine(BackendKind::kCuda, 256, /*split_kv_heads=*/false);
  auto cpu = testing::GpuSmallEngine(BackendKind::kCpu, 256, /*split_kv_heads=*/false);
  ASSERT_TRUE(split && one && cpu);
  const std::vector<int32_t> prompt = RandomIds(1500, 97, 9);
  const std::vector<int32_t> decode = RandomIds(6, 97, 10);
  const std::string policy = R"({"version": 1,
      "default": {"prefill": ["a-shape", "dense"], "decode": ["streaming-head", "full"]},
      "layers": [{"layer": 3, "prefill": ["dense", "a-shape"], "decode": ["full", "streaming-head"]}],
      "a_shape": {"sink_tokens": 4, "window_tokens": 64},
      "streaming_head": {"sink_tokens": 4, "window_tokens": 70}})";
  for (Engine* e : {split.get(), one.get(), cpu.get()})
    ASSERT_TRUE(e->SetPolicy(testing::PolicyFor(*e, policy)).ok());
  int64_t split_bytes = 0, one_bytes = 0, cpu_bytes = 0;
  const auto grouped = ChunkedLogits(*split, prompt, decode, 200, &split_bytes);
  const auto together = ChunkedLogits(*one, prompt, decode, 200, &one_bytes);
  const auto reference = ChunkedLogits(*cpu, prompt, decode, 200, &cpu_bytes);
  ASSERT_EQ(grouped.size(), decode.size() + 1);
  ASSERT_EQ(together.size(), grouped.size());
  ASSERT_EQ(reference.size(), grouped.size());
  for (size_t s = 0; s < grouped.size(); ++s) {
    // The same kernels over the same keys, with other split-KV plans for fewer heads.
    EXPECT_LT(MaxRelError(grouped[s], together[s]), 1e-2) << "position " << s;
    EXPECT_LT(MaxRelError(grouped[s], reference[s]), 3e-2) << "position " << s;
  }
  // Half the KV heads keep 4 + 70 rows of 1506 (plus a step's and a spare window).
  EXPECT_LT(split_bytes, 0.75 * static_cast<double>(one_bytes));
}

}  // namespace
}  // namespace millipede
