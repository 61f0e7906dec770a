// The attention registry (worker/attention/attention_registry.h) enumerated: every prefill
// pattern and decode role of the policy is registered once, agrees with the policy's pattern
// table, and is what Engine::capabilities() reports; every registered one runs on the CPU
// engine. Against a dense-math reference where one exists:
//  - one layer's prefill over random queries and keys equals softmax attention in double over
//    the explicit mask of each head's pattern (a ring pattern's from its RingHeadMask; a sparse
//    pattern's from the index its variant builds for the same step), alone and with every
//    registered pattern in one layer, and counts exactly the mask's pairs;
//  - in the engine, each pattern and role with parameters that cover every key gives the dense
//    engine's logits; with narrow parameters it runs and attends fewer pairs (prefill) or
//    changes the decode logits.
// A pattern or role registered without a case below fails RegistryTest.EveryEntryHasACase.
#include "worker/attention/attention_registry.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "policy/pattern_table.h"
#include "tests/worker/attention/layer_prefill_harness.h"
#include "tests/worker/engine/single_sequence.h"
#include "tests/worker/engine_test_util.h"

namespace millipede {
namespace {

using testing::MaxRelError;
using testing::RandomEngineOptions;
using testing::RandomIds;
using testing::SmallConfig;

// Parameters (the pattern's parameter object, null: none) under which it attends every causal
// key of a prompt of up to 300 tokens, and narrower ones.
struct PatternCase {
  PrefillPattern pattern;
  const char* covering;
  const char* narrow;
};
const PatternCase kPatternCases[] = {
    {PrefillPattern::kDense, nullptr, nullptr},
    {PrefillPattern::kAShape, R"({"sink_tokens": 4, "window_tokens": 300})",
     R"({"sink_tokens": 4, "window_tokens": 20})"},
    {PrefillPattern::kVerticalSlash, R"({"last_queries": 64, "vertical": 300, "slash": 300})",
     R"({"last_queries": 16, "vertical": 4, "slash": 6})"},
    {PrefillPattern::kBlockSparse, R"({"block": 16, "top_blocks": 19})",
     R"({"block": 16, "top_blocks": 2})"},
    {PrefillPattern::kAntidiagonal, R"({"block": 16, "stride": 4, "mass_permille": 1000})",
     R"({"block": 16, "stride": 4, "mass_permille": 500})"},
};

// Policy fields that give the role to some layer with parameters covering every key, and
// narrower ones (null: the role has no parameters that could).
struct RoleCase {
  DecodeRole role;
  const char* covering;
  const char* narrow;
};
constexpr const char* kOmniKvLayers =
    R"("layers": [{"layer": 0, "decode": "filter"}, {"layer": 1, "decode": "selected"}])";
const RoleCase kRoleCases[] = {
    {DecodeRole::kFull, R"("default": {"decode": "full"})", nullptr},
    {DecodeRole::kFilter, R"("filter": {"top_k": 1000}, )", R"("filter": {"top_k": 8}, )"},
    {DecodeRole::kSelected, R"("filter": {"top_k": 1000}, )", R"("filter": {"top_k": 8}, )"},
    {DecodeRole::kStreamingHead,
     R"("default": {"decode": "streaming-head"}, "streaming_head": {"window_tokens": 1000})",
     R"("default": {"decode": "streaming-head"},
        "streaming_head": {"sink_tokens": 4, "window_tokens": 16})"},
    {DecodeRole::kStaticEviction,
     R"("default": {"decode": "static-eviction"}, "static_eviction": {"keep_tokens": 1000})",
     R"("default": {"decode": "static-eviction"},
        "static_eviction": {"keep_tokens": 20, "recent_tokens": 8, "observed_queries": 8})"},
};

const PatternCase* CaseOf(PrefillPattern p) {
  for (const PatternCase& c : kPatternCases)
    if (c.pattern == p) return &c;
  return nullptr;
}

const RoleCase* CaseOf(DecodeRole r) {
  for (const RoleCase& c : kRoleCases)
    if (c.role == r) return &c;
  return nullptr;
}

// Policy text whose "default" gives KV head h the pattern patterns[h], with each pattern's
// parameters `covering` or narrow.
std::string PrefillPolicyText(const std::vector<PrefillPattern>& patterns, bool covering,
                              const std::string& extra = "") {
  std::string names, params;
  std::set<PrefillPattern> seen;
  for (PrefillPattern p : patterns) {
    names += std::string(names.empty() ? "" : ", ") + "\"" + PrefillPatternName(p) + "\"";
    const char* object = covering ? CaseOf(p)->covering : CaseOf(p)->narrow;
    if (object != nullptr && seen.insert(p).second)
      params += ", \"" + std::string(FindPatternFacts(p)->params_key) + "\": " + object;
  }
  return R"({"version": 1, "default": {"prefill": [)" + names + "]}" + params + extra + "}";
}

TEST(RegistryTest, EveryPatternAndRoleIsRegisteredOnceAndAgreesWithThePolicyTable) {
  ASSERT_EQ(RegisteredPrefillPatterns().size(), static_cast<size_t>(kNumPrefillPatterns));
  ASSERT_EQ(PrefillPatternTable().size(), static_cast<size_t>(kNumPrefillPatterns));
  for (int i = 0; i < kNumPrefillPatterns; ++i) {
    const PrefillPattern p = static_cast<PrefillPattern>(i);
    const PrefillPatternVariant* v = FindPrefillPattern(p);
    ASSERT_NE(v, nullptr) << PrefillPatternName(p) << " is not registered";
    EXPECT_EQ(v->pattern(), p);
    EXPECT_EQ(PrefillPatternTable()[static_cast<size_t>(i)].pattern, p);
    // The coordinator's fact (dynamic sparse) and the worker's kernel agree.
    EXPECT_EQ(IsDynamicSparse(p), v->kernel() == PrefillKernel::kSparse) << PrefillPatternName(p);
    EXPECT_EQ(v->MakeIndex(DensePolicy(1, 2).layers[0].prefill) != nullptr,
              v->kernel() == PrefillKernel::kSparse)
        << PrefillPatternName(p);
    EXPECT_EQ(ParsePrefillPattern(PrefillPatternName(p)).value(), p);
  }
  ASSERT_EQ(RegisteredDecodeRoles().size(), static_cast<size_t>(kNumDecodeRoles));
  ASSERT_EQ(DecodeRoleTable().size(), static_cast<size_t>(kNumDecodeRoles));
  for (int i = 0; i < kNumDecodeRoles; ++i) {
    const DecodeRole r = static_cast<DecodeRole>(i);
    const DecodeRoleRegistration* reg = FindDecodeRole(r);
    ASSERT_NE(reg, nullptr) << DecodeRoleName(r) << " is not registered";
    EXPECT_NE(reg->build, nullptr);
    EXPECT_EQ(DecodeRoleTable()[static_cast<size_t>(i)].role, r);
    EXPECT_EQ(ParseDecodeRole(DecodeRoleName(r)).value(), r);
  }
}

TEST(RegistryTest, EveryEntryHasACase) {
  for (const PrefillPatternVariant* v : RegisteredPrefillPatterns())
    EXPECT_NE(CaseOf(v->pattern()), nullptr)
        << "add a case for prefill pattern " << PrefillPatternName(v->pattern());
  for (const DecodeRoleRegistration& r : RegisteredDecodeRoles())
    EXPECT_NE(CaseOf(r.role), nullptr) << "add a case for decode role " << DecodeRoleName(r.role);
}

TEST(RegistryTest, CapabilitiesAreTheRegistry) {
  auto engine = Engine::Create(RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF32));
  ASSERT_TRUE(engine.ok());
  const PolicyCapabilities c = (*engine)->capabilities();
  PolicyCapabilities registered = RegisteredCapabilities();
  EXPECT_FALSE(registered.fp8_attention);
  registered.fp8_attention = true;  // the engine's: the CPU backend runs it at any head_dim
  EXPECT_EQ(c, registered);
  ASSERT_EQ(c.prefill.size(), RegisteredPrefillPatterns().size());
  for (size_t i = 0; i < c.prefill.size(); ++i)
    EXPECT_EQ(c.prefill[i], RegisteredPrefillPatterns()[i]->pattern());
  ASSERT_EQ(c.decode.size(), RegisteredDecodeRoles().size());
  for (size_t i = 0; i < c.decode.size(); ++i)
    EXPECT_EQ(c.decode[i], RegisteredDecodeRoles()[i].role);
  EXPECT_TRUE(c.mixed_decode_layers);
}

// One layer of every head `pattern`'s, then one of every registered pattern side by side, each
// over random queries and keys, against dense math over the explicit mask.
TEST(RegistryTest, EveryPrefillPatternMatchesDenseMathOverItsMask) {
  std::vector<PrefillPattern> all;
  for (const PrefillPatternVariant* v : RegisteredPrefillPatterns()) all.push_back(v->pattern());
  const int64_t kv_heads = static_cast<int64_t>(all.size());
  std::vector<std::vector<PrefillPattern>> layers;
  for (PrefillPattern p : all) layers.push_back(std::vector<PrefillPattern>(all.size(), p));
  layers.push_back(all);
  for (const std::vector<PrefillPattern>& patterns : layers) {
    const std::string text = PrefillPolicyText(patterns, /*covering=*/false);
    SCOPED_TRACE(text);
    StatusOr<AttentionPolicy> policy = ParseAttentionPolicy(text, 1, kv_heads);
    ASSERT_TRUE(policy.ok()) << policy.status().ToString();
    testing::LayerPrefillRun run(kv_heads, /*length=*/200, /*seed=*/7);
    ASSERT_TRUE(run.Ready());
    const std::vector<std::vector<uint8_t>> masks = run.Masks(policy->layers[0].prefill);
    ASSERT_EQ(masks.size(), static_cast<size_t>(kv_heads));
    const testing::LayerOutput got = run.Attend(*policy);
    const testing::LayerOutput want = run.Reference(masks);
    ASSERT_EQ(got.o.size(), want.o.size());
    EXPECT_LT(MaxRelError(got.o, want.o), 1e-5);
    EXPECT_LT(MaxRelError(got.lse, want.lse), 1e-5);
    EXPECT_EQ(got.pairs, testing::MaskPairs(masks));
  }
}

struct EngineRun {
  std::vector<float> prompt_logits, decode_logits;
  PrefillDensity density;
};

// Prefills 300 random tokens under `policy` and decodes 4 more.
EngineRun RunEngine(Engine& e, const AttentionPolicy& policy) {
  const std::vector<int32_t> prompt = RandomIds(300, 97, 21), decode = RandomIds(4, 97, 22);
  EngineRun out;
  EXPECT_TRUE(testing::StartSequence(e, 310, 300, policy).ok());
  Status s = testing::ForwardToHost(e, prompt, &out.prompt_logits, &out.density);
  EXPECT_TRUE(s.ok()) << s.ToString();
  for (int32_t id : decode) {
    StatusOr<ConstTensorView> logits = testing::ForwardDecode(e, id);
    EXPECT_TRUE(logits.ok()) << logits.status().ToString();
    if (!logits.ok()) break;
    std::vector<float> host(static_cast<size_t>(logits->NumElements()));
    EXPECT_TRUE(e.backend().CopyToHost(*logits, {host.data(), DType::kF32, logits->shape}).ok());
    out.decode_logits.insert(out.decode_logits.end(), host.begin(), host.end());
  }
  testing::EndSequence(e);
  return out;
}

class RegistryEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto engine = Engine::Create(RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF32, 64));
    ASSERT_TRUE(engine.ok());
    engine_ = std::move(engine).value();
    dense_ = RunEngine(*engine_, DensePolicy(2, 2));
  }
  std::unique_ptr<Engine> engine_;
  EngineRun dense_;
};

