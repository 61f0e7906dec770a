#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/random.h"
#include "kernels/sampling/sampling.h"

namespace millipede {
namespace {

struct Candidate {
  double score;  // logit / temperature
  int32_t id;
};

// Descending score; ties go to the lower id so the order (and hence top-k, top-p and the inverse
// CDF walk) is fully determined.
bool MoreLikely(const Candidate& a, const Candidate& b) {
  return a.score != b.score ? a.score > b.score : a.id < b.id;
}

int32_t Argmax(const float* logits, int64_t vocab) {
  int64_t best = 0;
  for (int64_t i = 1; i < vocab; ++i)
    if (logits[i] > logits[best]) best = i;
  return static_cast<int32_t>(best);
}

}  // namespace

Status SampleCheckArgs(ConstTensorView logits, const SamplingParams& params) {
  MP_REQUIRE(logits.rank() == 1, "sampling logits: rank ", logits.rank(), ", expected 1");
  const int64_t vocab = logits.dim(0);
  MP_REQUIRE(vocab > 0 && vocab <= std::numeric_limits<int32_t>::max(), "sampling: vocab size ",
             vocab, " must lie in [1, 2^31)");
  MP_RETURN_IF_ERROR(CheckSamplingParams(params, vocab));
  return CheckTensor(logits, "sampling logits", DType::kF32, Shape{vocab});
}

StatusOr<std::vector<SampleCandidate>> SampleCandidatesRef(ConstTensorView logits_view,
                                                           const SamplingParams& params) {
  MP_RETURN_IF_ERROR(SampleCheckArgs(logits_view, params));
  const int64_t vocab = logits_view.dim(0);
  const float* logits = logits_view.as<const float>();
  bool any_finite = false;
  for (int64_t i = 0; i < vocab; ++i) {
    MP_REQUIRE(!std::isnan(logits[i]) && logits[i] != INFINITY, "sampling: logit ", i, " is ",
               logits[i]);
    any_finite = any_finite || std::isfinite(logits[i]);
  }
  MP_REQUIRE(any_finite, "sampling: every logit is -inf; no token can be chosen");

  if (params.temperature == 0.0f) return std::vector<SampleCandidate>{{Argmax(logits, vocab), 1.0}};

  // Tokens at -inf have probability 0 and are never candidates.
  std::vector<Candidate> kept;
  kept.reserve(vocab);
  for (int64_t i = 0; i < vocab; ++i)
    if (std::isfinite(logits[i]))
      kept.push_back(
          {static_cast<double>(logits[i]) / params.temperature, static_cast<int32_t>(i)});
  if (params.top_k > 0 && static_cast<size_t>(params.top_k) < kept.size()) {
    std::partial_sort(kept.begin(), kept.begin() + params.top_k, kept.end(), MoreLikely);
    kept.resize(params.top_k);
  } else {
    std::sort(kept.begin(), kept.end(), MoreLikely);
  }

  // Unnormalised probabilities relative to the best token (weight 1), summed in double.
  std::vector<double> weight(kept.size());
  double total = 0.0;
  for (size_t i = 0; i < kept.size(); ++i) {
    weight[i] = std::exp(kept[i].score - kept[0].score);
    total += weight[i];
  }
  size_t count = kept.size();
  if (params.top_p < 1.0f) {
    const double target = static_cast<double>(params.top_p) * total;
    double cumulative = 0.0;
    count = 0;
    while (count < kept.size() && (count == 0 || cumulative < target))
      cumulative += weight[count++];
  }
  if (params.min_p > 0.0f) {
    // weight_i / weight_0 is p_i / p_max whatever the normalisation, so min-p keeps the prefix of
    // tokens with weight >= min_p (the best token, weight 1, always stays). Both cuts keep a
    // prefix: the shorter one wins.
    size_t min_p_count = 1;
    while (min_p_count < count && weight[min_p_count] >= params.min_p) ++min_p_count;
    count = min_p_count;
  }
  std::vector<SampleCandidate> candidates(count);
  for (size_t i = 0; i < count; ++i) candidates[i] = {kept[i].id, weight[i]};
  return candidates;
}

StatusOr<int32_t> SampleRef(ConstTensorView logits, const SamplingParams& params, uint64_t step) {
  MP_ASSIGN_OR_RETURN(std::vector<SampleCandidate> kept, SampleCandidatesRef(logits, params));
  if (params.temperature == 0.0f) return kept[0].id;
  double total = 0.0;
  for (const SampleCandidate& c : kept) total += c.weight;
  const double target = RandomUniform(params.seed, step) * total;
  double cumulative = 0.0;
  for (const SampleCandidate& c : kept) {
    cumulative += c.weight;
    if (cumulative > target) return c.id;
  }
  // u * total rounded up to total: take the least likely kept token that has any weight.
  size_t last = kept.size() - 1;
  while (last > 0 && kept[last].weight == 0.0) --last;
  return kept[last].id;
}

}  // namespace millipede
