// The memory plan: sizes add up, the largest fitting sequence is exact, and an engine refuses a
// sequence that cannot fit before allocating anything, naming the numbers.
#include <gtest/gtest.h>

#include "engine_test_util.h"
#include "tests/worker/engine/single_sequence.h"
#include "worker/memory_plan.h"

namespace millipede {
namespace {

using testing::RandomEngineOptions;
using testing::SmallConfig;

TEST(MemoryPlanTest, KvBytesMatchTheCacheLayout) {
  ModelConfig c = *ModelPreset("llama3-8b");
  MemoryPlanShape shape;  // bf16 KV, one rank
  const SequenceMemoryPlan plan = PlanSequenceMemory(c, shape, 131072, 131072, 131072);
  // 32 layers x (K + V) x 8 kv heads x 128 x 2 bytes = 128 KiB per position.
  EXPECT_EQ(plan.kv_bytes, int64_t{131072} * 131072);
  EXPECT_EQ(plan.ring_bytes, 0);  // one rank: no ring
  EXPECT_GT(plan.step_bytes, 0);
  shape.num_ranks = 2;
  EXPECT_EQ(PlanSequenceMemory(c, shape, 1000, 1000, 1200).ring_bytes, 4 * 1200 * 1024 * 2);
  EXPECT_NE(plan.ToString().find("KV 16.00 GiB"), std::string::npos) << plan.ToString();
}

TEST(MemoryPlanTest, MaxSequencePositionsIsTheLargestThatFits) {
  ModelConfig c = *ModelPreset("llama3-8b");
  MemoryPlanShape shape;
  shape.prefill_chunk = 4096;
  shape.attention_chunk = 8192;
  for (int64_t free_bytes : {int64_t{1} << 30, int64_t{80} << 30, int64_t{123456789} << 10}) {
    const int64_t n = MaxSequencePositions(c, shape, free_bytes);
    ASSERT_GT(n, 0);
    EXPECT_LE(PlanSequenceMemory(c, shape, n, n, n).total(), free_bytes);
    EXPECT_GT(PlanSequenceMemory(c, shape, n + 1, n + 1, n + 1).total(), free_bytes);
  }
  EXPECT_EQ(MaxSequencePositions(c, shape, 1 << 20), 0);  // not even the reserve fits
}

// An FP8 cache holds a position in half the bytes, so the plan admits about twice the context
// when the prompt is prefilled in chunks (the per-step buffers do not grow with it): 1M positions
// of the llama3-8b shape are 64 GiB of KV (128 GiB in bf16).
TEST(MemoryPlanTest, Fp8KvHalvesTheBytesAndDoublesTheContext) {
  ModelConfig c = *ModelPreset("llama3-8b");
  MemoryPlanShape bf16, fp8;
  fp8.kv_dtype = DType::kF8E4M3;
  for (MemoryPlanShape* s : {&bf16, &fp8}) {
    s->prefill_chunk = 4096;
    s->attention_chunk = 8192;
  }
  const int64_t m = int64_t{1} << 20;
  EXPECT_EQ(PlanSequenceMemory(c, fp8, m, m, m).kv_bytes, int64_t{64} << 30);
  EXPECT_EQ(2 * PlanSequenceMemory(c, fp8, m, m, m).kv_bytes,
            PlanSequenceMemory(c, bf16, m, m, m).kv_bytes);
  const int64_t free_bytes = int64_t{120} << 30;
  auto largest = [&](const MemoryPlanShape& shape) {
    int64_t lo = 1, hi = int64_t{1} << 30;
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      (PlanSequenceMemory(c, shape, mid, 4096, mid).total() <= free_bytes ? lo : hi) = mid;
    }
    return lo;
  };
  const int64_t n_bf16 = largest(bf16), n_fp8 = largest(fp8);
  EXPECT_GT(n_fp8, 2 * n_bf16 * 99 / 100) << n_bf16 << " vs " << n_fp8;
  EXPECT_GT(n_fp8, m);  // a million positions fit in 120 GiB
  EXPECT_LT(n_bf16, m);
  // A whole-prompt step's buffers grow with the prompt too, so there the gain is smaller.
  EXPECT_GT(MaxSequencePositions(c, fp8, free_bytes), MaxSequencePositions(c, bf16, free_bytes));
}

TEST(MemoryPlanTest, EngineRefusesASequenceThatCannotFit) {
  ModelConfig c = SmallConfig();
  c.max_position_embeddings = int64_t{1} << 34;
  auto engine = Engine::Create(RandomEngineOptions(c, DType::kF32, DType::kF32));
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  const int64_t too_many = int64_t{1} << 33;  // petabytes of KV
  Status s = testing::StartSequence(**engine, too_many, 16);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("does not fit"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("free"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find(std::to_string(too_many)), std::string::npos) << s.ToString();
  EXPECT_FALSE(testing::HasSequence(**engine));
  // The estimate of what fits is below the refused size and can be started.
  auto fits = (*engine)->MaxSequencePositionsNow();
  ASSERT_TRUE(fits.ok());
  EXPECT_LT(*fits, too_many);
  EXPECT_GT(*fits, 1000);
  EXPECT_TRUE(testing::StartSequence(**engine, 1000).ok());
}

TEST(EngineStatsTest, ProfilingAccountsForTheSteps) {
  EngineOptions o = RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF32, 16);
  o.profile = true;
  auto engine = Engine::Create(o);
  ASSERT_TRUE(engine.ok());
  Engine& e = **engine;
  ASSERT_TRUE(testing::StartSequence(e, 80).ok());
  std::vector<float> logits;
  ASSERT_TRUE(testing::ForwardToHost(e, testing::RandomIds(64, 97, 3), &logits).ok());
  ASSERT_TRUE(testing::ForwardDecode(e, 7).ok());
  const EngineStats& s = e.stats();
  EXPECT_EQ(s.prefill_layers, SmallConfig().num_hidden_layers);
  EXPECT_EQ(s.decode_layers, SmallConfig().num_hidden_layers);
  EXPECT_GT(s.qkv_s, 0);
  EXPECT_GT(s.attention_s, 0);
  EXPECT_GT(s.mlp_s, 0);
  EXPECT_EQ(s.comm_bytes, 0);  // one rank sends nothing
  e.ResetStats();
  EXPECT_EQ(e.stats().prefill_layers, 0);
}

}  // namespace
}  // namespace millipede

