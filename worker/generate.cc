#include "worker/generate.h"

#include <algorithm>
#include <chrono>

namespace millipede {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

bool Contains(const std::vector<int32_t>& v, int32_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// Frees the engine's sequence on every exit path.
struct SequenceGuard {
  Engine& engine;
  ~SequenceGuard() { engine.EndSequence(); }
};

}  // namespace

const char* FinishReasonName(FinishReason reason) {
  return reason == FinishReason::kStop ? "stop" : "length";
}

Status ValidateGenerationRequest(const Engine& engine, const GenerationRequest& request) {
  const ModelConfig& c = engine.config();
  const int64_t prompt = static_cast<int64_t>(request.prompt_ids.size());
  MP_REQUIRE(prompt > 0, "the prompt is empty");
  for (size_t i = 0; i < request.prompt_ids.size(); ++i) {
    const int32_t id = request.prompt_ids[i];
    MP_REQUIRE(id >= 0 && id < c.vocab_size, "prompt token ", i, " has id ", id,
               ", outside the vocabulary [0, ", c.vocab_size, ")");
  }
  for (int32_t id : request.stop_ids)
    MP_REQUIRE(id >= 0 && id < c.vocab_size, "stop id ", id, " is outside the vocabulary [0, ",
               c.vocab_size, ")");
  MP_REQUIRE(request.max_new_tokens >= 1, "max_new_tokens must be at least 1, got ",
             request.max_new_tokens);
  const int64_t limit = engine.max_context();
  MP_REQUIRE(prompt < limit, "the prompt has ", prompt, " tokens; the context limit is ", limit,
             " and at least one generated token must fit");
  MP_REQUIRE(request.max_new_tokens <= limit - prompt, "prompt (", prompt,
             " tokens) + max_new_tokens (", request.max_new_tokens,
             ") exceeds the context limit of ", limit, " tokens");
  return CheckSamplingParams(request.sampling);
}

StatusOr<GenerationResult> Generate(Engine& engine, const GenerationRequest& request,
                                    const TokenCallback& on_token) {
  MP_RETURN_IF_ERROR(ValidateGenerationRequest(engine, request));
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t prompt = static_cast<int64_t>(request.prompt_ids.size());
  // The last generated token never needs its K/V, so the cache holds one position less.
  MP_RETURN_IF_ERROR(engine.StartSequence(prompt + request.max_new_tokens - 1));
  SequenceGuard guard{engine};
  const std::vector<int32_t>& eos = engine.config().eos_token_ids;

  GenerationResult result;
  result.prompt_tokens = prompt;
  std::chrono::steady_clock::time_point first_token;
  MP_ASSIGN_OR_RETURN(ConstTensorView logits, engine.Forward(request.prompt_ids));
  for (int64_t step = 0;; ++step) {
    MP_ASSIGN_OR_RETURN(int32_t id, engine.backend().Sample(logits, request.sampling,
                                                            static_cast<uint64_t>(step)));
    result.ids.push_back(id);
    if (step == 0) {
      first_token = std::chrono::steady_clock::now();
      result.ttft_s = SecondsSince(t0);
    } else {
      result.decode_s = SecondsSince(first_token);
    }
    if (on_token && !on_token(id)) return CancelledError("generation cancelled by the caller");
    if (Contains(request.stop_ids, id) || (!request.ignore_eos && Contains(eos, id))) {
      result.finish_reason = FinishReason::kStop;
      break;
    }
    if (static_cast<int64_t>(result.ids.size()) >= request.max_new_tokens) {
      result.finish_reason = FinishReason::kLength;
      break;
    }
    const int32_t next[1] = {id};
    MP_ASSIGN_OR_RETURN(logits, engine.Forward(next));
  }
  return result;
}

}  // namespace millipede
