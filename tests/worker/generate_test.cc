#include "worker/generate.h"

#include <gtest/gtest.h>

#include "engine_test_util.h"
#include "tests/worker/engine/single_sequence.h"

namespace millipede {
namespace {

using testing::RandomEngineOptions;
using testing::RandomIds;
using testing::SmallConfig;

std::unique_ptr<Engine> MakeEngine(ModelConfig c = SmallConfig()) {
  auto e = Engine::Create(RandomEngineOptions(c, DType::kF32, DType::kF32));
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return std::move(e).value();
}

GenerationRequest Request(int64_t max_new, float temperature = 0, uint64_t seed = 0) {
  GenerationRequest r;
  r.prompt_ids = RandomIds(12, 97, 8);
  r.max_new_tokens = max_new;
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  r.ignore_eos = true;
  return r;
}

TEST(GenerateTest, GreedyMatchesArgmaxOfRecomputedLogits) {
  auto engine = MakeEngine();
  GenerationRequest r = Request(6);
  auto result = Generate(*engine, r);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  ASSERT_EQ(result->ids.size(), 6u);
  EXPECT_EQ(result->finish_reason, FinishReason::kLength);
  EXPECT_EQ(engine->num_sequences(), 0);  // the sequence is freed
  // Each greedy token is the argmax of the logits of everything before it.
  std::vector<int32_t> seq = r.prompt_ids;
  for (int32_t id : result->ids) {
    ASSERT_TRUE(testing::StartSequence(*engine, static_cast<int64_t>(seq.size())).ok());
    std::vector<float> logits;
    ASSERT_TRUE(testing::ForwardToHost(*engine, seq, &logits).ok());
    testing::EndSequence(*engine);
    int32_t best = 0;
    for (size_t i = 1; i < logits.size(); ++i)
      if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
    EXPECT_EQ(id, best);
    seq.push_back(id);
  }
}

TEST(GenerateTest, SeededSamplingIsReproducible) {
  auto engine = MakeEngine();
  auto a = Generate(*engine, Request(24, 1.5f, 42));
  auto b = Generate(*engine, Request(24, 1.5f, 42));
  auto c = Generate(*engine, Request(24, 1.5f, 43));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->ids, b->ids);
  EXPECT_NE(a->ids, c->ids);  // 24 draws at temperature 1.5 over 97 ids: collision is negligible
  auto other_engine = MakeEngine();
  auto d = Generate(*other_engine, Request(24, 1.5f, 42));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(a->ids, d->ids);  // same model, new process state: same tokens
}

TEST(GenerateTest, StopConditions) {
  auto engine = MakeEngine();
  auto free_run = Generate(*engine, Request(10, 1.5f, 7));
  ASSERT_TRUE(free_run.ok());
  // Stop ids: generation ends right after the first occurrence (included in the output).
  GenerationRequest r = Request(10, 1.5f, 7);
  const int32_t stop = free_run->ids[4];
  r.stop_ids = {stop};
  auto stopped = Generate(*engine, r);
  ASSERT_TRUE(stopped.ok());
  size_t first = 0;
  while (free_run->ids[first] != stop) ++first;
  EXPECT_EQ(stopped->ids.size(), first + 1);
  EXPECT_EQ(stopped->ids.back(), stop);
  EXPECT_EQ(stopped->finish_reason, FinishReason::kStop);
  // EOS from the config stops unless ignored.
  ModelConfig c = SmallConfig();
  c.eos_token_ids = {stop};
  auto eos_engine = MakeEngine(c);
  GenerationRequest with_eos = Request(10, 1.5f, 7);
  with_eos.ignore_eos = false;
  auto eos_result = Generate(*eos_engine, with_eos);
  ASSERT_TRUE(eos_result.ok());
  EXPECT_EQ(eos_result->ids, stopped->ids);
  with_eos.ignore_eos = true;
  auto ignored = Generate(*eos_engine, with_eos);
  ASSERT_TRUE(ignored.ok());
  EXPECT_EQ(ignored->ids.size(), 10u);
  // The callback can cancel.
  int calls = 0;
  auto cancelled =
      Generate(*engine, Request(10), [&](const SampledToken&) { return ++calls < 3; });
  EXPECT_EQ(cancelled.status().code(), StatusCode::kCancelled);
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(engine->num_sequences(), 0);
  // So can the prefill progress callback, which counts prompt tokens layer by layer.
  std::vector<int64_t> progress;
  auto stopped_in_prefill =
      Generate(*engine, Request(10), nullptr, [&](int64_t done, int64_t total) {
        progress.push_back(done);
        EXPECT_EQ(total, static_cast<int64_t>(Request(10).prompt_ids.size()));
        return progress.size() < 2;
      });
  EXPECT_EQ(stopped_in_prefill.status().code(), StatusCode::kCancelled);
  EXPECT_EQ(progress.size(), 2u);
  EXPECT_EQ(engine->num_sequences(), 0);
}

TEST(GenerateTest, ValidationErrorsNameTheProblem) {
  auto engine = MakeEngine();
  auto message = [&](const GenerationRequest& r) { return Generate(*engine, r).status().message(); };
  GenerationRequest r = Request(4);
  r.prompt_ids.clear();
  EXPECT_NE(message(r).find("empty"), std::string::npos);
  r = Request(4);
  r.prompt_ids[3] = 500;
  EXPECT_NE(message(r).find("500"), std::string::npos);
  r = Request(0);
  EXPECT_NE(message(r).find("max_new_tokens"), std::string::npos);
  // A prompt exactly at the context limit is refused: one generated token must fit.
  r = Request(1);
  r.prompt_ids = RandomIds(8192, 97, 9);
  std::string m = message(r);
  EXPECT_NE(m.find("8192"), std::string::npos) << m;
  r.prompt_ids.resize(8000);
  r.max_new_tokens = 500;
  m = message(r);
  EXPECT_NE(m.find("8000"), std::string::npos) << m;
  EXPECT_NE(m.find("500"), std::string::npos) << m;
  r = Request(4, -1.0f);
  EXPECT_NE(message(r).find("temperature"), std::string::npos);
  EXPECT_EQ(engine->num_sequences(), 0);
}

}  // namespace
}  // namespace millipede
