#include "worker/token_sampler.h"

#include <utility>

#include "kernels/sampling/sampling_penalties.h"

namespace millipede {
namespace {

template <typename T>
ConstTensorView HostRow(const std::vector<T>& values, DType dtype) {
  return {values.data(), dtype, Shape{static_cast<int64_t>(values.size())}};
}

StatusOr<BackendTensor> Upload(Backend& backend, ConstTensorView host) {
  MP_ASSIGN_OR_RETURN(BackendTensor t, backend.Allocate(host.dtype, host.shape));
  MP_RETURN_IF_ERROR(backend.CopyFromHost(host, t.view()));
  return t;
}

}  // namespace

StatusOr<std::unique_ptr<TokenSampler>> TokenSampler::Create(Backend& backend,
                                                             const SamplingParams& params,
                                                             int64_t vocab_size,
                                                             std::span<const int32_t> prompt_ids) {
  MP_RETURN_IF_ERROR(CheckSamplingParams(params, vocab_size));
  auto sampler = std::unique_ptr<TokenSampler>(new TokenSampler(backend, params, vocab_size));
  TokenSampler& s = *sampler;
  if (params.ProcessesLogits()) {
    // The prompt only matters to the repetition penalty: a long prompt is not scanned otherwise.
    const bool repetition = params.repetition_penalty != 1.0f;
    MP_ASSIGN_OR_RETURN(
        SamplingPenaltiesTables tables,
        SamplingPenaltiesTables::Build(vocab_size, params.logit_bias,
                                       repetition ? prompt_ids : std::span<const int32_t>{}, {}));
    if (!params.logit_bias.empty()) {
      MP_ASSIGN_OR_RETURN(s.bias_, Upload(backend, HostRow(tables.bias, DType::kF32)));
    }
    if (repetition) {
      MP_ASSIGN_OR_RETURN(s.prompt_mask_, Upload(backend, HostRow(tables.prompt_mask, DType::kU8)));
    }
    MP_ASSIGN_OR_RETURN(s.output_counts_,
                        Upload(backend, HostRow(tables.output_counts, DType::kI32)));
    s.host_counts_ = std::move(tables.output_counts);
    MP_ASSIGN_OR_RETURN(s.processed_, backend.Allocate(DType::kF32, Shape{vocab_size}));
  }
  if (params.logprobs >= 0) {
    MP_ASSIGN_OR_RETURN(s.token_logprob_, backend.Allocate(DType::kF32, Shape{1}));
    MP_ASSIGN_OR_RETURN(s.top_ids_, backend.Allocate(DType::kI32, Shape{params.logprobs}));
    MP_ASSIGN_OR_RETURN(s.top_logprobs_, backend.Allocate(DType::kF32, Shape{params.logprobs}));
  }
  return sampler;
}

StatusOr<SampledToken> TokenSampler::Sample(ConstTensorView logits, uint64_t step) {
  ConstTensorView scores = logits;
  if (params_.ProcessesLogits()) {
    MP_RETURN_IF_ERROR(backend_.SamplingPenalties({.logits = logits,
                                                   .bias = bias_.cview(),
                                                   .prompt_mask = prompt_mask_.cview(),
                                                   .output_counts = output_counts_.cview(),
                                                   .repetition_penalty = params_.repetition_penalty,
                                                   .presence_penalty = params_.presence_penalty,
                                                   .frequency_penalty = params_.frequency_penalty,
                                                   .out = processed_.view()}));
    scores = processed_.cview();
  }
  SampledToken token;
  MP_ASSIGN_OR_RETURN(token.id, backend_.Sample(scores, params_, step));
  if (params_.logprobs < 0) return token;
  MP_RETURN_IF_ERROR(backend_.SamplingLogprobs({.logits = logits,
                                                .token = token.id,
                                                .token_logprob = token_logprob_.view(),
                                                .top_ids = top_ids_.view(),
                                                .top_logprobs = top_logprobs_.view()}));
  const int64_t k = params_.logprobs;
  std::vector<int32_t> ids(k);
  std::vector<float> values(k);
  MP_RETURN_IF_ERROR(backend_.CopyToHost(token_logprob_.cview(),
                                         TensorView{&token.logprob, DType::kF32, Shape{1}}));
  if (k > 0) {
    MP_RETURN_IF_ERROR(
        backend_.CopyToHost(top_ids_.cview(), TensorView{ids.data(), DType::kI32, Shape{k}}));
    MP_RETURN_IF_ERROR(backend_.CopyToHost(top_logprobs_.cview(),
                                           TensorView{values.data(), DType::kF32, Shape{k}}));
  }
  for (int64_t i = 0; i < k; ++i)
    if (ids[i] >= 0) token.top.push_back({ids[i], values[i]});
  return token;
}

Status TokenSampler::Accept(int32_t token) {
  MP_REQUIRE(token >= 0 && token < vocab_, "sampler: token ", token,
             " is outside the vocabulary [0, ", vocab_, ")");
  if (!params_.ProcessesLogits()) return OkStatus();
  ++host_counts_[token];
  MP_ASSIGN_OR_RETURN(TensorView count, SubView(output_counts_.view(), token, Shape{1}));
  return backend_.CopyFromHost(ConstTensorView{&host_counts_[token], DType::kI32, Shape{1}}, count);
}

}  // namespace millipede
