// Batched decode on the CUDA backend: four sequences of different lengths (bf16 KV, head_dim 64,
// so their decode tokens take the batched tensor-core launch) decoding together give the logits
// of each sequence decoded alone on the GPU (the single-sequence split-KV kernel), and of the
// CPU engine decoding them together, with dense layers, DuoAttention's mixed layers (one store,
// and a store per head group), OmniKV's filter and selected layers and static eviction, and all of
// them over an FP8 (E4M3) cache, with a sparse prefill beside. The
// decode ids are fixed (no sampling), so the sequences stay the same on every side. Skips without
// a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tests/have_gpu.h"
#include "tests/worker/engine_test_util.h"

namespace millipede {
namespace {

using testing::HaveGpu;
using testing::MaxRelError;
using testing::RandomIds;

// Logits [sequence][step] of `decode` steps after each prompt, the sequences' decode tokens in
// one step each when `together`, else each sequence alone; `spare` more positions of capacity.
using Logits = std::vector<std::vector<std::vector<float>>>;  // [sequence][step][vocab]
Logits Decode(Engine& e, const std::vector<std::vector<int32_t>>& prompts,
              const std::vector<int32_t>& decode, bool together, int64_t spare = 0) {
  const size_t n = prompts.size();
  Logits out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t len = static_cast<int64_t>(prompts[i].size());
    const SequenceId id = static_cast<SequenceId>(i + 1);
    EXPECT_TRUE(
        e.StartSequence(id, {len + static_cast<int64_t>(decode.size()) + spare, len, e.policy()})
            .ok());
    EXPECT_TRUE(e.RunStep({{SequenceStep{id, StepKind::kPrefill, {{0, len}}, prompts[i]}}}).ok());
  }
  const int64_t vocab = e.config().vocab_size;
  auto record = [&](const StepOutput& step, size_t entry, size_t seq) {
    ASSERT_TRUE(step.logits[entry].has_value());
    out[seq].emplace_back(static_cast<size_t>(vocab));
    ASSERT_TRUE(e.backend()
                    .CopyToHost(*step.logits[entry], {out[seq].back().data(), DType::kF32,
                                                      Shape{vocab}})
                    .ok());
  };
  for (int32_t token : decode) {
    std::vector<StepPlan> plans(together ? 1 : n);
    for (size_t i = 0; i < n; ++i)
      plans[together ? 0 : i].steps.push_back(
          SequenceStep{static_cast<SequenceId>(i + 1), StepKind::kDecode, {}, {token}});
    for (size_t p = 0; p < plans.size(); ++p) {
      StatusOr<StepOutput> step = e.RunStep(plans[p]);
      EXPECT_TRUE(step.ok()) << step.status().ToString();
      if (!step.ok()) return out;
      for (size_t k = 0; k < plans[p].steps.size(); ++k) record(*step, k, together ? k : p);
    }
  }
  for (size_t i = 0; i < n; ++i) e.EndSequence(static_cast<SequenceId>(i + 1));
  return out;
}

// Four prompts of different lengths and four fixed decode tokens.
const std::vector<std::vector<int32_t>>& Prompts() {
  static const std::vector<std::vector<int32_t>> prompts = {
      RandomIds(70, 97, 1), RandomIds(1300, 97, 2), RandomIds(5, 97, 3), RandomIds(300, 97, 4)};
  return prompts;
}
const std::vector<int32_t> kDecode = RandomIds(4, 97, 5);

// The GPU engine's sequences decoding together give each one's logits alone and the CPU engine's,
// under the engines' policy; returns the together logits.
Logits ExpectTogetherEqualsAloneAndCpu(Engine& gpu, Engine& cpu, int64_t spare = 0,
                                       double cpu_error = 3e-2) {
  const auto together = Decode(gpu, Prompts(), kDecode, true, spare);
  const auto alone = Decode(gpu, Prompts(), kDecode, false, spare);
  const auto reference = Decode(cpu, Prompts(), kDecode, true, spare);
  for (size_t i = 0; i < Prompts().size(); ++i) {
    EXPECT_EQ(together[i].size(), kDecode.size());
    EXPECT_EQ(alone[i].size(), kDecode.size());
    EXPECT_EQ(reference[i].size(), kDecode.size());
    for (size_t s = 0; s < std::min({together[i].size(), alone[i].size(), reference[i].size()});
         ++s) {
      // The same bf16 K/V on both GPU sides; only the key splits and P's rounding differ.
      EXPECT_LT(MaxRelError(together[i][s], alone[i][s]), 1e-2)
          << "sequence " << i << " step " << s;
      // The tensor-core rounding of q and P (attention_cuda.h) against the CPU's fp32 math.
      EXPECT_LT(MaxRelError(together[i][s], reference[i][s]), cpu_error)
          << "sequence " << i << " step " << s;
    }
  }
  return together;
}

TEST(BatchDecodeCudaTest, TogetherEqualsAloneAndTheCpuEngine) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  auto gpu = testing::GpuSmallEngine(BackendKind::kCuda, 256);
  auto cpu = testing::GpuSmallEngine(BackendKind::kCpu, 256);
  ASSERT_TRUE(gpu && cpu);
  ExpectTogetherEqualsAloneAndCpu(*gpu, *cpu);
}

