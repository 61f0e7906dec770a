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

