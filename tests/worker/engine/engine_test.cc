#include "worker/engine/engine.h"

#include <gtest/gtest.h>

#include "tests/worker/engine/single_sequence.h"
#include "tests/worker/engine_test_util.h"

namespace millipede {
namespace {

using testing::MaxRelError;
using testing::RandomEngineOptions;
using testing::RandomIds;
using testing::SmallConfig;

std::vector<float> FullLogits(Engine& engine, const std::vector<int32_t>& ids) {
  std::vector<float> logits;
  EXPECT_TRUE(testing::StartSequence(engine, static_cast<int64_t>(ids.size())).ok());
  Status s = testing::ForwardToHost(engine, ids, &logits);
  EXPECT_TRUE(s.ok()) << s.ToString();
  testing::EndSequence(engine);
  return logits;
}

// Decoding token by token with the KV cache must give the logits of recomputing the whole
// sequence from scratch (fp32 weights and cache).
TEST(EngineTest, DecodeWithCacheMatchesRecompute) {
  auto engine = Engine::Create(RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF32));
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  Engine& e = **engine;
  std::vector<int32_t> ids = RandomIds(37, 97, 3);
  const size_t prompt = 30;
  ASSERT_TRUE(testing::StartSequence(e, static_cast<int64_t>(ids.size())).ok());
  std::vector<float> logits;
  ASSERT_TRUE(testing::ForwardToHost(e, std::span(ids).first(prompt), &logits).ok());
  std::vector<std::vector<float>> incremental = {logits};
  for (size_t i = prompt; i < ids.size(); ++i) {
    ASSERT_TRUE(testing::ForwardToHost(e, std::span(ids).subspan(i, 1), &logits).ok());
    incremental.push_back(logits);
  }
  EXPECT_EQ(testing::SequenceLength(e), static_cast<int64_t>(ids.size()));
  testing::EndSequence(e);
  for (size_t i = prompt; i <= ids.size(); ++i) {
    std::vector<int32_t> prefix(ids.begin(), ids.begin() + static_cast<int64_t>(i));
    std::vector<float> full = FullLogits(e, prefix);
    EXPECT_LT(MaxRelError(incremental[i - prompt], full), 1e-5) << "length " << i;
  }
}

// The chunk size of projections and the MLP is a memory knob only: results must not change.
TEST(EngineTest, PrefillChunkSizeDoesNotChangeLogits) {
  std::vector<int32_t> ids = RandomIds(50, 97, 4);
  std::vector<float> reference;
  for (int64_t chunk : {512, 1, 7, 16, 49}) {
    auto engine =
        Engine::Create(RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF32, chunk));
    ASSERT_TRUE(engine.ok());
    std::vector<float> logits = FullLogits(**engine, ids);
    if (reference.empty()) {
      reference = logits;
    } else {
      EXPECT_LT(MaxRelError(logits, reference), 1e-6) << "chunk " << chunk;
    }
  }
}

// A bf16 copy of the same weights (and a bf16 cache) stays within bf16 tolerance of fp32.
TEST(EngineTest, Bf16CopyAgreesWithFp32) {
  std::vector<int32_t> ids = RandomIds(40, 97, 5);
  auto f32 = Engine::Create(RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF32));
  auto b16 = Engine::Create(RandomEngineOptions(SmallConfig(), DType::kBF16, DType::kBF16));
  auto f16 = Engine::Create(RandomEngineOptions(SmallConfig(), DType::kF16, DType::kF16));
  ASSERT_TRUE(f32.ok() && b16.ok() && f16.ok());
  std::vector<float> a = FullLogits(**f32, ids);
  std::vector<float> b = FullLogits(**b16, ids);
  std::vector<float> h = FullLogits(**f16, ids);
  const double bf16_err = MaxRelError(b, a), f16_err = MaxRelError(h, a);
  EXPECT_LT(bf16_err, 3e-2);
  EXPECT_LT(f16_err, 4e-3);
  // The comparison must be able to fail: different weights are far apart.
  auto other = Engine::Create(RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF32, 512, 99));
  ASSERT_TRUE(other.ok());
  EXPECT_GT(MaxRelError(FullLogits(**other, ids), a), 0.2);
}

