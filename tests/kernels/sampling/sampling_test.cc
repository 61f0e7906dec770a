#include "kernels/sampling/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <vector>

#include "tests/kernels/kernel_test_util.h"

namespace millipede {
namespace {

using testing::CView;
using testing::kInf;
using testing::kNaN;
using testing::RandomTensor;
using testing::TensorOf;

HostTensor Logits(const std::vector<float>& values) {
  return TensorOf(DType::kF32, {static_cast<int64_t>(values.size())}, values);
}

int32_t Sample(const HostTensor& logits, const SamplingParams& params, uint64_t step) {
  StatusOr<int32_t> id = SampleRef(CView(logits), params, step);
  EXPECT_TRUE(id.ok()) << id.status().ToString();
  return id.ok() ? *id : -1;
}

// Counts of each token over `draws` consecutive steps.
std::vector<int> Histogram(const HostTensor& logits, const SamplingParams& params, int draws) {
  std::vector<int> counts(logits.NumElements(), 0);
  for (int step = 0; step < draws; ++step) ++counts[Sample(logits, params, step)];
  return counts;
}

TEST(SamplingTest, GreedyTakesArgmaxWithTiesToLowestId) {
  EXPECT_EQ(Sample(Logits({0.5f, 2.0f, -1.0f, 1.9f}), {}, 0), 1);
  EXPECT_EQ(Sample(Logits({1.0f, 3.0f, 3.0f, 3.0f}), {}, 0), 1);
  EXPECT_EQ(Sample(Logits({-kInf, -5.0f, -kInf}), {}, 0), 1);
  // Greedy ignores the seed, step, top_k and top_p.
  EXPECT_EQ(Sample(Logits({0.0f, 1.0f, 0.9f}), {0.0f, 2, 0.1f, 99}, 12345), 1);
}

TEST(SamplingTest, SameSeedAndStepGiveSameToken) {
  HostTensor logits = RandomTensor(DType::kF32, {1000}, 1, -3.0f, 3.0f);
  const SamplingParams params{0.8f, 50, 0.9f, 7};
  for (uint64_t step = 0; step < 50; ++step)
    EXPECT_EQ(Sample(logits, params, step), Sample(logits, params, step));
}

TEST(SamplingTest, DifferentSeedsGiveDifferentSequences) {
  HostTensor logits = Logits({0, 0, 0, 0, 0, 0, 0, 0});  // uniform over 8 tokens
  std::vector<int32_t> a, b;
  for (uint64_t step = 0; step < 64; ++step) {
    a.push_back(Sample(logits, {1.0f, 0, 1.0f, 1}, step));
    b.push_back(Sample(logits, {1.0f, 0, 1.0f, 2}, step));
  }
  EXPECT_NE(a, b);
}

// Chi-square of observed counts against expected probabilities (cells with p > 0).
double ChiSquare(const std::vector<int>& counts, const std::vector<double>& p, int draws) {
  double chi2 = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " has probability 0";
      continue;
    }
    const double e = p[i] * draws;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi2;
}

std::vector<double> Softmax(const std::vector<float>& logits, double temperature) {
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) sum += p[i] = std::exp(logits[i] / temperature);
  for (double& x : p) x /= sum;
  return p;
}

TEST(SamplingTest, FrequenciesMatchSoftmax) {
  // 8 tokens, 40000 draws, 7 degrees of freedom: the 99.99th percentile of chi-square(7) is ~29.9.
  // The seeds are fixed, so this cannot flake; a bias of a few percent on any token fails it.
  const std::vector<float> values = {1.0f, 0.5f, -0.3f, 2.0f, 0.0f, -1.5f, 1.2f, 0.7f};
  constexpr int kDraws = 40000;
  for (float temperature : {1.0f, 0.7f, 2.0f}) {
    const std::vector<int> counts = Histogram(Logits(values), {temperature, 0, 1.0f, 3}, kDraws);
    EXPECT_LT(ChiSquare(counts, Softmax(values, temperature), kDraws), 29.9) << temperature;
  }
}

