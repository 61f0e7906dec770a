// OmniKV's filter and selected decode layers in the engine (CPU backend): a budget covering the
// context gives the dense logits and tokens; a small one changes them; the host tier and the
// device tier give identical results; the memory plan counts both tiers; bad policies are
// refused before any work.
#include <gtest/gtest.h>

#include <string>

#include "policy/head_groups.h"
#include "tests/worker/engine/single_sequence.h"
#include "tests/worker/engine_test_util.h"
#include "worker/generate.h"

namespace millipede {
namespace {

using testing::MaxRelError;
using testing::RandomIds;

// Eight layers: full, then two groups of a filter layer and the selected layers after it.
ModelConfig EightLayers() {
  ModelConfig c = testing::SmallConfig();
  c.num_hidden_layers = 8;
  return c;
}

std::unique_ptr<Engine> MakeEngine(SelectedKvTier tier) {
  EngineOptions o = testing::RandomEngineOptions(EightLayers(), DType::kF32, DType::kF32, 16);
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

// The logits of the last prompt position and of each forced decode token.
std::vector<std::vector<float>> Logits(Engine& e, const std::optional<AttentionPolicy>& policy,
                                       const std::vector<int32_t>& prompt,
                                       const std::vector<int32_t>& decode) {
  const int64_t n = static_cast<int64_t>(prompt.size()), m = static_cast<int64_t>(decode.size());
  Status started = testing::StartSequence(e, n + m, 0, policy, m);
  EXPECT_TRUE(started.ok()) << started.ToString();
  std::vector<std::vector<float>> out(1);
  EXPECT_TRUE(testing::ForwardToHost(e, prompt, &out[0]).ok());
  for (int32_t id : decode) {
    auto d = testing::ForwardDecode(e, id);
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    if (!d.ok()) break;
    out.emplace_back(static_cast<size_t>(e.config().vocab_size));
    EXPECT_TRUE(e.backend()
                    .CopyToHost(*d, {out.back().data(), DType::kF32, Shape{e.config().vocab_size}})
                    .ok());
  }
  testing::EndSequence(e);
  return out;
}

TEST(OmniKvEngineTest, BudgetCoveringTheContextIsDense) {
  const std::vector<int32_t> prompt = RandomIds(70, 97, 21), decode = RandomIds(6, 97, 22);
  for (SelectedKvTier tier : {SelectedKvTier::kDevice, SelectedKvTier::kHost}) {
    auto engine = MakeEngine(tier);
    const auto dense = Logits(*engine, std::nullopt, prompt, decode);
    // Every prompt token chosen (generated tokens are always seen): full attention.
    const auto omni = Logits(*engine, OmniPolicy(*engine, 70), prompt, decode);
    ASSERT_EQ(omni.size(), dense.size());
    for (size_t i = 0; i < dense.size(); ++i)
      EXPECT_LT(MaxRelError(omni[i], dense[i]), 1e-5) << SelectedKvTierName(tier) << " step " << i;
    GenerationRequest r;
    r.prompt_ids = prompt;
    r.max_new_tokens = 8;
    r.ignore_eos = true;
    auto plain = Generate(*engine, r);
    r.policy = OmniPolicy(*engine, 100);
    auto selected = Generate(*engine, r);
    ASSERT_TRUE(plain.ok() && selected.ok()) << selected.status().ToString();
    EXPECT_EQ(selected->ids, plain->ids) << SelectedKvTierName(tier);
  }
}

TEST(OmniKvEngineTest, SmallBudgetChangesTheAnswerAlikeInBothTiers) {
  const std::vector<int32_t> prompt = RandomIds(90, 97, 23), decode = RandomIds(5, 97, 24);
  auto device = MakeEngine(SelectedKvTier::kDevice);
  auto host = MakeEngine(SelectedKvTier::kHost);
  const auto dense = Logits(*device, std::nullopt, prompt, decode);
  const auto on_device = Logits(*device, OmniPolicy(*device, 3), prompt, decode);
  const auto on_host = Logits(*host, OmniPolicy(*host, 3), prompt, decode);
  ASSERT_EQ(on_device.size(), dense.size());
  EXPECT_EQ(on_device[0], dense[0]);  // prefill is unaffected by decode roles
  double largest = 0;
  for (size_t i = 1; i < dense.size(); ++i)
    largest = std::max(largest, MaxRelError(on_device[i], dense[i]));
  EXPECT_GT(largest, 1e-3);
  // The same rows reach the same ops whichever tier holds them.
  EXPECT_EQ(on_host, on_device);
  GenerationRequest r;
  r.prompt_ids = prompt;
  r.max_new_tokens = 8;
  r.ignore_eos = true;
  r.sampling.temperature = 1.0f;  // sampled, so that logit changes show in the tokens
  r.sampling.seed = 3;
  auto plain = Generate(*device, r);
  r.policy = OmniPolicy(*device, 2);
  auto a = Generate(*device, r);
  auto b = Generate(*host, r);
  ASSERT_TRUE(plain.ok() && a.ok() && b.ok());
  EXPECT_NE(a->ids, plain->ids);
  EXPECT_EQ(a->ids, b->ids);
}

TEST(OmniKvEngineTest, HostTierHoldsTheContextRowsOfItsLayers) {
  auto engine = MakeEngine(SelectedKvTier::kHost);
  Engine& e = *engine;
  const int64_t capacity = 100, decode_rows = 10;
  ASSERT_TRUE(testing::StartSequence(e, capacity, 0, OmniPolicy(e, 8), decode_rows).ok());
  // Layers 3, 4 and 7 (selected, not right after a filter layer): 90 context rows each of
  // 2 x 2 KV heads x 16 x 4 bytes.
  const int64_t row = 2 * 2 * 16 * 4;
  EXPECT_EQ(e.HostKvBytes(), 3 * 90 * row);
  // Every other layer keeps all rows on the device; the three keep their 10 generated rows there,
  // and share two staging slots of one step (capacity rows).
  EXPECT_EQ(e.KvBytes() - e.HostKvBytes(), (5 * capacity + 3 * decode_rows + 2 * capacity) * row);
  testing::EndSequence(e);
  EXPECT_EQ(e.HostKvBytes(), 0);

  SequenceOptions o{capacity, capacity, OmniPolicy(e, 8), decode_rows, SelectedKvTier::kHost};
  auto plan = e.PlanSequence(o, capacity);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->host_kv_bytes, 3 * 90 * row);
  EXPECT_EQ(plan->kv_bytes, (5 * capacity + 3 * decode_rows + 2 * capacity) * row);
  EXPECT_GT(plan->selection_bytes, 0);
  EXPECT_NE(plan->ToString().find("host tier"), std::string::npos) << plan->ToString();
  o.selected_kv = SelectedKvTier::kDevice;
  auto device_plan = e.PlanSequence(o, capacity);
  ASSERT_TRUE(device_plan.ok());
  EXPECT_EQ(device_plan->host_kv_bytes, 0);
  EXPECT_EQ(device_plan->kv_bytes, 8 * capacity * row);
}

// A partial host tier (what kAuto chooses when the device holds only part of the selected
// layers) takes the layers with the most compute between their filter layer and them first, and
// gives the answers of the full host tier and of the device.
TEST(OmniKvEngineTest, PartialHostTierTakesTheLayersFarthestFromTheirFilterFirst) {
  auto engine = MakeEngine(SelectedKvTier::kHost);
  Engine& e = *engine;
  // Candidates: 3 and 4 (filter 1), 7 (filter 5); layers 2 and 6 follow a filter layer.
  EXPECT_EQ(HostTierCandidates(OmniPolicy(e, 8)), (std::vector<int64_t>{4, 7, 3}));
  const int64_t capacity = 100, decode_rows = 10, row = 2 * 2 * 16 * 4;
  SequenceOptions o{capacity, capacity, OmniPolicy(e, 8), decode_rows, SelectedKvTier::kHost};
  for (int64_t layers : {0, 1, 2, 3, 9}) {
    o.host_tier_layers = layers;
    auto plan = e.PlanSequence(o, capacity);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    EXPECT_EQ(plan->host_kv_bytes, std::min<int64_t>(layers, 3) * 90 * row) << layers;
  }
  const std::vector<int32_t> prompt = RandomIds(90, 97, 26), decode = RandomIds(5, 97, 27);
  auto device = MakeEngine(SelectedKvTier::kDevice);
  const auto want = Logits(*device, OmniPolicy(*device, 5), prompt, decode);
  for (int64_t layers : {1, 2}) {
    const int64_t n = static_cast<int64_t>(prompt.size()), m = static_cast<int64_t>(decode.size());
    SequenceOptions partial{n + m, 0, OmniPolicy(e, 5), m, SelectedKvTier::kHost, layers};
    ASSERT_TRUE(e.StartSequence(testing::kSingleSequence, partial).ok());
    EXPECT_EQ(e.HostKvBytes(), layers * (n + m - m) * row);
    std::vector<std::vector<float>> got(1);
    ASSERT_TRUE(testing::ForwardToHost(e, prompt, &got[0]).ok());
    for (int32_t id : decode) {
      auto d = testing::ForwardDecode(e, id);
      ASSERT_TRUE(d.ok()) << d.status().ToString();
      got.emplace_back(97);
      ASSERT_TRUE(e.backend().CopyToHost(*d, {got.back().data(), DType::kF32, Shape{97}}).ok());
    }
    testing::EndSequence(e);
    EXPECT_EQ(got, want) << layers << " host-tier layers";
  }
}

// Decode benchmarks start from a synthetic cache: written chunk by chunk through the stores, so
// a host tier is filled (and staged) like a prefill fills it.
TEST(OmniKvEngineTest, SyntheticSequencesFillBothTiers) {
  std::vector<std::vector<float>> logits;
  for (SelectedKvTier tier : {SelectedKvTier::kDevice, SelectedKvTier::kHost}) {
    auto engine = MakeEngine(tier);
    Engine& e = *engine;
    ASSERT_TRUE(e.SetPolicy(OmniPolicy(e, 16)).ok());
    Status started = testing::StartSyntheticSequence(e, 6000, 3);
    ASSERT_TRUE(started.ok()) << started.ToString();
    EXPECT_EQ(testing::SequenceLength(e), 6000);
    EXPECT_EQ(e.HostKvBytes() > 0, tier == SelectedKvTier::kHost);
    for (int32_t id : {3, 4, 5}) {
      auto d = testing::ForwardDecode(e, id);
      ASSERT_TRUE(d.ok()) << d.status().ToString();
      logits.emplace_back(97);
      ASSERT_TRUE(e.backend().CopyToHost(*d, {logits.back().data(), DType::kF32, Shape{97}}).ok());
    }
    EXPECT_EQ(e.stats().host_load_bytes > 0, tier == SelectedKvTier::kHost);
  }
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(logits[i], logits[i + 3]);
}

TEST(OmniKvEngineTest, BadPoliciesAreRefusedBeforeAnyWork) {
  auto engine = MakeEngine(SelectedKvTier::kAuto);
  Engine& e = *engine;
  GenerationRequest r;
  r.prompt_ids = RandomIds(30, 97, 25);
  r.max_new_tokens = 3;
  // Built in code (a file would not parse): a selected layer with no filter layer before it.
  AttentionPolicy p = DensePolicy(8, 2);
  p.layers[2].decode.assign(2, DecodeRole::kSelected);
  p.layers[4].decode.assign(2, DecodeRole::kFilter);
  r.policy = p;
  auto refused = Generate(e, r);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("layer 2 is \"selected\" but no \"filter\" layer"),
            std::string::npos)
      << refused.status().ToString();
  EXPECT_EQ(e.num_sequences(), 0);
  p.filter.top_k = 0;
  p.layers[2].decode.assign(2, DecodeRole::kFull);
  r.policy = p;
  refused = Generate(e, r);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("filter.top_k must be positive"), std::string::npos);
  EXPECT_EQ(e.SetPolicy(p).code(), StatusCode::kInvalidArgument);
  // A sequence too large for the host is refused with the plan's numbers, host tier included.
  ModelConfig c = EightLayers();
  c.max_position_embeddings = int64_t{1} << 34;
  EngineOptions o = testing::RandomEngineOptions(c, DType::kF32, DType::kF32, 16);
  o.selected_kv = SelectedKvTier::kHost;
  auto big = Engine::Create(o);
  ASSERT_TRUE(big.ok());
  Status s = testing::StartSequence(**big, int64_t{1} << 33, 16, OmniPolicy(**big, 8), 16);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("host tier"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace millipede
