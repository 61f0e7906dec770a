#include <cmath>
#include <limits>

#include "kernels/sampling/sampling_penalties.h"

namespace millipede {

Status SamplingPenaltiesCheckArgs(const SamplingPenaltiesArgs& args) {
  MP_REQUIRE(args.logits.rank() == 1, "sampling penalties: logits rank ", args.logits.rank(),
             ", expected 1");
  const int64_t vocab = args.logits.dim(0);
  MP_REQUIRE(vocab > 0 && vocab <= std::numeric_limits<int32_t>::max(),
             "sampling penalties: vocab size ", vocab, " must lie in [1, 2^31)");
  const Shape shape{vocab};
  MP_RETURN_IF_ERROR(CheckTensor(args.logits, "sampling penalties logits", DType::kF32, shape));
  MP_RETURN_IF_ERROR(CheckTensor(args.out, "sampling penalties out", DType::kF32, shape));
  if (args.bias.data != nullptr)
    MP_RETURN_IF_ERROR(CheckTensor(args.bias, "sampling penalties bias", DType::kF32, shape));
  if (args.prompt_mask.data != nullptr)
    MP_RETURN_IF_ERROR(
        CheckTensor(args.prompt_mask, "sampling penalties prompt_mask", DType::kU8, shape));
  if (args.output_counts.data != nullptr)
    MP_RETURN_IF_ERROR(
        CheckTensor(args.output_counts, "sampling penalties output_counts", DType::kI32, shape));
  SamplingParams params;
  params.repetition_penalty = args.repetition_penalty;
  params.presence_penalty = args.presence_penalty;
  params.frequency_penalty = args.frequency_penalty;
  return CheckSamplingParams(params);
}

Status SamplingPenaltiesRef(const SamplingPenaltiesArgs& args) {
  MP_RETURN_IF_ERROR(SamplingPenaltiesCheckArgs(args));
  const int64_t vocab = args.logits.dim(0);
  const float* logits = args.logits.as<const float>();
  const float* bias = args.bias.data != nullptr ? args.bias.as<const float>() : nullptr;
  const uint8_t* prompt =
      args.prompt_mask.data != nullptr ? args.prompt_mask.as<const uint8_t>() : nullptr;
  const int32_t* counts =
      args.output_counts.data != nullptr ? args.output_counts.as<const int32_t>() : nullptr;
  float* out = args.out.as<float>();
  for (int64_t i = 0; i < vocab; ++i) {
    const int32_t count = counts != nullptr ? counts[i] : 0;
    MP_REQUIRE(count >= 0, "sampling penalties: output count of token ", i, " is ", count);
    double x = static_cast<double>(logits[i]) + (bias != nullptr ? bias[i] : 0.0);
    if ((prompt != nullptr && prompt[i] != 0) || count > 0)
      x = x > 0 ? x / args.repetition_penalty : x * args.repetition_penalty;
    x -= static_cast<double>(args.frequency_penalty) * count +
         (count > 0 ? static_cast<double>(args.presence_penalty) : 0.0);
    out[i] = static_cast<float>(x);
  }
  return OkStatus();
}

StatusOr<SamplingPenaltiesTables> SamplingPenaltiesTables::Build(
    int64_t vocab_size, const std::vector<LogitBias>& logit_bias,
    std::span<const int32_t> prompt_ids, std::span<const int32_t> output_ids) {
  MP_REQUIRE(vocab_size > 0 && vocab_size <= std::numeric_limits<int32_t>::max(),
             "sampling penalties: vocab size ", vocab_size, " must lie in [1, 2^31)");
  SamplingPenaltiesTables t;
  t.bias.assign(vocab_size, 0.0f);
  t.prompt_mask.assign(vocab_size, 0);
  t.output_counts.assign(vocab_size, 0);
  for (const LogitBias& e : logit_bias) {
    MP_REQUIRE(e.id >= 0 && e.id < vocab_size, "sampling penalties: logit_bias id ", e.id,
               " is outside the vocabulary [0, ", vocab_size, ")");
    t.bias[e.id] += e.bias;
  }
  for (int32_t id : prompt_ids) {
    MP_REQUIRE(id >= 0 && id < vocab_size, "sampling penalties: prompt id ", id,
               " is outside the vocabulary [0, ", vocab_size, ")");
    t.prompt_mask[id] = 1;
  }
  for (int32_t id : output_ids) {
    MP_REQUIRE(id >= 0 && id < vocab_size, "sampling penalties: generated id ", id,
               " is outside the vocabulary [0, ", vocab_size, ")");
    ++t.output_counts[id];
  }
  return t;
}

}  // namespace millipede
