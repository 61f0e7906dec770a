// Attention policies in the engine: dense policies change nothing, A-shape prefill heads and
// streaming-head decode layers run (CPU backend) and equal dense when their window covers the
// sequence, layers mixing full and streaming heads give each head its role's output, and
// policies this engine cannot run are refused before any work.
#include <gtest/gtest.h>

#include <fstream>

#include "policy/head_groups.h"
#include "tests/worker/engine/single_sequence.h"
#include "tests/worker/engine_test_util.h"
#include "worker/generate.h"

namespace millipede {
namespace {

TEST(EnginePolicyTest, DensePolicyRunsAndOthersAreRefusedClearly) {
  auto engine = Engine::Create(testing::RandomEngineOptions(testing::SmallConfig(), DType::kF32,
                                                            DType::kF32));
  ASSERT_TRUE(engine.ok());
  Engine& e = **engine;
  EXPECT_TRUE(e.policy().IsDense());
  GenerationRequest r;
  r.prompt_ids = testing::RandomIds(40, 97, 2);
  r.max_new_tokens = 4;
  auto plain = Generate(e, r);
  ASSERT_TRUE(plain.ok());
  // Dense prefill computes every causal pair: 2 layers x 2 KV heads x 40 x 41 / 2.
  EXPECT_EQ(plain->prefill.causal_pairs, 2 * 2 * 40 * 41 / 2);
  EXPECT_EQ(plain->prefill.attended_pairs, plain->prefill.causal_pairs);
  // An explicit dense policy gives the same tokens.
  r.policy =
      testing::PolicyFor(e, R"({"version": 1, "default": {"prefill": "dense", "decode": "full"}})");
  auto dense = Generate(e, r);
  ASSERT_TRUE(dense.ok()) << dense.status().ToString();
  EXPECT_EQ(dense->ids, plain->ids);
  // OmniKV's roles run (omnikv_engine_test.cc checks what they compute).
  r.policy = testing::PolicyFor(e, R"({"version": 1, "layers": [
      {"layer": 0, "decode": "filter"}, {"layer": 1, "decode": "selected"}]})");
  EXPECT_TRUE(Generate(e, r).ok());
  // So do per-KV-head decode roles (DuoAttention's layers; checked below), here with an A-shape
  // prefill head, which computes fewer pairs.
  r.policy = testing::PolicyFor(e, R"({"version": 1, "default": {"prefill": ["a-shape", "dense"],
      "decode": ["full", "streaming-head"]}, "a_shape": {"sink_tokens": 2, "window_tokens": 8}})");
  auto duo = Generate(e, r);
  ASSERT_TRUE(duo.ok()) << duo.status().ToString();
  EXPECT_EQ(duo->prefill.causal_pairs, plain->prefill.causal_pairs);
  EXPECT_LT(duo->prefill.attended_pairs, plain->prefill.attended_pairs);
  // A policy for another model is refused before any work.
  r.policy = DensePolicy(9, 2);  // the model has 2 layers
  EXPECT_EQ(Generate(e, r).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(e.num_sequences(), 0);
  // The engine's own policy is untouched by the refused requests.
  EXPECT_TRUE(e.policy().IsDense());
  r.policy.reset();
  auto again = Generate(e, r);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->ids, plain->ids);
}

TEST(EnginePolicyTest, PolicyFileIsLoadedAtCreation) {
  const std::string path = ::testing::TempDir() + "/policy_test.json";
  {
    std::ofstream f(path);
    f << R"({"version": 1, "default": {"decode": ["full", "filter"]}})";
  }
  EngineOptions o = testing::RandomEngineOptions(testing::SmallConfig(), DType::kF32, DType::kF32);
  o.policy_file = path;
  auto refused = Engine::Create(o);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("\"full\" beside \"filter\""), std::string::npos)
      << refused.status().ToString();
  {
    std::ofstream f(path);
    f << R"({"version": 1, "dense_below_tokens": 100})";
  }
  auto ok = Engine::Create(o);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ((*ok)->policy().dense_below_tokens, 100);
  o.policy_file = path + ".missing";
  EXPECT_FALSE(Engine::Create(o).ok());
}

}  // namespace
}  // namespace millipede

