// SearchPolicy (MInference's pattern search) on a small random model in fp32: the candidates are
// sized by the cost model, then vertical-slash and block-sparse tuned by the pairs their index
// covers on the prompt; with a budget that covers every key the a-shape and
// block-sparse candidates are dense attention (their errors vanish); and the searched policy, run
// on one layer at a time, is at least as close to dense attention as any single candidate on all
// of that layer's heads — each head kept its best, and the policy puts each choice on its own
// head.
#include "worker/policy_search.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "policy/policy_summary.h"
#include "tests/worker/engine/single_sequence.h"
#include "tests/worker/engine_test_util.h"

namespace millipede {
namespace {

using testing::RandomEngineOptions;
using testing::RandomIds;
using testing::SmallConfig;

EngineOptions Options() {
  EngineOptions o = RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF32);
  o.random_weights.locality = 8;  // heads that favour nearby keys: the candidates differ
  o.random_weights.head_dim = o.random_config.head_dim;
  return o;
}

// Layer `layer`'s attention output for the prompt under `policy`.
std::vector<float> LayerOutput(const AttentionPolicy& policy, const std::vector<int32_t>& prompt,
                               int64_t layer) {
  std::vector<float> captured;
  EngineOptions o = Options();
  Engine* engine = nullptr;
  o.attention_observer = [&](int64_t l, ConstTensorView out) {
    if (l != layer) return;
    captured.resize(static_cast<size_t>(out.NumElements()));
    EXPECT_TRUE(engine->backend()
                    .CopyToHost(out, {captured.data(), DType::kF32, out.shape})
                    .ok());
  };
  auto created = Engine::Create(o, nullptr);
  EXPECT_TRUE(created.ok()) << created.status().ToString();
  if (!created.ok()) return captured;
  engine = created->get();
  const int64_t n = static_cast<int64_t>(prompt.size());
  EXPECT_TRUE(testing::StartSequence(*engine, n, n, policy).ok());
  EXPECT_TRUE(testing::Forward(*engine, prompt).ok());
  return captured;
}

double SquaredError(const std::vector<float>& a, const std::vector<float>& b) {
  double e = 0;
  for (size_t i = 0; i < a.size(); ++i) e += (static_cast<double>(a[i]) - b[i]) * (a[i] - b[i]);
  return e;
}

TEST(PolicySearchTest, CandidatesFitTheBudget) {
  for (const int64_t n : {64, 300, 5000})
    for (const double budget : {0.05, 0.3, 1.0}) {
      PolicySearchOptions options;
      options.budget = budget;
      options.sink_tokens = 16;
      auto candidates = SearchCandidates(n, options);
      ASSERT_TRUE(candidates.ok()) << candidates.status().ToString();
      ASSERT_EQ(candidates->size(), 5u);
      const double target = budget * CausalPairs(n);
      // The antidiagonal candidate has no cost model: it starts from a mass threshold.
      const SearchCandidate& adaptive = candidates->back();
      EXPECT_EQ(adaptive.head.pattern, PrefillPattern::kAntidiagonal);
      EXPECT_EQ(adaptive.head.antidiagonal.mass_permille, budget >= 1 ? 1000 : 900);
      for (const SearchCandidate& c : *candidates) {
        if (c.head.pattern == PrefillPattern::kAntidiagonal) continue;
        const double pairs = ExpectedPrefillPairs(c.head, n);
        // Within the budget unless the smallest setting already exceeds it.
        const bool smallest =
            c.head.pattern == PrefillPattern::kAShape ? c.head.a_shape.window_tokens == 1
            : c.head.pattern == PrefillPattern::kBlockSparse ? c.head.block_sparse.top_blocks == 1
                                                             : c.head.vertical_slash.slash == 1;
        EXPECT_TRUE(pairs <= target * (1 + 1e-12) || smallest) << c.name << " n " << n;
        EXPECT_GT(pairs, 0) << c.name;
      }
      // The a-shape window is the largest that fits.
      HeadPrefillPolicy wider = (*candidates)[0].head;
      ++wider.a_shape.window_tokens;
      if (ExpectedPrefillPairs((*candidates)[0].head, n) < CausalPairs(n)) {
        EXPECT_GT(ExpectedPrefillPairs(wider, n), target) << n << " " << budget;
      }
    }
  PolicySearchOptions bad;
  bad.budget = 0;
  EXPECT_FALSE(SearchCandidates(100, bad).ok());
  bad.budget = 0.1;
  bad.sink_tokens = 0;
  EXPECT_FALSE(SearchCandidates(100, bad).ok());
}

TEST(PolicySearchTest, ABudgetCoveringEveryKeyIsDense) {
  const std::vector<int32_t> prompt = RandomIds(200, 97, 4);
  PolicySearchOptions options;
  options.budget = 1.0;
  auto result = SearchPolicy(Options(), prompt, options);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  // A-shape's window and block-sparse's blocks then reach every key: dense attention. (The
  // vertical-slash mixes split the keys between columns and diagonals, which need not cover
  // every pair, so they are only near it.)
  for (const auto& layer : result->errors)
    for (size_t k = 0; k < layer.size(); ++k) {
      const SearchCandidate& cand = result->candidates[k];
      if (cand.head.pattern == PrefillPattern::kVerticalSlash) continue;
      for (double e : layer[k]) EXPECT_LT(e, 1e-10) << cand.name;
    }
}

TEST(PolicySearchTest, EachLayerIsAtLeastAsCloseAsAnyOneCandidate) {
  const std::vector<int32_t> prompt = RandomIds(300, 97, 5);
  PolicySearchOptions options;
  options.budget = 0.25;
  options.sink_tokens = 8;
  options.dense_below_tokens = 128;
  auto result = SearchPolicy(Options(), prompt, options);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  const ModelConfig c = SmallConfig();
  const AttentionPolicy dense = DensePolicy(c.num_hidden_layers, c.num_key_value_heads);
  EXPECT_EQ(result->policy.dense_below_tokens, 128);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::vector<float> reference = LayerOutput(dense, prompt, l);
    AttentionPolicy searched = dense;
    searched.layers[static_cast<size_t>(l)] = result->policy.layers[static_cast<size_t>(l)];
    const double norm = SquaredError(reference, std::vector<float>(reference.size(), 0.0f));
    const double got = SquaredError(LayerOutput(searched, prompt, l), reference);
    for (const SearchCandidate& cand : result->candidates) {
      AttentionPolicy uniform = dense;
      uniform.layers[static_cast<size_t>(l)].prefill.assign(
          static_cast<size_t>(c.num_key_value_heads), cand.head);
      const double other = SquaredError(LayerOutput(uniform, prompt, l), reference);
      EXPECT_LE(got, other + 1e-9 * norm) << "layer " << l << " vs " << cand.name;
    }
    // The errors the search recorded for its choices are those of the chosen candidates.
    for (int64_t g = 0; g < c.num_key_value_heads; ++g) {
      const int k = result->chosen[static_cast<size_t>(l)][static_cast<size_t>(g)];
      EXPECT_EQ(result->policy.layers[static_cast<size_t>(l)].prefill[static_cast<size_t>(g)],
                result->candidates[static_cast<size_t>(k)].head);
    }
  }
  EXPECT_NE(PolicySearchReport(*result).find("layer 1:"), std::string::npos);
}

