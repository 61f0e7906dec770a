#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels/sampling/sampling_logprobs.h"

namespace millipede {

Status SamplingLogprobsCheckArgs(const SamplingLogprobsArgs& args) {
  MP_REQUIRE(args.logits.rank() == 1, "sampling logprobs: logits rank ", args.logits.rank(),
             ", expected 1");
  const int64_t vocab = args.logits.dim(0);
  MP_REQUIRE(vocab > 0 && vocab <= std::numeric_limits<int32_t>::max(),
             "sampling logprobs: vocab size ", vocab, " must lie in [1, 2^31)");
  MP_REQUIRE(args.token >= 0 && args.token < vocab, "sampling logprobs: token ", args.token,
             " is outside the vocabulary [0, ", vocab, ")");
  MP_RETURN_IF_ERROR(
      CheckTensor(args.logits, "sampling logprobs logits", DType::kF32, Shape{vocab}));
  MP_RETURN_IF_ERROR(
      CheckTensor(args.token_logprob, "sampling logprobs token_logprob", DType::kF32, Shape{1}));
  MP_REQUIRE(args.top_ids.rank() == 1, "sampling logprobs: top_ids rank ", args.top_ids.rank(),
             ", expected 1");
  const int64_t k = args.top_ids.dim(0);
  MP_RETURN_IF_ERROR(CheckTensor(args.top_ids, "sampling logprobs top_ids", DType::kI32, Shape{k}));
  return CheckTensor(args.top_logprobs, "sampling logprobs top_logprobs", DType::kF32, Shape{k});
}

Status SamplingLogprobsRef(const SamplingLogprobsArgs& args) {
  MP_RETURN_IF_ERROR(SamplingLogprobsCheckArgs(args));
  const int64_t vocab = args.logits.dim(0), k = args.top_ids.dim(0);
  const float* logits = args.logits.as<const float>();
  double max = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < vocab; ++i) {
    MP_REQUIRE(!std::isnan(logits[i]) && logits[i] != INFINITY, "sampling logprobs: logit ", i,
               " is ", logits[i]);
    max = std::max(max, static_cast<double>(logits[i]));
  }
  MP_REQUIRE(std::isfinite(max), "sampling logprobs: every logit is -inf");
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - max);
  const double lse = max + std::log(sum);
  auto logprob = [&](int64_t i) { return static_cast<float>(logits[i] - lse); };
  args.token_logprob.as<float>()[0] = logprob(args.token);

  std::vector<int32_t> ids(vocab);
  std::iota(ids.begin(), ids.end(), 0);
  const int64_t n = std::min(k, vocab);
  std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), [logits](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  });
  for (int64_t i = 0; i < k; ++i) {
    args.top_ids.as<int32_t>()[i] = i < n ? ids[i] : -1;
    args.top_logprobs.as<float>()[i] =
        i < n ? logprob(ids[i]) : -std::numeric_limits<float>::infinity();
  }
  return OkStatus();
}

}  // namespace millipede