TEST_F(RegistryEngineTest, EveryPrefillPatternCoveringEveryKeyIsDense) {
  for (const PrefillPatternVariant* v : RegisteredPrefillPatterns()) {
    const PrefillPattern p = v->pattern();
    SCOPED_TRACE(PrefillPatternName(p));
    const EngineRun covering =
        RunEngine(*engine_, testing::PolicyFor(*engine_, PrefillPolicyText({p, p}, true)));
    EXPECT_LT(MaxRelError(covering.prompt_logits, dense_.prompt_logits), 1e-5);
    EXPECT_LT(MaxRelError(covering.decode_logits, dense_.decode_logits), 1e-5);
    EXPECT_EQ(covering.density.attended_pairs, dense_.density.causal_pairs);
    if (CaseOf(p)->narrow == nullptr) {
      EXPECT_EQ(covering.prompt_logits, dense_.prompt_logits);  // dense: the same path
      continue;
    }
    const EngineRun narrow =
        RunEngine(*engine_, testing::PolicyFor(*engine_, PrefillPolicyText({p, p}, false)));
    EXPECT_EQ(narrow.density.causal_pairs, dense_.density.causal_pairs);
    EXPECT_LT(narrow.density.attended_pairs, dense_.density.causal_pairs);
    EXPECT_GT(narrow.density.attended_pairs, 0);
    EXPECT_GT(MaxRelError(narrow.prompt_logits, dense_.prompt_logits), 1e-4);
  }
}

