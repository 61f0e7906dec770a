// Field-by-field parsing of OpenAI request bodies, shared by the completion endpoints and
// /tokenize: typed getters whose errors name the field and the allowed range, the sampling
// parameters beyond temperature / top-p / top-k, `n`, `echo` and log-probabilities, and the
// options this server refuses. Internal to http.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/json_util.h"
#include "http/api_error.h"
#include "http/openai_protocol.h"

namespace millipede {

// Whether `key` is present and not null.
bool Present(const Json& body, const char* key);

// `value` as an integer: a JSON integer, or a number with no fractional part (2.0, as vLLM's
// request models accept), within int64. nullopt for anything else (2.5, strings, 1e300).
std::optional<int64_t> IntegerValue(const Json& value);

// Optional fields: absent or null leaves *out as it is; a wrong type or range is an error
// naming the field. GetInt takes integral numbers (IntegerValue); 2.5 is an error.
std::optional<ApiError> GetInt(const Json& body, const char* key, int64_t min, int64_t max,
                               int64_t* out);
std::optional<ApiError> GetNumber(const Json& body, const char* key, double* out);
// A number in [min, max] (NaN never passes).
std::optional<ApiError> GetNumberIn(const Json& body, const char* key, double min, double max,
                                    double* out);
std::optional<ApiError> GetBool(const Json& body, const char* key, bool* out);

// 400 with code "unsupported_parameter" naming `param`.
ApiError Unsupported(const std::string& param, const std::string& message);

// Known OpenAI and vLLM options this server does not implement, when they hold anything but
// their default (a client never silently gets something other than it asked for).
std::optional<ApiError> RefuseUnsupported(const Json& body, Endpoint endpoint);

// repetition_penalty, presence_penalty, frequency_penalty, min_p, logit_bias (ids checked
// against model.vocab_size) into `sampling`; stop_token_ids into `stop_ids`.
std::optional<ApiError> ParseSamplingExtras(const Json& body, const ServedModel& model,
                                            SamplingParams* sampling,
                                            std::vector<int32_t>* stop_ids);

// n, echo (completions), logprobs and top_logprobs (completions: logprobs is the number of
// alternatives; chat: logprobs is a bool and top_logprobs the number) into `out`.
std::optional<ApiError> ParseChoiceOptions(const Json& body, OpenAiRequest* out);

}  // namespace millipede