namespace millipede {
namespace {

using testing::MaxRelError;
using testing::RandomEngineOptions;
using testing::RandomIds;
using testing::SmallConfig;

std::vector<float> PromptLogits(Engine& e, const std::vector<int32_t>& ids) {
  std::vector<float> logits;
  EXPECT_TRUE(testing::StartSequence(e, static_cast<int64_t>(ids.size()) + 4).ok());
  Status s = testing::ForwardToHost(e, ids, &logits);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return logits;
}

TEST(EnginePolicyTest, AShapePrefillEqualsDenseOnlyWhenTheWindowCoversThePrompt) {
  auto engine = Engine::Create(RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF32, 16));
  ASSERT_TRUE(engine.ok());
  Engine& e = **engine;
  const std::vector<int32_t> ids = RandomIds(90, 97, 5);
  const std::vector<float> dense = PromptLogits(e, ids);
  auto policy = [&](int64_t window, int64_t dense_below) {
    return testing::PolicyFor(e, R"({"version": 1, "default": {"prefill": "a-shape"},
        "dense_below_tokens": )" + std::to_string(dense_below) +
                                     R"(, "a_shape": {"sink_tokens": 4, "window_tokens": )" +
                                     std::to_string(window) + "}}");
  };
  ASSERT_TRUE(e.SetPolicy(policy(90, 0)).ok());
  EXPECT_LT(MaxRelError(PromptLogits(e, ids), dense), 1e-6);
  ASSERT_TRUE(e.SetPolicy(policy(8, 0)).ok());
  EXPECT_GT(MaxRelError(PromptLogits(e, ids), dense), 1e-3);
  // Below dense_below_tokens the same narrow policy is dense.
  ASSERT_TRUE(e.SetPolicy(policy(8, 91)).ok());
  EXPECT_LT(MaxRelError(PromptLogits(e, ids), dense), 1e-6);
}

// FP8 attention is opt-in: the dense heads' prefill attention runs on E4M3 operands (its op's
// tests bound that rounding), so the logits move off dense's by a little, and not at all when
// the policy leaves it off. A-shape heads stay exact, and so do dense heads that share a layer's
// attention call with them (the FP8 kernel takes no windows).
TEST(EnginePolicyTest, Fp8AttentionRoundsDenseHeadsOnly) {
  auto engine = Engine::Create(RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF32, 16));
  ASSERT_TRUE(engine.ok());
  Engine& e = **engine;
  const std::vector<int32_t> ids = RandomIds(90, 97, 5);
  const std::vector<float> dense = PromptLogits(e, ids);
  auto policy = [&](const std::string& prefill, bool fp8) {
    return testing::PolicyFor(e, R"({"version": 1, "fp8_attention": )" +
                                     std::string(fp8 ? "true" : "false") +
                                     R"(, "default": {"prefill": )" + prefill +
                                     R"(}, "a_shape": {"sink_tokens": 4, "window_tokens": 8}})");
  };
  ASSERT_TRUE(e.SetPolicy(policy(R"("dense")", true)).ok());
  EXPECT_NE(e.policy().Summary().find("fp8 attention"), std::string::npos);
  // The plan counts one call's FP8 operands: K and V of every row, a byte per value.
  auto plan = e.PlanSequence({.capacity = 300, .policy = e.policy()}, 0);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const int64_t width = e.config().num_key_value_heads * e.config().head_dim;
  EXPECT_GE(plan->fp8_bytes, 2 * 300 * width);
  EXPECT_LT(plan->fp8_bytes, 2 * 600 * width + 4096);
  EXPECT_NE(plan->ToString().find("fp8 attention operands"), std::string::npos);
  const double error = MaxRelError(PromptLogits(e, ids), dense);
  EXPECT_GT(error, 1e-5);
  EXPECT_LT(error, 0.1);
  ASSERT_TRUE(e.SetPolicy(policy(R"("dense")", false)).ok());
  EXPECT_EQ(MaxRelError(PromptLogits(e, ids), dense), 0.0);
  plan = e.PlanSequence({.capacity = 300, .policy = e.policy()}, 0);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->fp8_bytes, 0);
  for (const char* prefill : {R"("a-shape")", R"(["a-shape", "dense"])"}) {
    SCOPED_TRACE(prefill);
    ASSERT_TRUE(e.SetPolicy(policy(prefill, false)).ok());
    const std::vector<float> exact = PromptLogits(e, ids);
    ASSERT_TRUE(e.SetPolicy(policy(prefill, true)).ok());
    EXPECT_EQ(MaxRelError(PromptLogits(e, ids), exact), 0.0);
  }
}