TEST(SamplingTest, TopKAndTopPFrequenciesMatchRenormalisedKeptSet) {
  const std::vector<float> values = {1.0f, 0.5f, -0.3f, 2.0f, 0.0f, -1.5f, 1.2f, 0.7f};
  const std::vector<double> full = Softmax(values, 1.0);
  constexpr int kDraws = 30000;
  // top_k = 3 keeps tokens 3, 6, 0.
  std::vector<double> p(values.size(), 0.0);
  for (int id : {3, 6, 0}) p[id] = full[id];
  double kept = p[3] + p[6] + p[0];
  for (double& x : p) x /= kept;
  EXPECT_LT(ChiSquare(Histogram(Logits(values), {1.0f, 3, 1.0f, 4}, kDraws), p, kDraws), 18.5);
  // top_p = 0.6: sorted probabilities 0.331, 0.148, 0.122, ... reach 0.6 with the fourth token
  // (0.331 + 0.148 + 0.122 = 0.601 >= 0.6 already with three). Compute the kept set by hand.
  std::vector<int> order(values.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return full[a] > full[b]; });
  std::vector<double> q(values.size(), 0.0);
  double cumulative = 0;
  for (int id : order) {
    if (cumulative >= 0.6) break;
    cumulative += full[id];
    q[id] = full[id];
  }
  for (double& x : q) x /= cumulative;
  EXPECT_LT(ChiSquare(Histogram(Logits(values), {1.0f, 0, 0.6f, 5}, kDraws), q, kDraws), 29.9);
}

TEST(SamplingTest, TopPReachedExactlyKeepsTheSmallerSet) {
  // Two equal tokens, top_p 0.5: the first (lower id) alone reaches 0.5, so only it is kept.
  HostTensor logits = Logits({3.0f, 3.0f});
  for (uint64_t step = 0; step < 100; ++step)
    EXPECT_EQ(Sample(logits, {1.0f, 0, 0.5f, 8}, step), 0);
}

TEST(SamplingTest, TopKOneAndTinyTopPAreGreedy) {
  for (uint64_t seed = 0; seed < 5; ++seed) {
    HostTensor logits = RandomTensor(DType::kF32, {500}, seed, -4.0f, 4.0f);
    const int32_t greedy = Sample(logits, {}, 0);
    for (uint64_t step = 0; step < 20; ++step) {
      EXPECT_EQ(Sample(logits, {1.5f, 1, 1.0f, seed}, step), greedy);
      EXPECT_EQ(Sample(logits, {1.5f, 0, 1e-6f, seed}, step), greedy);
    }
  }
}

TEST(SamplingTest, NeverSamplesOutsideTheKeptSet) {
  HostTensor logits = RandomTensor(DType::kF32, {300}, 9, -2.0f, 2.0f);
  const float* l = logits.data<float>();
  std::vector<int32_t> order(300);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return l[a] > l[b]; });
  const std::set<int32_t> top10(order.begin(), order.begin() + 10);
  // With temperature 0.5 the top 10 tokens carry most of the mass; top_p 0.5 lies inside them.
  std::vector<double> p = Softmax(std::vector<float>(l, l + 300), 0.5);
  double cumulative = 0;
  std::set<int32_t> nucleus;
  for (int32_t id : order) {
    if (cumulative >= 0.5) break;
    cumulative += p[id];
    nucleus.insert(id);
  }
  std::set<int32_t> seen_k, seen_p;
  for (uint64_t step = 0; step < 3000; ++step) {
    const int32_t k = Sample(logits, {0.5f, 10, 1.0f, 11}, step);
    const int32_t n = Sample(logits, {0.5f, 0, 0.5f, 11}, step);
    ASSERT_TRUE(top10.count(k)) << k;
    ASSERT_TRUE(nucleus.count(n)) << n;
    seen_k.insert(k);
    seen_p.insert(n);
  }
  EXPECT_EQ(seen_k, top10);  // and every kept token does get drawn
  EXPECT_EQ(seen_p, nucleus);
}

