// OmniKV's filter and selected layers on the CUDA backend (fp32 weights and KV) against the CPU
// engine: the same logits at every decode step, with the selected layers' context rows on the
// GPU and in pinned host memory (the packed load on the copy queue), for a budget covering the
// prompt and a small one; the two tiers alike on the GPU, also with the prompt prefilled in
// steps. Skips without a GPU.
#include <gtest/gtest.h>

#include <string>

#include "tests/have_gpu.h"
#include "tests/worker/engine/single_sequence.h"
#include "tests/worker/engine_test_util.h"

namespace millipede {
namespace {

using testing::HaveGpu;
using testing::MaxRelError;
using testing::RandomIds;

std::unique_ptr<Engine> MakeEngine(BackendKind backend, SelectedKvTier tier) {
  const ModelConfig c = testing::GpuSmallConfig(8);
  EngineOptions o = testing::RandomEngineOptions(c, DType::kF32, DType::kF32, 256);
  o.backend = backend;
  o.selected_kv = tier;
  auto e = Engine::Create(o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return std::move(e).value();
}

AttentionPolicy OmniPolicy(const Engine& e, int64_t top_k) {
  return testing::PolicyFor(e,
                            R"({"version": 1, "filter": {"top_k": )" + std::to_string(top_k) + R"(},
      "layers": [{"layer": 1, "decode": "filter"}, {"layer": 2, "decode": "selected"},
                 {"layer": 3, "decode": "selected"}, {"layer": 4, "decode": "selected"},
                 {"layer": 5, "decode": "filter"}, {"layer": 6, "decode": "selected"},
                 {"layer": 7, "decode": "selected"}]})");
}

// The logits of each decode token after the prompt prefilled in steps of `step` tokens (0: one
// step), the prompt's last logits first.
std::vector<std::vector<float>> DecodeLogits(Engine& e, const AttentionPolicy& policy,
                                             const std::vector<int32_t>& prompt,
                                             const std::vector<int32_t>& decode,
                                             int64_t step = 0) {
  const int64_t n = static_cast<int64_t>(prompt.size()), m = static_cast<int64_t>(decode.size());
  Status started = testing::StartSequence(e, n + m, step, policy, m);
  EXPECT_TRUE(started.ok()) << started.ToString();
  std::vector<float> prompt_logits;
  const int64_t chunk = step > 0 ? step : n;
  for (int64_t b = 0; b < n; b += chunk) {
    const auto ids = std::span(prompt).subspan(b, std::min(chunk, n - b));
    EXPECT_TRUE(testing::ForwardToHost(e, ids, &prompt_logits).ok());
  }
  std::vector<std::vector<float>> out = {prompt_logits};
  const int64_t vocab = e.config().vocab_size;
  for (int32_t id : decode) {
    auto d = testing::ForwardDecode(e, id);
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    if (!d.ok()) break;
    out.emplace_back(static_cast<size_t>(vocab));
    EXPECT_TRUE(e.backend().CopyToHost(*d, {out.back().data(), DType::kF32, Shape{vocab}}).ok());
  }
  EXPECT_TRUE(e.backend().Synchronize().ok());
  testing::EndSequence(e);
  return out;
}

TEST(OmniKvCudaTest, MatchesTheCpuEngineInBothTiers) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  const std::vector<int32_t> prompt = RandomIds(1500, 97, 51), decode = RandomIds(8, 97, 52);
  auto cpu = MakeEngine(BackendKind::kCpu, SelectedKvTier::kDevice);
  auto on_gpu = MakeEngine(BackendKind::kCuda, SelectedKvTier::kDevice);
  auto on_host = MakeEngine(BackendKind::kCuda, SelectedKvTier::kHost);
  for (int64_t top_k : {1500, 64, 7}) {
    const auto want = DecodeLogits(*cpu, OmniPolicy(*cpu, top_k), prompt, decode);
    const auto gpu = DecodeLogits(*on_gpu, OmniPolicy(*on_gpu, top_k), prompt, decode);
    const auto host = DecodeLogits(*on_host, OmniPolicy(*on_host, top_k), prompt, decode);
    ASSERT_EQ(gpu.size(), want.size());
    ASSERT_EQ(host.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_LT(MaxRelError(gpu[i], want[i]), 2e-3) << "top_k " << top_k << " step " << i;
      EXPECT_LT(MaxRelError(host[i], gpu[i]), 1e-5) << "top_k " << top_k << " step " << i;
    }
  }
}

// A prompt prefilled in steps with the selected layers in host memory: each later step reads the
// held rows through the device window; the logits are the one-step prefill's on the GPU tier.
TEST(OmniKvCudaTest, ChunkedPrefillWithHostTierLayers) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  const std::vector<int32_t> prompt = RandomIds(1500, 97, 53), decode = RandomIds(6, 97, 54);
  auto on_gpu = MakeEngine(BackendKind::kCuda, SelectedKvTier::kDevice);
  auto on_host = MakeEngine(BackendKind::kCuda, SelectedKvTier::kHost);
  const auto want = DecodeLogits(*on_gpu, OmniPolicy(*on_gpu, 64), prompt, decode);
  const auto got = DecodeLogits(*on_host, OmniPolicy(*on_host, 64), prompt, decode, 400);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_LT(MaxRelError(got[i], want[i]), 1e-4) << "output " << i;
}

}  // namespace
}  // namespace millipede