// An FP8 (E4M3) cache: K and V are quantised as they are written, by prefill and decode alike,
// so decoding token by token reads what recomputing the whole sequence reads; the logits stay
// near an F32 cache's and move further than the bf16 cache's, which shows the cache is FP8.
TEST(EngineTest, Fp8CacheIsExactAcrossStepsAndNearF32) {
  std::vector<int32_t> ids = RandomIds(37, 97, 3);
  auto fp8 = Engine::Create(RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF8E4M3));
  auto f32 = Engine::Create(RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF32));
  auto b16 = Engine::Create(RandomEngineOptions(SmallConfig(), DType::kF32, DType::kBF16));
  ASSERT_TRUE(fp8.ok() && f32.ok() && b16.ok()) << fp8.status().ToString();
  Engine& e = **fp8;
  const size_t prompt = 30;
  ASSERT_TRUE(testing::StartSequence(e, static_cast<int64_t>(ids.size())).ok());
  std::vector<float> logits;
  ASSERT_TRUE(testing::ForwardToHost(e, std::span(ids).first(prompt), &logits).ok());
  for (size_t i = prompt; i < ids.size(); ++i)
    ASSERT_TRUE(testing::ForwardToHost(e, std::span(ids).subspan(i, 1), &logits).ok());
  testing::EndSequence(e);
  const std::vector<float> full = FullLogits(e, ids);
  EXPECT_LT(MaxRelError(logits, full), 1e-5);
  const double fp8_err = MaxRelError(full, FullLogits(**f32, ids));
  const double bf16_err = MaxRelError(FullLogits(**b16, ids), FullLogits(**f32, ids));
  EXPECT_LT(fp8_err, 0.1);
  EXPECT_GT(fp8_err, bf16_err);
}

// Qwen2 (q/k/v biases), tied embeddings and every RoPE scaling run and keep cache == recompute.
TEST(EngineTest, VariantsKeepCacheExactness) {
  std::vector<ModelConfig> configs;
  ModelConfig qwen = SmallConfig();
  qwen.model_type = "qwen2";
  qwen.qkv_bias = true;
  configs.push_back(qwen);
  ModelConfig tied = SmallConfig();
  tied.tie_word_embeddings = true;
  configs.push_back(tied);
  ModelConfig linear = SmallConfig();
  linear.rope_scaling.type = RopeScalingType::kLinear;
  linear.rope_scaling.factor = 4;
  configs.push_back(linear);
  ModelConfig llama3 = SmallConfig();
  llama3.rope_scaling.type = RopeScalingType::kLlama3;
  llama3.rope_scaling.factor = 8;
  llama3.rope_scaling.original_max_position_embeddings = 64;
  configs.push_back(llama3);
  for (const ModelConfig& c : configs) {
    auto engine = Engine::Create(RandomEngineOptions(c, DType::kF32, DType::kF32));
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    std::vector<int32_t> ids = RandomIds(21, 97, 6);
    Engine& e = **engine;
    ASSERT_TRUE(testing::StartSequence(e, 21).ok());
    std::vector<float> step;
    ASSERT_TRUE(testing::ForwardToHost(e, std::span(ids).first(20), &step).ok());
    ASSERT_TRUE(testing::ForwardToHost(e, std::span(ids).subspan(20, 1), &step).ok());
    testing::EndSequence(e);
    EXPECT_LT(MaxRelError(step, FullLogits(e, ids)), 1e-5) << c.model_type;
  }
}

TEST(EngineTest, RejectsBadInput) {
  auto engine = Engine::Create(RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF32));
  ASSERT_TRUE(engine.ok());
  Engine& e = **engine;
  std::vector<int32_t> ids = {1, 2, 3};
  std::vector<float> logits;
  EXPECT_FALSE(testing::ForwardToHost(e, ids, &logits).ok());  // no sequence
  ASSERT_TRUE(testing::StartSequence(e, 4).ok());
  std::vector<int32_t> bad = {1, 97};
  Status s = testing::ForwardToHost(e, bad, &logits);
  EXPECT_NE(s.message().find("97"), std::string::npos) << s.ToString();
  EXPECT_EQ(testing::SequenceLength(e), 0);  // nothing was appended
  std::vector<int32_t> too_many = {1, 2, 3, 4, 5};
  EXPECT_NE(testing::ForwardToHost(e, too_many, &logits).message().find("capacity"),
            std::string::npos);
  EXPECT_TRUE(testing::ForwardToHost(e, ids, &logits).ok());
  EXPECT_FALSE(testing::StartSequence(e, 0).ok());
  EXPECT_FALSE(testing::StartSequence(e, 8193).ok());

  EngineOptions bad_options = RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF32);
  bad_options.random_config.num_key_value_heads = 3;  // 4 heads are not divisible by 3
  EXPECT_FALSE(Engine::Create(bad_options).ok());
  bad_options = RandomEngineOptions(SmallConfig(), DType::kF32, DType::kI32);
  auto bad_kv = Engine::Create(bad_options);
  ASSERT_TRUE(bad_kv.ok());
  EXPECT_FALSE(testing::StartSequence(**bad_kv, 4).ok());
}

}  // namespace
}  // namespace millipede