TEST(EnginePolicyTest, StreamingHeadDecodeSeesSinksAndWindowOnly) {
  auto engine = Engine::Create(RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF32, 16));
  ASSERT_TRUE(engine.ok());
  Engine& e = **engine;
  GenerationRequest r;
  r.prompt_ids = RandomIds(60, 97, 6);
  r.max_new_tokens = 6;
  r.sampling.temperature = 1.0f;  // sampled, so that small logit changes show in the tokens
  r.sampling.seed = 3;
  auto full = Generate(e, r);
  ASSERT_TRUE(full.ok());
  r.policy = testing::PolicyFor(e, R"({"version": 1, "default": {"decode": "streaming-head"},
                      "streaming_head": {"sink_tokens": 2, "window_tokens": 100}})");
  auto wide = Generate(e, r);
  ASSERT_TRUE(wide.ok()) << wide.status().ToString();
  EXPECT_EQ(wide->ids, full->ids);
  // A window of 3 recent tokens: decode logits differ from full attention.
  const std::vector<int32_t> ids = RandomIds(60, 97, 6);
  const std::vector<float> prompt_logits = PromptLogits(e, ids);
  std::vector<float> full_step(97), narrow_step(97);
  auto step = testing::ForwardDecode(e, 11);
  ASSERT_TRUE(step.ok());
  ASSERT_TRUE(e.backend().CopyToHost(*step, {full_step.data(), DType::kF32, Shape{97}}).ok());
  ASSERT_TRUE(e.SetPolicy(testing::PolicyFor(e, R"({"version": 1,
      "default": {"decode": "streaming-head"},
      "streaming_head": {"sink_tokens": 2, "window_tokens": 3}})"))
                  .ok());
  PromptLogits(e, ids);  // prefill is unaffected by the decode role
  step = testing::ForwardDecode(e, 11);
  ASSERT_TRUE(step.ok());
  ASSERT_TRUE(e.backend().CopyToHost(*step, {narrow_step.data(), DType::kF32, Shape{97}}).ok());
  EXPECT_GT(MaxRelError(narrow_step, full_step), 1e-3);
}

