// The OpenAI wire format of /v1/completions and /v1/chat/completions: request bodies to jobs
// (with field-by-field validation) and completions to response and stream-chunk bodies.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/job_service.h"
#include "http/api_error.h"
#include "http/chat_template.h"

namespace millipede {

enum class Endpoint { kCompletions, kChatCompletions };

// Most choices one request may ask for (`n`); each is a job of its own.
inline constexpr int64_t kMaxChoices = 16;

// The cap of a chat that names no max_tokens, unless the server is told otherwise
// (--default-max-tokens).
inline constexpr int64_t kDefaultChatMaxTokens = 4096;

// A validated request, before tokenization.
struct OpenAiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  // The job: prompt_text (completions text or the formatted chat) or prompt_ids, add_bos
  // (completions with a text prompt get the tokenizer's BOS, as HF's
  // encode(add_special_tokens=True) does; chat templates write their own), sampling (with
  // sampling.logprobs), stop strings and ids, ignore_eos. max_new_tokens is set when the request
  // names it; a chat request that does not takes ServedModel::chat_default_max_tokens, bounded
  // by what the context leaves (max_new_tokens_to_limit).
  JobRequest job;
  // `n` choices: n jobs of the same request, choice i with seed + i.
  int64_t n = 1;
  // Completions: the prompt's text comes first in each choice's text.
  bool echo = false;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

// What the parser needs to know about the served model.
struct ServedModel {
  std::string name;         // the name clients use ("model" field, /v1/models)
  std::string alt_name;     // also accepted in "model" (the model's own id)
  std::string chat_format;  // ModelInfo::chat_format
  // The template chats render with; when null, the built-in format (or chat_template_error).
  std::shared_ptr<const ChatTemplate> chat_template;
  std::string chat_template_error;
  int64_t vocab_size = 0;  // ModelInfo::vocab_size: token ids must lie below it
  // The most tokens a chat without max_tokens / max_completion_tokens generates (at most what the
  // context leaves); 0: the rest of the context.
  int64_t chat_default_max_tokens = kDefaultChatMaxTokens;
  const Tokenizer* tokenizer = nullptr;
};

// Parses and validates a request body. Errors name the field: malformed JSON, wrong types,
// values out of range (temperature in [0, 2], top_p in (0, 1], top_k >= -1, min_p in [0, 1],
// repetition_penalty > 0, presence and frequency penalties in [-2, 2], logit_bias values in
// [-100, 100] for ids in the vocabulary, logprobs / top_logprobs up to 20, max_tokens >= 1,
// n in [1, kMaxChoices]; integer fields take integral numbers such as 2.0), options this server
// does not implement with non-default values (code "unsupported_parameter"), an unknown model
// (404), and for chats a model without a chat template ("chat_template_unavailable") or a
// conversation its template refuses or cannot render ("chat_template_error", with the
// template's message and position). null is every optional field's default. `user`,
// `safety_identifier`, `prompt_cache_key` and fields neither OpenAI nor vLLM define are ignored.
std::optional<ApiError> ParseOpenAiRequest(Endpoint endpoint, const std::string& body,
                                           const ServedModel& model, OpenAiRequest* out);

// Fields every response and chunk of one request shares.
struct ResponseMeta {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;       // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
};

// One generated token's log-probabilities as a response shows them: the token's text (its id
// decoded alone) and the alternatives', most likely first.
struct TokenLogprobs {
  std::string token;
  float logprob = 0.0f;
  std::vector<std::pair<std::string, float>> top;
};

// Log-probabilities of a run of tokens of one choice, in the endpoint's format (completions:
// tokens, token_logprobs, top_logprobs, text_offset; chat: content entries with bytes).
// `text_offset` is the characters of the choice's text before the first token.
struct LogprobsRun {
  std::vector<TokenLogprobs> tokens;
  int64_t text_offset = 0;
  // Characters of each token's text, for the completions' text_offset.
  std::vector<int64_t> token_chars;
};

// One choice of a finished request.
struct ChoiceResult {
  JobCompletion completion;
  std::string text;  // what the response shows (the completion's text, after the echo)
  std::optional<LogprobsRun> logprobs;
};

// The non-streaming response body of every choice, with usage (prompt tokens once, generated
// tokens of every choice, prompt_tokens_details.cached_tokens: the first choice's prompt tokens
// that came from the prefix cache).
std::string CompletionBody(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices,
                           int64_t prompt_tokens);

// One SSE event ("data: {...}\n\n") carrying a text delta of choice `index`; `finish_reason`
// empty = null; `logprobs` those of the tokens the delta completes. Chat streams open with a
// delta that carries the role (`role_only`).
std::string StreamChunkEvent(const ResponseMeta& meta, int64_t index, const std::string& text,
                             const std::string& finish_reason, bool role_only = false,
                             const LogprobsRun* logprobs = nullptr);

// The final usage event of a stream with stream_options.include_usage (choices is empty).
std::string StreamUsageEvent(const ResponseMeta& meta, int64_t prompt_tokens,
                             int64_t completion_tokens, int64_t cached_tokens = 0);

// "data: {\"error\": ...}\n\n" for an error after the stream began.
std::string StreamErrorEvent(const ApiError& error);

inline constexpr const char* kStreamDone = "data: [DONE]\n\n";

}  // namespace millipede
