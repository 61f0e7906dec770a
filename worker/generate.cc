#include "worker/generate.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "common/shard_plan.h"
#include "worker/token_message.h"
#include "worker/token_sampler.h"

namespace millipede {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

bool Contains(const std::vector<int32_t>& v, int32_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// Frees the engine's sequence (and with it the request's policy) on every exit path.
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
  MP_RETURN_IF_ERROR(CheckSamplingParams(request.sampling, c.vocab_size));
  if (request.policy) MP_RETURN_IF_ERROR(engine.CheckPolicy(*request.policy));
  return OkStatus();
}

StatusOr<GenerationResult> Generate(Engine& engine, const GenerationRequest& request,
                                    const TokenCallback& on_token,
                                    const ProgressCallback& on_progress) {
  MP_RETURN_IF_ERROR(ValidateGenerationRequest(engine, request));
  const auto t0 = std::chrono::steady_clock::now();
  Communicator& comm = engine.comm();
  const int num_ranks = comm.size(), rank = comm.rank();
  const int64_t prompt = static_cast<int64_t>(request.prompt_ids.size());
  MP_ASSIGN_OR_RETURN(ShardPlan plan, ShardPlan::Create(prompt, num_ranks));
  MP_ASSIGN_OR_RETURN(SequenceStep share, ShardedPrefill(Engine::kDefaultSequence, 0,
                                                         request.prompt_ids, rank, num_ranks));
  const int64_t decode_rows = DecodeRowsPerRank(request.max_new_tokens, num_ranks);
  const int64_t capacity = std::max<int64_t>(1, plan.RankPromptTokens(rank) + decode_rows);
  // The request's policy belongs to this sequence only: the engine's own is never touched.
  MP_RETURN_IF_ERROR(engine.StartSequence(capacity, static_cast<int64_t>(share.ids.size()),
                                          request.policy, decode_rows));
  SequenceGuard guard{engine};
  const std::vector<int32_t>& eos = engine.config().eos_token_ids;
  MP_ASSIGN_OR_RETURN(std::unique_ptr<TokenSampler> sampler,
                      TokenSampler::Create(engine.backend(), request.sampling,
                                           engine.config().vocab_size, request.prompt_ids));

  GenerationResult result;
  result.prompt_tokens = prompt;
  std::chrono::steady_clock::time_point first_token;
  LayerCallback after_layer;
  if (on_progress) {
    after_layer = [&](int64_t done, int64_t total) {
      return on_progress(done * prompt / total, prompt);
    };
  }
  MP_ASSIGN_OR_RETURN(std::optional<ConstTensorView> prefill_logits,
                      engine.ForwardShard(share.ranges, share.ids, after_layer));
  result.prefill = engine.last_prefill_density();
  // The rank holding the last prompt token samples; the others learn the token from it.
  const int sampling_rank = ShardPlan::LastTokenRank(prompt, num_ranks);
  TokenMessage message;
  if (rank == sampling_rank) {
    MP_ASSERT(prefill_logits.has_value(), "the sampling rank has the last position's logits");
    MP_ASSIGN_OR_RETURN(SampledToken first, sampler->Sample(*prefill_logits, 0));
    message = TokenMessage::From(first);
  }
  for (int64_t step = 0;; ++step) {
    if (num_ranks > 1)
      MP_RETURN_IF_ERROR(
          comm.HostBroadcast(&message, sizeof(message), step == 0 ? sampling_rank : 0));
    const SampledToken sampled = message.ToToken();
    const int32_t token = sampled.id;
    MP_RETURN_IF_ERROR(sampler->Accept(token));
    result.ids.push_back(token);
    if (step == 0) {
      first_token = std::chrono::steady_clock::now();
      result.ttft_s = SecondsSince(t0);
    } else {
      result.decode_s = SecondsSince(first_token);
    }
    if (on_token && !on_token(sampled)) return CancelledError("generation cancelled by the caller");
    if (Contains(request.stop_ids, token) || (!request.ignore_eos && Contains(eos, token))) {
      result.finish_reason = FinishReason::kStop;
      break;
    }
    if (static_cast<int64_t>(result.ids.size()) >= request.max_new_tokens) {
      result.finish_reason = FinishReason::kLength;
      break;
    }
    MP_ASSIGN_OR_RETURN(ConstTensorView logits, engine.ForwardDecode(token));
    // Every rank holds the same logits; rank 0's draw is broadcast so the ranks cannot diverge.
    if (rank == 0) {
      MP_ASSIGN_OR_RETURN(SampledToken next,
                          sampler->Sample(logits, static_cast<uint64_t>(step + 1)));
      message = TokenMessage::From(next);
    }
  }
  return result;
}

}  // namespace millipede
