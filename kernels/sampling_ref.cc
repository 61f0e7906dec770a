#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/random.h"
#include "kernels/sampling.h"

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
  MP_RETURN_IF_ERROR(CheckSamplingParams(params));
  MP_REQUIRE(logits.rank() == 1, "sampling logits: rank ", logits.rank(), ", expected 1");
  const int64_t vocab = logits.dim(0);
  MP_REQUIRE(vocab > 0 && vocab <= std::numeric_limits<int32_t>::max(), "sampling: vocab size ",
             vocab, " must lie in [1, 2^31)");
  return CheckTensor(logits, "sampling logits", DType::kF32, Shape{vocab});
}

StatusOr<int32_t> SampleRef(ConstTensorView logits_view, const SamplingParams& params,
                            uint64_t step) {
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

  if (params.temperature == 0.0f) return Argmax(logits, vocab);

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
  if (params.top_p < 1.0f) {
    const double target = static_cast<double>(params.top_p) * total;
    double cumulative = 0.0;
    size_t count = 0;
    while (count < kept.size() && (count == 0 || cumulative < target))
      cumulative += weight[count++];
    kept.resize(count);
    weight.resize(count);
    total = cumulative;
  }

  const double target = RandomUniform(params.seed, step) * total;
  double cumulative = 0.0;
  for (size_t i = 0; i < kept.size(); ++i) {
    cumulative += weight[i];
    if (cumulative > target) return kept[i].id;
  }
  // u * total rounded up to total: take the least likely kept token that has any weight.
  size_t last = kept.size() - 1;
  while (last > 0 && weight[last] == 0.0) --last;
  return kept[last].id;
}

}  // namespace millipede
