// The sampling ops added for the OpenAI parameters, CUDA against the CPU references on the op
// harness: SamplingPenaltiesCuda (bit for bit, out of place and in place, every table present or
// absent), SamplingLogprobsCuda (ids exact, log-probabilities within a last-bit difference,
// vocabularies from 1 to 128256, k from 0 to 20 and beyond the vocabulary), and SampleCuda with
// min-p against SampleRef (the same token unless the draw, top-p or min-p lies within 1e-6 of a
// boundary of the reference's own distribution). Skips without a GPU.
#include "kernels/sampling/sampling_penalties_cuda.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/random.h"
#include "kernels/sampling/sampling.h"
#include "kernels/sampling/sampling_cuda.h"
#include "kernels/sampling/sampling_logprobs_cuda.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/op_harness.h"

namespace millipede {
namespace {

using testing::CView;
using testing::DeviceTensor;
using testing::HaveGpu;
using testing::kInf;
using testing::OpCheck;
using testing::Poisoned;
using testing::PoisonedF32;
using testing::Tolerance;

// [vocab] logits U(-8, 8) with every 13th (from id 3) at -inf.
HostTensor MakeLogits(int64_t vocab, uint64_t seed) {
  HostTensor t(DType::kF32, {vocab});
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-8.0f, 8.0f);
  for (int64_t i = 0; i < vocab; ++i) t.data<float>()[i] = i % 13 == 3 ? -kInf : dist(rng);
  if (vocab == 1) t.data<float>()[0] = 0.5f;
  return t;
}

struct Tables {
  HostTensor bias, prompt, counts;
};

// Random tables: a bias on every 7th id, a third of the ids in the prompt, counts 0..3.
Tables MakeTables(int64_t vocab, uint64_t seed) {
  Tables t{HostTensor(DType::kF32, {vocab}), HostTensor(DType::kU8, {vocab}),
           HostTensor(DType::kI32, {vocab})};
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> bias(-100.0f, 100.0f);
  for (int64_t i = 0; i < vocab; ++i) {
    t.bias.data<float>()[i] = i % 7 == 0 ? bias(rng) : 0.0f;
    t.prompt.data<uint8_t>()[i] = rng() % 3 == 0;
    t.counts.data<int32_t>()[i] = rng() % 5 == 0 ? static_cast<int32_t>(1 + rng() % 3) : 0;
  }
  return t;
}

struct PenaltyCase {
  int64_t vocab;
  bool bias, prompt, counts, in_place;
};

std::string PenaltyName(const ::testing::TestParamInfo<PenaltyCase>& info) {
  const PenaltyCase& c = info.param;
  return detail::StrCat("v", c.vocab, c.bias ? "_bias" : "", c.prompt ? "_prompt" : "",
                        c.counts ? "_counts" : "", c.in_place ? "_inplace" : "");
}

class SamplingPenaltiesCudaTest : public testing::GpuOpTest<PenaltyCase> {};

TEST_P(SamplingPenaltiesCudaTest, MatchesTheReferenceBitForBit) {
  const PenaltyCase c = GetParam();
  const HostTensor logits = MakeLogits(c.vocab, 91 + c.vocab);
  const Tables tables = MakeTables(c.vocab, 92 + c.vocab);
  for (const auto& [repetition, presence, frequency] :
       {std::tuple{1.3f, 0.5f, -0.7f}, std::tuple{0.6f, -2.0f, 2.0f},
        std::tuple{1.0f, 0.0f, 0.0f}}) {
    OpCheck check("sampling_penalties");
    const int out = c.in_place
                        ? check.Output("logits", logits, Tolerance::Bitwise())
                        : check.Output("out", PoisonedF32({c.vocab}), Tolerance::Bitwise(), 4);
    const int in = c.in_place ? out : check.Input(logits);
    const int bias = check.Input(tables.bias);
    const int prompt = check.Input(tables.prompt, 1);
    const int counts = check.Input(tables.counts);
    check.Run(
        [&](const OpCheck::Tensors& t) {
          return SamplingPenaltiesArgs{
              .logits = t.cview(in),
              .bias = c.bias ? t.cview(bias) : ConstTensorView{},
              .prompt_mask = c.prompt ? t.cview(prompt) : ConstTensorView{},
              .output_counts = c.counts ? t.cview(counts) : ConstTensorView{},
              .repetition_penalty = repetition,
              .presence_penalty = presence,
              .frequency_penalty = frequency,
              .out = t.view(out)};
        },
        SamplingPenaltiesRef, SamplingPenaltiesCuda);
  }
}

INSTANTIATE_TEST_SUITE_P(Tables, SamplingPenaltiesCudaTest,
                         ::testing::Values(PenaltyCase{1, true, true, true, false},
                                           PenaltyCase{1000, true, true, true, false},
                                           PenaltyCase{1000, false, true, false, false},
                                           PenaltyCase{1000, false, false, true, true},
                                           PenaltyCase{32001, true, false, false, false},
                                           PenaltyCase{128256, true, true, true, true},
                                           PenaltyCase{128256, false, false, false, false}),
                         PenaltyName);

struct LogprobsCase {
  int64_t vocab, k;
};

class SamplingLogprobsCudaTest : public testing::GpuOpTest<LogprobsCase> {};

TEST_P(SamplingLogprobsCudaTest, MatchesTheReference) {
  const LogprobsCase c = GetParam();
  std::unique_ptr<TopKCudaWorkspace> top_k = std::move(TopKCudaWorkspace::Create()).value();
  const HostTensor logits = MakeLogits(c.vocab, 93 + c.vocab);
  for (int32_t token : {0, static_cast<int32_t>(c.vocab / 2), static_cast<int32_t>(c.vocab - 1)}) {
    if (c.vocab > 3 && token % 13 == 3) ++token;  // a finite logit, not an -inf one
    OpCheck check("sampling_logprobs");
    const int in = check.Input(logits);
    // Log-probabilities differ from the reference's by at most their last bit (the double sum's
    // order).
    const Tolerance close = Tolerance::Elementwise(1e-6, 1e-6);
    const int token_logprob = check.Output("token_logprob", PoisonedF32({1}), close);
    const int ids = check.Output("top_ids", Poisoned(DType::kI32, {c.k}), Tolerance::Bitwise());
    const int values = check.Output("top_logprobs", PoisonedF32({c.k}), close);
    check.Run(
        [&](const OpCheck::Tensors& t) {
          return SamplingLogprobsArgs{.logits = t.cview(in),
                                      .token = token,
                                      .token_logprob = t.view(token_logprob),
                                      .top_ids = t.view(ids),
                                      .top_logprobs = t.view(values)};
        },
        SamplingLogprobsRef,
        [&](const SamplingLogprobsArgs& a, cudaStream_t s) {
          return SamplingLogprobsCuda(a, *top_k, s);
        });
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, SamplingLogprobsCudaTest,
                         ::testing::Values(LogprobsCase{1, 0}, LogprobsCase{1, 5},
                                           LogprobsCase{7, 20}, LogprobsCase{1000, 0},
                                           LogprobsCase{1000, 1}, LogprobsCase{32000, 20},
                                           LogprobsCase{128256, 5}, LogprobsCase{128256, 20}));

// True when the reference's distribution puts u, top_p or min_p within 1e-6 of a boundary: a
// cumulative weight (relative to the kept total) or a weight (relative to the best).
bool NearBoundary(const HostTensor& logits, const SamplingParams& params, uint64_t step) {
  constexpr double kTolerance = 1e-6;
  SamplingParams all = params;
  all.top_p = 1.0f;
  all.min_p = 0.0f;
  const std::vector<SampleCandidate> every = *SampleCandidatesRef(CView(logits), all);
  double total = 0;
  for (const SampleCandidate& c : every) {
    total += c.weight;
    if (std::abs(c.weight - params.min_p) < kTolerance) return true;
  }
  double cumulative = 0;
  for (const SampleCandidate& c : every) {
    cumulative += c.weight;
    if (std::abs(cumulative / total - params.top_p) < kTolerance) return true;
  }
  const std::vector<SampleCandidate> kept = *SampleCandidatesRef(CView(logits), params);
  double kept_total = 0;
  for (const SampleCandidate& c : kept) kept_total += c.weight;
  const double u = RandomUniform(params.seed, step);
  cumulative = 0;
  for (const SampleCandidate& c : kept)
    if (std::abs((cumulative += c.weight) / kept_total - u) < kTolerance) return true;
  return false;
}

class SampleMinPCudaTest : public testing::GpuOpTest<int64_t> {};

TEST_P(SampleMinPCudaTest, SameTokensAsReference) {
  const int64_t vocab = GetParam();
  std::unique_ptr<SampleCudaWorkspace> workspace = std::move(SampleCudaWorkspace::Create()).value();
  const HostTensor logits = MakeLogits(vocab, 94 + vocab);
  DeviceTensor d_logits(logits);
  int compared = 0, boundary_cases = 0;
  for (const float min_p : {0.001f, 0.05f, 0.3f, 0.9f, 1.0f}) {
    for (const float top_p : {1.0f, 0.8f}) {
      for (const int32_t top_k : {0, 40}) {
        SamplingParams params{1.0f, top_k, top_p, 17};
        params.min_p = min_p;
        for (uint64_t step = 0; step < 8; ++step) {
          SCOPED_TRACE(
              detail::StrCat("min_p ", min_p, " top_p ", top_p, " top_k ", top_k, " step ", step));
          const StatusOr<int32_t> expected = SampleRef(CView(logits), params, step);
          ASSERT_TRUE(expected.ok()) << expected.status().ToString();
          const StatusOr<int32_t> actual =
              SampleCuda(d_logits.cview(), params, step, *workspace, nullptr);
          ASSERT_TRUE(actual.ok()) << actual.status().ToString();
          ++compared;
          if (*actual == *expected) continue;
          ASSERT_TRUE(NearBoundary(logits, params, step))
              << "token " << *actual << ", expected " << *expected << " away from any boundary";
          ++boundary_cases;
        }
      }
    }
  }
  EXPECT_LE(boundary_cases, compared / 100 + 1);
  EXPECT_TRUE(d_logits.Unchanged(logits));
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, SampleMinPCudaTest,
                         ::testing::Values(1, 7, 1000, 32000, 128256));

}  // namespace
}  // namespace millipede
