// The bodies of /tokenize and /detokenize, as vLLM's server has them:
//   POST /tokenize    {"prompt": TEXT, "add_special_tokens": true, "return_token_strs": false}
//                     or {"messages": [...]} (the chat template applied, as for
//                     /v1/chat/completions)
//                     -> {"count", "max_model_len", "tokens", "token_strs"}
//   POST /detokenize  {"tokens": [ids]} -> {"prompt": TEXT}
// "model", when given, must name the served model.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "http/api_error.h"
#include "http/openai_protocol.h"

namespace millipede {

// The answer's JSON body, or the refusal (400 for a malformed body, 404 for another model).
struct TokenizeAnswer {
  std::optional<ApiError> error;
  std::string body;
};

// The answer shows `max_model_len` (ModelInfo::max_model_len, as /v1/models does).
TokenizeAnswer TokenizeBody(const std::string& text, const ServedModel& model,
                            int64_t max_model_len);
TokenizeAnswer DetokenizeBody(const std::string& text, const ServedModel& model);

}  // namespace millipede