TEST(SamplingTest, MinPKeepsTokensAtLeastMinPTimesTheBest) {
  // Probabilities relative to the best (token 2): exp(-1) = 0.368, exp(-2) = 0.135, exp(-3),
  // exp(-0.5) = 0.607. min_p 0.3 keeps tokens 2, 4 and 0 (in draw order), min_p 0.5 keeps 2 and 4.
  HostTensor logits = Logits({1.0f, 0.0f, 2.0f, -1.0f, 1.5f});
  SamplingParams params{1.0f, 0, 1.0f, 6};
  params.min_p = 0.3f;
  StatusOr<std::vector<SampleCandidate>> kept = SampleCandidatesRef(CView(logits), params);
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  ASSERT_EQ(kept->size(), 3u);
  EXPECT_EQ((*kept)[0].id, 2);
  EXPECT_EQ((*kept)[1].id, 4);
  EXPECT_EQ((*kept)[2].id, 0);
  EXPECT_DOUBLE_EQ((*kept)[0].weight, 1.0);
  EXPECT_NEAR((*kept)[2].weight, std::exp(-1.0), 1e-12);
  params.min_p = 0.5f;
  EXPECT_EQ(SampleCandidatesRef(CView(logits), params)->size(), 2u);
  // min_p 1 keeps the best token alone (and its exact ties).
  params.min_p = 1.0f;
  for (uint64_t step = 0; step < 50; ++step) EXPECT_EQ(Sample(logits, params, step), 2);
  // Temperature applies first: at temperature 4 every ratio is above 0.3, so all five stay.
  params = {4.0f, 0, 1.0f, 6};
  params.min_p = 0.3f;
  EXPECT_EQ(SampleCandidatesRef(CView(logits), params)->size(), 5u);
  // After top-p: the shorter of the two prefixes wins.
  params = {1.0f, 0, 0.5f, 6};
  params.min_p = 0.01f;
  EXPECT_EQ(SampleCandidatesRef(CView(logits), params)->size(), 2u);
}

TEST(SamplingTest, MinPFrequenciesMatchTheRenormalisedKeptSet) {
  const std::vector<float> values = {1.0f, 0.5f, -0.3f, 2.0f, 0.0f, -1.5f, 1.2f, 0.7f};
  const std::vector<double> full = Softmax(values, 1.0);
  const double best = full[3];
  std::vector<double> p(values.size(), 0.0);
  double kept = 0;
  for (size_t i = 0; i < values.size(); ++i)
    if (full[i] >= 0.3 * best) kept += p[i] = full[i];
  for (double& x : p) x /= kept;
  SamplingParams params{1.0f, 0, 1.0f, 12};
  params.min_p = 0.3f;
  constexpr int kDraws = 30000;
  // Kept: 3, 6, 0 (token 7 has exp(-1.3) = 0.27 of the best): 2 degrees of freedom, 99.99th
  // percentile of chi-square(2) ~ 18.4.
  EXPECT_LT(ChiSquare(Histogram(Logits(values), params, kDraws), p, kDraws), 18.4);
}

TEST(SamplingTest, MinusInfinityLogitsAreNeverSampled) {
  HostTensor logits = Logits({-kInf, 0.0f, -kInf, 0.0f, -kInf});
  for (uint64_t step = 0; step < 200; ++step) {
    const int32_t id = Sample(logits, {1.0f, 0, 1.0f, 5}, step);
    EXPECT_TRUE(id == 1 || id == 3) << id;
  }
}

TEST(SamplingTest, RejectsBadParametersAndLogits) {
  HostTensor logits = Logits({0.0f, 1.0f});
  for (const SamplingParams& bad :
       {SamplingParams{-1.0f}, SamplingParams{kNaN}, SamplingParams{kInf}, SamplingParams{1.0f, -1},
        SamplingParams{1.0f, 0, 0.0f}, SamplingParams{1.0f, 0, 1.5f},
        SamplingParams{1.0f, 0, kNaN}, SamplingParams{.temperature = 1.0f, .min_p = -0.1f},
        SamplingParams{.temperature = 1.0f, .min_p = 1.5f}}) {
    EXPECT_EQ(CheckSamplingParams(bad).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(SampleRef(CView(logits), bad, 0).status().code(), StatusCode::kInvalidArgument);
  }
  // A logit bias id is checked against the vocabulary of the logits.
  const SamplingParams biased{.temperature = 1.0f, .logit_bias = {{2, 1.0f}}};
  EXPECT_TRUE(CheckSamplingParams(biased).ok());
  EXPECT_EQ(SampleRef(CView(logits), biased, 0).status().code(), StatusCode::kInvalidArgument);
  StatusOr<int32_t> nan = SampleRef(CView(Logits({0.0f, kNaN})), {}, 0);
  EXPECT_EQ(nan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(nan.status().message().find("logit 1"), std::string::npos) << nan.status().ToString();
  EXPECT_FALSE(SampleRef(CView(Logits({kInf, 0.0f})), {1.0f}, 0).ok());
  EXPECT_FALSE(SampleRef(CView(Logits({-kInf, -kInf})), {1.0f}, 0).ok());
  EXPECT_FALSE(SampleRef(CView(Logits({})), {}, 0).ok());
  HostTensor wrong(DType::kBF16, {4});
  EXPECT_FALSE(SampleRef(CView(wrong), {}, 0).ok());
}

}  // namespace
}  // namespace millipede