// The same with DuoAttention's mixed layers (one streaming, one full KV head per layer) and
// windows narrower than the prompts: the batched launch applies each sequence's windows.
TEST(BatchDecodeCudaTest, StreamingHeadsTogetherEqualAloneAndTheCpuEngine) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  auto gpu = testing::GpuSmallEngine(BackendKind::kCuda, 256);
  auto cpu = testing::GpuSmallEngine(BackendKind::kCpu, 256);
  ASSERT_TRUE(gpu && cpu);
  const auto dense = Decode(*gpu, Prompts(), kDecode, true);
  const std::string duo = R"({"version": 1, "default": {"decode": ["streaming-head", "full"]},
      "streaming_head": {"sink_tokens": 4, "window_tokens": 100}})";
  ASSERT_TRUE(gpu->SetPolicy(testing::PolicyFor(*gpu, duo)).ok());
  ASSERT_TRUE(cpu->SetPolicy(testing::PolicyFor(*cpu, duo)).ok());
  const auto together = ExpectTogetherEqualsAloneAndCpu(*gpu, *cpu);
  // The windows cut the two long prompts' decode attention.
  ASSERT_FALSE(together[1].empty() || together[3].empty());
  EXPECT_GT(MaxRelError(together[1][0], dense[1][0]), 5e-2);
  EXPECT_GT(MaxRelError(together[3][0], dense[3][0]), 5e-2);
}

// The sparse decode roles batch too (their tokens' parts in one launch per layer, per-KV-head
// counts on the chosen and kept rows): OmniKV's filter and selected layers, static eviction and
// DuoAttention's layers with a store per head group (one launch per group), with budgets below
// the long prompts so the choice matters.
TEST(BatchDecodeCudaTest, SparseRolesTogetherEqualAloneAndTheCpuEngine) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  auto gpu = testing::GpuSmallEngine(BackendKind::kCuda, 256);
  auto cpu = testing::GpuSmallEngine(BackendKind::kCpu, 256);
  ASSERT_TRUE(gpu && cpu);
  const auto dense = Decode(*gpu, Prompts(), kDecode, true);
  const std::vector<std::string> policies = {
      R"({"version": 1, "filter": {"top_k": 40},
          "layers": [{"layer": 1, "decode": "filter"}, {"layer": 2, "decode": "selected"},
                     {"layer": 3, "decode": "selected"}]})",
      R"({"version": 1, "default": {"decode": "static-eviction"},
          "static_eviction": {"keep_tokens": 48, "recent_tokens": 3, "observed_queries": 16}})",
      R"({"version": 1,
          "default": {"prefill": ["a-shape", "dense"], "decode": ["streaming-head", "full"]},
          "a_shape": {"sink_tokens": 4, "window_tokens": 64},
          "streaming_head": {"sink_tokens": 4, "window_tokens": 100}})"};
  for (const std::string& policy : policies) {
    SCOPED_TRACE(policy);
    ASSERT_TRUE(gpu->SetPolicy(testing::PolicyFor(*gpu, policy)).ok());
    ASSERT_TRUE(cpu->SetPolicy(testing::PolicyFor(*cpu, policy)).ok());
    const auto together = ExpectTogetherEqualsAloneAndCpu(*gpu, *cpu, 4096);
    ASSERT_FALSE(together[1].empty());
    EXPECT_GT(MaxRelError(together[1][0], dense[1][0]), 5e-2);
  }
}

// An FP8 cache on both engines (the same quantisation, bit for bit, of each side's K and V):
// every role above and a vertical-slash prefill decode together as alone and as the CPU engine
// does. Where the two sides' fp32 K or V differ by an ulp an element may round to a neighbouring
// FP8 value, hence the wider bound against the CPU.
TEST(BatchDecodeCudaTest, Fp8CacheTogetherEqualsAloneAndTheCpuEngine) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  auto gpu = testing::GpuSmallEngine(BackendKind::kCuda, 256, true, DType::kF8E4M3);
  auto cpu = testing::GpuSmallEngine(BackendKind::kCpu, 256, true, DType::kF8E4M3);
  auto bf16 = testing::GpuSmallEngine(BackendKind::kCuda, 256);
  ASSERT_TRUE(gpu && cpu && bf16);
  const auto dense = ExpectTogetherEqualsAloneAndCpu(*gpu, *cpu, 0, 6e-2);
  const auto dense_bf16 = Decode(*bf16, Prompts(), kDecode, true);
  ASSERT_FALSE(dense[1].empty() || dense_bf16[1].empty());
  EXPECT_GT(MaxRelError(dense[1][0], dense_bf16[1][0]), 1e-3);  // the cache is FP8
  EXPECT_LT(MaxRelError(dense[1][0], dense_bf16[1][0]), 1e-1);
  for (const std::string& policy :
       {std::string(R"({"version": 1, "filter": {"top_k": 40},
               "layers": [{"layer": 1, "decode": "filter"}, {"layer": 2, "decode": "selected"},
                          {"layer": 3, "decode": "selected"}]})"),
        std::string(R"({"version": 1, "default": {"decode": "static-eviction"},
               "static_eviction": {"keep_tokens": 48, "recent_tokens": 3,
                                   "observed_queries": 16}})"),
        std::string(R"({"version": 1,
               "default": {"prefill": ["a-shape", "dense"], "decode": ["streaming-head", "full"]},
               "a_shape": {"sink_tokens": 4, "window_tokens": 64},
               "streaming_head": {"sink_tokens": 4, "window_tokens": 100}})"),
        std::string(R"({"version": 1, "default": {"prefill": "vertical-slash"},
               "vertical_slash": {"last_queries": 16, "vertical": 12, "slash": 24}})")}) {
    SCOPED_TRACE(policy);
    ASSERT_TRUE(gpu->SetPolicy(testing::PolicyFor(*gpu, policy)).ok());
    ASSERT_TRUE(cpu->SetPolicy(testing::PolicyFor(*cpu, policy)).ok());
    ExpectTogetherEqualsAloneAndCpu(*gpu, *cpu, 4096, 6e-2);
  }
}

}  // namespace
}  // namespace millipede
