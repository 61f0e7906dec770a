#include "tests/fuzz/fuzz_service.h"

#include "common/json_util.h"
#include "common/sampling_params.h"
#include "tokenizer/bpe_trainer.h"

namespace millipede::fuzz {
namespace {

// Llama 3's special tokens (its chat format) and a TemplateProcessing post-processor that puts
// <|begin_of_text|> first, so add_bos paths run too.
StatusOr<std::unique_ptr<Tokenizer>> MakeTokenizer() {
  const std::string bos = "<|begin_of_text|>";
  MP_ASSIGN_OR_RETURN(
      std::string text,
      TrainByteLevelBpe({"Hello there, how are you? The quick brown fox.",
                         "system user assistant helpful 0123456789 {}[]\":,"},
                        64, {bos, "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}));
  MP_ASSIGN_OR_RETURN(Json json, ParseJson(text, "fuzz tokenizer"));
  json["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", Json::array({{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})}};
  return Tokenizer::FromJson(json.dump(), "fuzz tokenizer");
}

FuzzService* MakeService() {
  auto* service = new FuzzService;
  StatusOr<std::unique_ptr<Tokenizer>> tokenizer = MakeTokenizer();
  // Without its tokenizer no target can run: a broken build of the trainer, not an input.
  if (!tokenizer.ok() || !(*tokenizer)->bos_id()) return service;
  service->tokenizer = std::move(tokenizer).value();
  const int64_t vocab = service->tokenizer->vocab_size();
  service->model.name = kModelName;
  service->model.alt_name = kModelId;
  service->model.chat_format = "llama3";
  service->model.vocab_size = vocab;
  service->model.tokenizer = service->tokenizer.get();
  service->options.api_key = kApiKey;
  // Fuzz inputs stay under a megabyte: a smaller limit than the default lets them reach 413.
  service->options.max_body_bytes = 1 << 20;
  AdmissionLimits& l = service->limits;
  l.vocab_size = vocab;
  l.context_limit = 4096;
  l.kv_capacity_per_rank = 1024;
  l.num_workers = 2;
  l.max_prompt_bytes = 256 << 10;
  l.num_layers = 4;
  l.num_kv_heads = 2;
  l.capabilities = {
      {PrefillPattern::kDense, PrefillPattern::kAShape, PrefillPattern::kVerticalSlash,
       PrefillPattern::kBlockSparse, PrefillPattern::kAntidiagonal},
      {DecodeRole::kFull, DecodeRole::kFilter, DecodeRole::kSelected, DecodeRole::kStreamingHead,
       DecodeRole::kStaticEviction},
      /*mixed_decode_layers=*/true};
  return service;
}

}  // namespace

const FuzzService& GetFuzzService() {
  static const FuzzService* service = MakeService();
  return *service;
}

StatusOr<bool> CheckAdmission(const JobRequest& request) {
  const FuzzService& service = GetFuzzService();
  MP_ASSERT(service.tokenizer != nullptr, "the fuzz tokenizer did not build");
  StatusOr<AdmittedJob> admitted = AdmitRequest(request, *service.tokenizer, service.limits);
  if (!admitted.ok()) {
    const StatusCode code = admitted.status().code();
    MP_ASSERT(code == StatusCode::kInvalidArgument || code == StatusCode::kOutOfRange ||
                  code == StatusCode::kUnimplemented,
              "admission refused with ", admitted.status().ToString());
    MP_ASSERT(!admitted.status().message().empty(), "admission refused without a message");
    MP_RETURN_IF_ERROR(CheckApiError(ApiErrorFromStatus(admitted.status())));
    return false;
  }
  const AdmissionLimits& limits = service.limits;
  const int64_t prompt = static_cast<int64_t>(admitted->prompt_ids.size());
  MP_ASSERT(prompt >= 1, "admitted an empty prompt");
  for (int32_t id : admitted->prompt_ids) {
    MP_ASSERT(id >= 0 && id < limits.vocab_size, "admitted prompt id ", id);
  }
  MP_ASSERT(admitted->max_new_tokens >= 1, "admitted max_new_tokens ", admitted->max_new_tokens);
  MP_ASSERT(prompt + admitted->max_new_tokens <= limits.context_limit, "admitted ", prompt, " + ",
            admitted->max_new_tokens, " tokens over the context limit");
  MP_ASSERT(KvPositionsPerRank(prompt, admitted->max_new_tokens, limits.num_workers) <=
                limits.kv_capacity_per_rank,
            "admitted a job over the KV capacity");
  Status sampling = CheckSamplingParams(request.sampling, limits.vocab_size);
  MP_ASSERT(sampling.ok(), "admitted bad sampling: ", sampling.ToString());
  for (int32_t id : request.stop_ids) {
    MP_ASSERT(id >= 0 && id < limits.vocab_size, "admitted stop id ", id);
  }
  MP_ASSERT(request.policy_json.empty() || admitted->policy.has_value(),
            "a policy was given but none admitted");
  return true;
}

StatusOr<Json> CheckJsonBody(const std::string& text, const std::string& what) {
  StatusOr<Json> parsed = ParseJson(text, what);
  MP_ASSERT(parsed.ok(), what, " is not valid JSON: ", parsed.status().ToString());
  return parsed;
}

Status CheckApiError(const ApiError& error) {
  MP_ASSERT(error.http_status >= 400 && error.http_status <= 599, "error status ",
            error.http_status);
  MP_ASSERT(!error.message.empty(), "an error without a message (status ", error.http_status, ")");
  MP_ASSIGN_OR_RETURN(Json body, CheckJsonBody(ApiErrorBody(error), "the error body"));
  MP_ASSERT(body.is_object() && body.contains("error") && body["error"].is_object() &&
                body["error"].contains("message") && body["error"]["message"].is_string(),
            "the error body lacks error.message");
  return OkStatus();
}

}  // namespace millipede::fuzz