TEST_F(RegistryEngineTest, EveryDecodeRoleCoveringEveryKeyIsDense) {
  for (const DecodeRoleRegistration& reg : RegisteredDecodeRoles()) {
    SCOPED_TRACE(DecodeRoleName(reg.role));
    const RoleCase& c = *CaseOf(reg.role);
    const bool omnikv = reg.role == DecodeRole::kFilter || reg.role == DecodeRole::kSelected;
    const auto policy = [&](const char* fields) {
      const std::string text = omnikv ? std::string(fields) + kOmniKvLayers : fields;
      AttentionPolicy p = testing::PolicyFor(*engine_, R"({"version": 1, )" + text + "}");
      bool has_role = false;
      for (const LayerPolicy& l : p.layers) has_role = has_role || l.LayerDecode() == reg.role;
      EXPECT_TRUE(has_role);
      return p;
    };
    const EngineRun covering = RunEngine(*engine_, policy(c.covering));
    EXPECT_EQ(covering.prompt_logits, dense_.prompt_logits);
    EXPECT_LT(MaxRelError(covering.decode_logits, dense_.decode_logits), 1e-5);
    if (c.narrow == nullptr) continue;
    const EngineRun narrow = RunEngine(*engine_, policy(c.narrow));
    ASSERT_EQ(narrow.decode_logits.size(), dense_.decode_logits.size());
    EXPECT_GT(MaxRelError(narrow.decode_logits, dense_.decode_logits), 1e-4);
  }
}

}  // namespace
}  // namespace millipede