// Vertical-slash, block-sparse and antidiagonal candidates are tuned by the pairs their index
// covers on the reference prompt (the kernel's work), which the cost model only bounds: the
// recorded density is what the candidate gives on every layer; the vertical-slash sizes and the
// antidiagonal mass threshold reach the budget within 10%, and block-sparse (whole 64-token
// blocks of a 600-token prompt) takes the top-blocks count closest to it.
TEST(PolicySearchTest, CandidatesAreTunedToTheCoveredPairs) {
  const std::vector<int32_t> prompt = RandomIds(600, 97, 7);
  PolicySearchOptions options;
  options.budget = 0.2;
  options.sink_tokens = 8;
  auto result = SearchPolicy(Options(), prompt, options);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  const ModelConfig c = SmallConfig();
  // The share of the causal pairs `head` covers on every layer of the prompt.
  auto density = [&](const HeadPrefillPolicy& head) {
    AttentionPolicy every = DensePolicy(c.num_hidden_layers, c.num_key_value_heads);
    for (LayerPolicy& layer : every.layers) layer.prefill.assign(layer.prefill.size(), head);
    auto engine = Engine::Create(Options(), nullptr);
    EXPECT_TRUE(engine.ok());
    const int64_t n = static_cast<int64_t>(prompt.size());
    EXPECT_TRUE(testing::StartSequence(**engine, n, n, every).ok());
    PrefillDensity d;
    EXPECT_TRUE(testing::Forward(**engine, prompt, &d).ok());
    return static_cast<double>(d.attended_pairs) / static_cast<double>(d.causal_pairs);
  };
  int vertical_slash = 0, antidiagonal = 0;
  for (const SearchCandidate& cand : result->candidates) {
    if (cand.head.pattern == PrefillPattern::kAShape) {
      EXPECT_EQ(cand.measured_density, -1) << cand.name;
      continue;
    }
    ASSERT_GT(cand.measured_density, 0) << cand.name;
    EXPECT_DOUBLE_EQ(density(cand.head), cand.measured_density) << cand.name;
    const double off = std::abs(cand.measured_density - options.budget);
    if (cand.head.pattern == PrefillPattern::kVerticalSlash) {
      ++vertical_slash;
      EXPECT_LE(off, 0.1 * options.budget) << cand.name;
    } else if (cand.head.pattern == PrefillPattern::kAntidiagonal) {
      // The bisected mass threshold brings the density within 10% of the budget, or as low as it
      // goes: at 600 tokens the first and diagonal blocks, always kept, are already more.
      ++antidiagonal;
      HeadPrefillPolicy least = cand.head;
      least.antidiagonal.mass_permille = 1;
      EXPECT_TRUE(off <= 0.1 * options.budget || density(least) == cand.measured_density)
          << cand.name << " density " << cand.measured_density;
      EXPECT_LT(cand.head.antidiagonal.mass_permille, 900) << cand.name;
    } else {
      // No other count of blocks comes closer.
      for (const int64_t d : {-1, 1}) {
        HeadPrefillPolicy other = cand.head;
        other.block_sparse.top_blocks += d;
        if (other.block_sparse.top_blocks < 1) continue;
        EXPECT_GE(std::abs(density(other) - options.budget), off) << cand.name << " " << d;
      }
    }
  }
  EXPECT_EQ(vertical_slash, 2);
  EXPECT_EQ(antidiagonal, 1);
  EXPECT_NE(PolicySearchReport(*result).find("measured density"), std::string::npos);
}

TEST(PolicySearchTest, RefusesShortPrompts) {
  auto result = SearchPolicy(Options(), RandomIds(40, 97, 6), PolicySearchOptions{});
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("at least 64"), std::string::npos);
}

}  // namespace
}  // namespace millipede