// A layer mixing full and streaming-head KV heads (DuoAttention): in decode, each KV head's
// attention output equals that of the layer run with its role for every head: the full head's
// that of dense decode, the streaming head's that of an all-streaming layer (whose store keeps
// only the sinks and the window). Layer 1 is the one that differs; the tokens are fixed.
TEST(EnginePolicyTest, MixedDecodeLayerHeadsEqualTheirSingleRoleLayers) {
  EngineOptions options = RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF32, 16);
  std::vector<std::vector<float>> observed;  // layer 1's decode outputs of the current run
  options.attention_observer = [&](int64_t layer, ConstTensorView o) {
    if (layer != 1 || o.dim(0) != 1) return;
    observed.emplace_back(o.as<const float>(), o.as<const float>() + o.NumElements());
  };
  auto engine = Engine::Create(options);
  ASSERT_TRUE(engine.ok());
  Engine& e = **engine;
  const ModelConfig& c = e.config();
  ASSERT_EQ(c.num_hidden_layers, 2);
  ASSERT_EQ(c.num_key_value_heads, 2);
  const std::vector<int32_t> prompt = RandomIds(50, 97, 8);
  auto run = [&](const std::string& layer1_decode) {
    EXPECT_TRUE(e.SetPolicy(testing::PolicyFor(e, R"({"version": 1, "layers": [
        {"layer": 1, "decode": )" + layer1_decode + R"(}],
        "streaming_head": {"sink_tokens": 3, "window_tokens": 9}})"))
                    .ok());
    observed.clear();
    PromptLogits(e, prompt);
    for (int32_t id : {4, 40, 77}) EXPECT_TRUE(testing::ForwardDecode(e, id).ok());
    testing::EndSequence(e);
    return observed;
  };
  const auto full = run(R"("full")");
  const auto streaming = run(R"("streaming-head")");
  const auto mixed = run(R"(["streaming-head", "full"])");
  ASSERT_EQ(full.size(), 3u);
  ASSERT_EQ(streaming.size(), 3u);
  ASSERT_EQ(mixed.size(), 3u);
  // KV head 0 streams (q heads [0, group)), KV head 1 is full.
  const size_t half = full[0].size() / 2;
  auto part = [&](const std::vector<float>& v, bool first) {
    return first ? std::vector<float>(v.begin(), v.begin() + half)
                 : std::vector<float>(v.begin() + half, v.end());
  };
  for (size_t t = 0; t < 3; ++t) {
    SCOPED_TRACE("decode step " + std::to_string(t));
    EXPECT_LT(MaxRelError(part(mixed[t], true), part(streaming[t], true)), 1e-6);
    EXPECT_LT(MaxRelError(part(mixed[t], false), part(full[t], false)), 1e-6);
    // The window matters: the streaming head is not the full one.
    EXPECT_GT(MaxRelError(part(mixed[t], true), part(full[t], true)), 1e-3);
  }
}

TEST(EnginePolicyTest, StaticEvictionKeepsHeavyHittersAndRecentTokens) {
  auto engine = Engine::Create(RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF32, 16));
  ASSERT_TRUE(engine.ok());
  Engine& e = **engine;
  GenerationRequest r;
  r.prompt_ids = RandomIds(120, 97, 8);
  r.max_new_tokens = 8;
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 5;
  auto full = Generate(e, r);
  ASSERT_TRUE(full.ok());
  auto with = [&](int64_t keep, int64_t recent) {
    GenerationRequest x = r;
    x.policy = testing::PolicyFor(e, R"({"version": 1, "default": {"decode": "static-eviction"},
        "static_eviction": {"keep_tokens": )" +
                                         std::to_string(keep) + R"(, "recent_tokens": )" +
                                         std::to_string(recent) + R"(, "observed_queries": 8}})");
    return Generate(e, x);
  };
  // Keeping every prompt token, with a window covering the generated ones, is full attention.
  auto everything = with(120, 8);
  ASSERT_TRUE(everything.ok()) << everything.status().ToString();
  EXPECT_EQ(everything->ids, full->ids);
  // Generated tokens outside the window are evicted too (they are never heavy hitters).
  auto no_window = with(120, 1);
  ASSERT_TRUE(no_window.ok());
  EXPECT_NE(no_window->ids, full->ids);
  // A recent window covering the sequence is full attention too, whatever is kept.
  auto recent = with(1, 200);
  ASSERT_TRUE(recent.ok());
  EXPECT_EQ(recent->ids, full->ids);
  // A small budget changes the answer.
  auto evicted = with(4, 4);
  ASSERT_TRUE(evicted.ok());
  EXPECT_NE(evicted->ids, full->ids);
}

