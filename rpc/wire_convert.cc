#include "rpc/wire_convert.h"

namespace millipede::rpc {
namespace {

::millipede::rpc::JobState ToWire(::millipede::JobState s) {
  using W = ::millipede::rpc::JobState;
  switch (s) {
    case ::millipede::JobState::kQueued:
      return W::QUEUED;
    case ::millipede::JobState::kPrefill:
      return W::PREFILL;
    case ::millipede::JobState::kDecode:
      return W::DECODE;
    case ::millipede::JobState::kFinished:
      return W::FINISHED;
    case ::millipede::JobState::kCancelled:
      return W::CANCELLED;
    case ::millipede::JobState::kFailed:
      return W::FAILED;
  }
  return W::FAILED;
}

}  // namespace

void FillStatus(const JobStatusInfo& info, ::millipede::rpc::JobStatus::Builder b) {
  b.setId(info.id);
  b.setState(ToWire(info.state));
  b.setQueuePosition(info.queue_position);
  b.setPromptTokens(info.prompt_tokens);
  b.setPrefillDone(info.prefill_done);
  b.setGeneratedTokens(info.generated_tokens);
  b.setError(info.error);
}

SamplingParams SamplingFromWire(::millipede::rpc::Sampling::Reader s) {
  SamplingParams p;
  p.temperature = s.getTemperature();
  p.top_k = s.getTopK();
  p.top_p = s.getTopP();
  p.seed = s.getSeed();
  p.repetition_penalty = s.getRepetitionPenalty();
  p.presence_penalty = s.getPresencePenalty();
  p.frequency_penalty = s.getFrequencyPenalty();
  p.min_p = s.getMinP();
  // More entries than the service accepts are refused there; copying them first is bounded by
  // the message size.
  for (auto e : s.getLogitBias()) p.logit_bias.push_back({e.getId(), e.getBias()});
  p.logprobs = s.getLogprobs();
  return p;
}

JobRequest JobRequestFromWire(::millipede::rpc::JobSpec::Reader spec) {
  JobRequest request;
  auto prompt = spec.getPrompt();
  if (prompt.isText()) {
    auto text = prompt.getText();
    request.prompt_text.assign(text.begin(), text.size());
  } else {
    for (int32_t id : prompt.getIds()) request.prompt_ids.push_back(id);
  }
  request.max_new_tokens = spec.getMaxNewTokens();
  request.sampling = SamplingFromWire(spec.getSampling());
  for (int32_t id : spec.getStopIds()) request.stop_ids.push_back(id);
  for (auto text : spec.getStopStrings())
    request.stop_strings.emplace_back(text.begin(), text.size());
  request.ignore_eos = spec.getIgnoreEos();
  request.cache = spec.getCache();
  request.pin = spec.getPin();
  auto policy = spec.getPolicyJson();
  request.policy_json.assign(policy.begin(), policy.size());
  return request;
}

}  // namespace millipede::rpc
