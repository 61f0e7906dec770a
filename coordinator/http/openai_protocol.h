// The OpenAI wire format of /v1/completions and /v1/chat/completions: request bodies to jobs
// (with field-by-field validation) and completions to response and stream-chunk bodies.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "api/job_service.h"
#include "coordinator/http/api_error.h"
#include "coordinator/http/chat_template.h"

namespace millipede {

enum class Endpoint { kCompletions, kChatCompletions };

// A validated request, before tokenization.
struct OpenAiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  // The job: prompt_text (completions text or the formatted chat) or prompt_ids, sampling,
  // stop strings, ignore_eos. max_new_tokens is set when the request names it.
  JobRequest job;
  bool max_tokens_given = false;
  // Completions with a text prompt get the tokenizer's BOS in front, as HF's
  // encode(add_special_tokens=True) does; chat templates write their own.
  bool add_bos = false;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

// What the parser needs to know about the served model.
struct ServedModel {
  std::string name;         // the name clients use ("model" field, /v1/models)
  std::string alt_name;     // also accepted in "model" (the model's own id)
  std::string chat_format;  // ModelInfo::chat_format
  const Tokenizer* tokenizer = nullptr;
};

// Parses and validates a request body. Errors name the field: malformed JSON, wrong types,
// values out of range (temperature in [0, 2], top_p in (0, 1], top_k >= -1, max_tokens >= 1,
// n == 1), unsupported options with non-default values, an unknown model (404) or a model
// without a chat template (chat only).
std::optional<ApiError> ParseOpenAiRequest(Endpoint endpoint, const std::string& body,
                                           const ServedModel& model, OpenAiRequest* out);

// Fields every response and chunk of one request shares.
struct ResponseMeta {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;       // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
};

// The non-streaming response body, with usage.
std::string CompletionBody(const ResponseMeta& meta, const JobCompletion& completion);

// One SSE event ("data: {...}\n\n") carrying a text delta; `finish_reason` empty = null.
// Chat streams open with a delta that carries the role (`role_only`).
std::string StreamChunkEvent(const ResponseMeta& meta, const std::string& text,
                             const std::string& finish_reason, bool role_only = false);

// The final usage event of a stream with stream_options.include_usage (choices is empty).
std::string StreamUsageEvent(const ResponseMeta& meta, int64_t prompt_tokens,
                             int64_t completion_tokens);

// "data: {\"error\": ...}\n\n" for an error after the stream began.
std::string StreamErrorEvent(const ApiError& error);

inline constexpr const char* kStreamDone = "data: [DONE]\n\n";

}  // namespace millipede