// DuoAttention's mixed layers keep a store per group of KV heads where that saves memory: the
// memory plan counts exactly the stores the sequence allocates (the full head's every row, the
// streaming head's sinks, two windows and a step), and the shared staging within its head-group
// buffers. Short sequences, split_kv_heads off and streaming heads whose a-shape prefill reaches
// beyond their window keep one store of every row.
TEST(EnginePolicyTest, PerGroupStoresAreWhatTheMemoryPlanCounts) {
  auto engine = Engine::Create(RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF32, 16));
  ASSERT_TRUE(engine.ok());
  Engine& e = **engine;
  const ModelConfig& c = e.config();
  ASSERT_EQ(c.num_key_value_heads, 2);
  auto duo = [&](int64_t a_shape_window) {
    return testing::PolicyFor(e, R"({"version": 1,
        "default": {"prefill": ["a-shape", "dense"], "decode": ["streaming-head", "full"]},
        "a_shape": {"sink_tokens": 2, "window_tokens": )" + std::to_string(a_shape_window) + R"(},
        "streaming_head": {"sink_tokens": 2, "window_tokens": 8}})");
  };
  const int64_t row = 2 * c.head_dim * 4;  // one KV head's K and V rows, F32
  const int64_t capacity = 1000, step = 50;
  SequenceOptions o{capacity, step, duo(8)};
  EXPECT_TRUE(Sequence::SplitsKvHeads(o));
  auto plan = e.PlanSequence(o, step);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->kv_bytes, c.num_hidden_layers * (capacity + 2 + 2 * 8 + step) * row);
  // What the coordinator's admission counts for such a job (policy/head_groups.h).
  EXPECT_EQ(plan->kv_bytes, KvHeadRows(o.policy, 2, capacity, step) * row);
  ASSERT_TRUE(e.StartSequence(testing::kSingleSequence, o).ok());
  // The stores, and one step's staging rows of both heads.
  EXPECT_EQ(e.KvBytes(), plan->kv_bytes + step * 2 * row);
  EXPECT_LE(e.KvBytes(), plan->kv_bytes + plan->head_group_bytes);
  testing::EndSequence(e);
  EXPECT_FALSE(Sequence::SplitsKvHeads({100, step, duo(8)}));
  EXPECT_FALSE(Sequence::SplitsKvHeads({capacity, step, duo(20)}));
  o.split_kv_heads = false;
  EXPECT_FALSE(Sequence::SplitsKvHeads(o));
  auto one = e.PlanSequence(o, step);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->kv_bytes, c.num_hidden_layers * capacity * 2 * row);
  EXPECT_EQ(one->kv_bytes, KvHeadRows(o.policy, 2, capacity, step, false) * row);
  EXPECT_EQ(one->head_group_bytes, 0);
}

// In a layer with a store per group of KV heads, the full group's ring has no window: FP8
// attention takes its calls (the streaming group's stay exact), so the logits move.
TEST(EnginePolicyTest, Fp8AttentionReachesDuoAttentionsFullHeads) {
  auto engine = Engine::Create(RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF32, 16));
  ASSERT_TRUE(engine.ok());
  Engine& e = **engine;
  auto duo = [&](bool fp8) {
    return testing::PolicyFor(
        e, std::string(R"({"version": 1, "fp8_attention": )") + (fp8 ? "true" : "false") + R"(,
        "default": {"prefill": ["a-shape", "dense"], "decode": ["streaming-head", "full"]},
        "a_shape": {"sink_tokens": 2, "window_tokens": 8},
        "streaming_head": {"sink_tokens": 2, "window_tokens": 8}})");
  };
  const std::vector<int32_t> ids = RandomIds(120, 97, 7);
  std::vector<float> logits[2];
  for (int fp8 = 0; fp8 < 2; ++fp8) {
    ASSERT_TRUE(Sequence::SplitsKvHeads({1000, 120, duo(fp8 == 1)}));
    ASSERT_TRUE(testing::StartSequence(e, 1000, 120, duo(fp8 == 1)).ok());
    const Status s = testing::ForwardToHost(e, ids, &logits[fp8]);
    ASSERT_TRUE(s.ok()) << s.ToString();
    testing::EndSequence(e);
  }
  const double error = MaxRelError(logits[1], logits[0]);
  EXPECT_GT(error, 1e-5);
  EXPECT_LT(error, 0.1);
}

}  // namespace
}  // namespace millipede
