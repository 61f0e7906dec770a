// TokenSampler on the CPU backend (the bias and penalties from the token history, the draw, the
// log-probabilities of the raw logits), and Generate with them: every greedy token is the argmax
// of the recomputed logits penalised by hand from the prompt and the tokens before it.
#include "worker/token_sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "engine_test_util.h"
#include "tests/worker/engine/single_sequence.h"
#include "worker/backend/cpu_backend.h"
#include "worker/generate.h"

namespace millipede {
namespace {

using testing::RandomEngineOptions;
using testing::RandomIds;
using testing::SmallConfig;

ConstTensorView Row(const std::vector<float>& v) {
  return {v.data(), DType::kF32, Shape{static_cast<int64_t>(v.size())}};
}

int32_t Argmax(const std::vector<double>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// vLLM's penalties, written out again from the definition: the bias; the repetition penalty on
// ids of the prompt or the output; frequency x count + presence over the output.
std::vector<double> Penalised(const std::vector<float>& logits, const SamplingParams& p,
                              const std::vector<int32_t>& prompt,
                              const std::vector<int32_t>& output) {
  std::map<int32_t, int> count;
  for (int32_t id : output) ++count[id];
  std::vector<double> x(logits.begin(), logits.end());
  for (const LogitBias& b : p.logit_bias) x[b.id] += b.bias;
  for (size_t i = 0; i < x.size(); ++i) {
    const int32_t id = static_cast<int32_t>(i);
    const int c = count.count(id) ? count[id] : 0;
    if (c > 0 || std::find(prompt.begin(), prompt.end(), id) != prompt.end())
      x[i] = x[i] > 0 ? x[i] / p.repetition_penalty : x[i] * p.repetition_penalty;
    x[i] -= p.frequency_penalty * c + (c > 0 ? p.presence_penalty : 0.0);
  }
  return x;
}

double LogSoftmaxAt(const std::vector<float>& logits, int32_t id) {
  double max = *std::max_element(logits.begin(), logits.end()), sum = 0;
  for (float v : logits) sum += std::exp(v - max);
  return logits[id] - max - std::log(sum);
}

TEST(TokenSamplerTest, BiasPenaltiesAndHistory) {
  std::unique_ptr<Backend> backend = CreateCpuBackend();
  const std::vector<float> logits = {1.0f, 3.0f, 2.9f, -1.0f, 0.5f};
  const std::vector<int32_t> prompt = {4, 4, 0};
  SamplingParams p;
  p.presence_penalty = 0.5f;
  p.logit_bias = {{3, 5.0f}};
  auto sampler = TokenSampler::Create(*backend, p, 5, prompt);
  ASSERT_TRUE(sampler.ok()) << sampler.status().ToString();
  // Greedy over the biased logits: id 3 (-1 + 5 = 4) beats id 1 (3).
  StatusOr<SampledToken> t = (*sampler)->Sample(Row(logits), 0);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->id, 3);
  EXPECT_TRUE(t->top.empty());
  // Once 3 is generated its presence penalty (0.5) still leaves it first (3.5 > 3) ...
  ASSERT_TRUE((*sampler)->Accept(3).ok());
  EXPECT_EQ((*sampler)->Sample(Row(logits), 1)->id, 3);
  // ... but the logits the caller passed are never modified.
  EXPECT_EQ(logits[3], -1.0f);
  // With a frequency penalty the count matters: two 3s and a 1 make 2 the best.
  p.frequency_penalty = 1.0f;
  auto counted = TokenSampler::Create(*backend, p, 5, prompt);
  ASSERT_TRUE(counted.ok());
  for (int32_t id : {3, 3, 1}) ASSERT_TRUE((*counted)->Accept(id).ok());
  const std::vector<double> expected = Penalised(logits, p, prompt, {3, 3, 1});
  EXPECT_EQ((*counted)->Sample(Row(logits), 3)->id, Argmax(expected));
  EXPECT_EQ(Argmax(expected), 2);
  // The repetition penalty reads the prompt: 4 and 0 are in it.
  SamplingParams r;
  r.repetition_penalty = 10.0f;
  auto repeated = TokenSampler::Create(*backend, r, 5, prompt);
  ASSERT_TRUE(repeated.ok());
  const std::vector<float> close = {2.0f, 1.0f, 0.0f, 0.0f, 2.5f};
  EXPECT_EQ((*repeated)->Sample(Row(close), 0)->id, 1);  // 4 -> 0.25, 0 -> 0.2
  // Ids outside the vocabulary are refused.
  EXPECT_FALSE((*repeated)->Accept(5).ok());
  SamplingParams bad;
  bad.logit_bias = {{7, 1.0f}};
  EXPECT_EQ(TokenSampler::Create(*backend, bad, 5, prompt).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(TokenSamplerTest, LogprobsComeFromTheRawLogits) {
  std::unique_ptr<Backend> backend = CreateCpuBackend();
  const std::vector<float> logits = {0.0f, 1.0f, 2.0f, 1.5f};
  SamplingParams p;
  p.logit_bias = {{0, 10.0f}};
  p.logprobs = 2;
  auto sampler = TokenSampler::Create(*backend, p, 4, {});
  ASSERT_TRUE(sampler.ok());
  StatusOr<SampledToken> t = (*sampler)->Sample(Row(logits), 0);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->id, 0);  // the bias decides the token ...
  // ... but not the log-probabilities, which are the model's.
  EXPECT_NEAR(t->logprob, LogSoftmaxAt(logits, 0), 1e-6);
  ASSERT_EQ(t->top.size(), 2u);
  EXPECT_EQ(t->top[0].id, 2);
  EXPECT_EQ(t->top[1].id, 3);
  EXPECT_NEAR(t->top[1].logprob, LogSoftmaxAt(logits, 3), 1e-6);
  p.logprobs = 0;
  auto only_token = TokenSampler::Create(*backend, p, 4, {});
  StatusOr<SampledToken> u = (*only_token)->Sample(Row(logits), 0);
  ASSERT_TRUE(u.ok());
  EXPECT_TRUE(u->top.empty());
  EXPECT_NEAR(u->logprob, LogSoftmaxAt(logits, 0), 1e-6);
}

std::unique_ptr<Engine> MakeEngine() {
  auto e = Engine::Create(RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF32));
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return std::move(e).value();
}

TEST(TokenSamplerTest, GenerateAppliesThePenaltiesToEveryToken) {
  auto engine = MakeEngine();
  GenerationRequest r;
  r.prompt_ids = RandomIds(12, 97, 21);
  r.max_new_tokens = 10;
  r.ignore_eos = true;
  r.sampling.repetition_penalty = 1.5f;
  r.sampling.presence_penalty = 0.4f;
  r.sampling.frequency_penalty = 0.6f;
  r.sampling.logit_bias = {{7, 0.5f}, {11, -0.5f}};
  r.sampling.logprobs = 3;
  std::vector<SampledToken> seen;
  auto result = Generate(*engine, r, [&](const SampledToken& t) {
    seen.push_back(t);
    return true;
  });
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  ASSERT_EQ(seen.size(), 10u);
  std::vector<int32_t> seq = r.prompt_ids, output;
  int differs_from_plain_greedy = 0;
  for (const SampledToken& t : seen) {
    ASSERT_TRUE(testing::StartSequence(*engine, static_cast<int64_t>(seq.size())).ok());
    std::vector<float> logits;
    ASSERT_TRUE(testing::ForwardToHost(*engine, seq, &logits).ok());
    testing::EndSequence(*engine);
    const std::vector<double> penalised = Penalised(logits, r.sampling, r.prompt_ids, output);
    EXPECT_EQ(t.id, Argmax(penalised));
    std::vector<double> raw(logits.begin(), logits.end());
    differs_from_plain_greedy += Argmax(raw) != t.id;
    // Cache vs recompute: the logits agree to ~1e-6, the log-probabilities as closely.
    EXPECT_NEAR(t.logprob, LogSoftmaxAt(logits, t.id), 1e-4);
    ASSERT_EQ(t.top.size(), 3u);
    EXPECT_EQ(t.top[0].id, Argmax(raw));
    EXPECT_NEAR(t.top[0].logprob, LogSoftmaxAt(logits, t.top[0].id), 1e-4);
    seq.push_back(t.id);
    output.push_back(t.id);
  }
  EXPECT_EQ(result->ids, output);
  // The penalties did change the answer, so the test above checked something.
  EXPECT_GT(differs_from_plain_greedy, 0);
}

TEST(TokenSamplerTest, SeededSamplingWithPenaltiesIsReproducible) {
  GenerationRequest r;
  r.prompt_ids = RandomIds(9, 97, 22);
  r.max_new_tokens = 16;
  r.ignore_eos = true;
  r.sampling = {.temperature = 1.2f,
                .top_p = 0.95f,
                .seed = 99,
                .repetition_penalty = 1.2f,
                .frequency_penalty = 0.5f,
                .min_p = 0.02f};
  auto a = Generate(*MakeEngine(), r);
  auto b = Generate(*MakeEngine(), r);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->ids, b->ids);
  r.sampling.seed = 100;
  auto c = Generate(*MakeEngine(), r);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(a->ids, c->ids);
}

}  // namespace
}  // namespace millipede
