#include "http/openai_fields.h"

#include <cmath>
#include <limits>
#include <unordered_set>
#include <vector>

namespace millipede {
namespace {

// vLLM and the coordinator's admission allow this many stop ids.
constexpr size_t kMaxStopTokenIds = 256;

enum class Where { kBoth, kCompletions, kChat };

// An option this server does not implement and the value that means "not used".
struct Refused {
  const char* key;
  Json default_value;  // null: absent, null or empty is fine
  Where where;
};

const std::vector<Refused>& RefusedOptions() {
  static const std::vector<Refused> options = {
      {"suffix", "", Where::kCompletions},
      {"top_logprobs", nullptr, Where::kCompletions},  // completions take logprobs: N
      {"use_beam_search", false, Where::kBoth},
      {"length_penalty", 1.0, Where::kBoth},
      {"min_tokens", 0, Where::kBoth},
      {"include_stop_str_in_output", false, Where::kBoth},
      {"skip_special_tokens", true, Where::kBoth},
      {"spaces_between_special_tokens", true, Where::kBoth},
      {"truncate_prompt_tokens", nullptr, Where::kBoth},
      {"prompt_logprobs", nullptr, Where::kBoth},
      {"allowed_token_ids", nullptr, Where::kBoth},
      {"bad_words", nullptr, Where::kBoth},
      {"guided_json", nullptr, Where::kBoth},
      {"guided_regex", nullptr, Where::kBoth},
      {"guided_choice", nullptr, Where::kBoth},
      {"guided_grammar", nullptr, Where::kBoth},
      {"guided_decoding_backend", nullptr, Where::kBoth},
      {"guided_whitespace_pattern", nullptr, Where::kBoth},
      {"structured_outputs", nullptr, Where::kBoth},
      {"logits_processors", nullptr, Where::kBoth},
      {"tools", nullptr, Where::kBoth},
      {"functions", nullptr, Where::kBoth},
      {"audio", nullptr, Where::kChat},
      {"prediction", nullptr, Where::kChat},
      {"echo", false, Where::kChat},
      {"continue_final_message", false, Where::kChat},
      {"add_generation_prompt", true, Where::kChat},
      {"add_special_tokens", false, Where::kChat},
      {"chat_template", nullptr, Where::kChat},
      {"chat_template_kwargs", nullptr, Where::kChat},
  };
  return options;
}

bool IsDefault(const Json& value, const Json& default_value) {
  if (default_value.is_null())
    return value.is_null() || ((value.is_array() || value.is_object()) && value.empty());
  return value == default_value;
}

std::string Range(double min, double max) {
  auto text = [](double x) {
    std::string s = std::to_string(x);
    while (s.size() > 1 && s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
    return s;
  };
  return "[" + text(min) + ", " + text(max) + "]";
}

std::optional<ApiError> ParseLogitBias(const Json& body, const ServedModel& model,
                                       std::vector<LogitBias>* out) {
  if (!Present(body, "logit_bias")) return std::nullopt;
  const Json& map = body.at("logit_bias");
  if (!map.is_object()) {
    return InvalidField("logit_bias", "logit_bias must be an object mapping token ids to biases");
  }
  if (map.size() > kMaxLogitBiasEntries) {
    return InvalidField("logit_bias", "logit_bias has " + std::to_string(map.size()) +
                                          " entries; at most " +
                                          std::to_string(kMaxLogitBiasEntries) + " are accepted");
  }
  for (const auto& [key, value] : map.items()) {
    int64_t id = -1;
    bool digits = !key.empty() && key.size() <= 10;
    for (char c : key) digits = digits && c >= '0' && c <= '9';
    if (digits) id = std::stoll(key);
    if (!digits || id >= model.vocab_size) {
      return InvalidField("logit_bias", "logit_bias key \"" + key.substr(0, 40) +
                                            "\" is not a token id in [0, " +
                                            std::to_string(model.vocab_size) + ")");
    }
    if (!value.is_number() || !(value.get<double>() >= -kMaxLogitBias) ||
        !(value.get<double>() <= kMaxLogitBias)) {
      return InvalidField("logit_bias", "logit_bias[\"" + key + "\"] must be a number in " +
                                            Range(-kMaxLogitBias, kMaxLogitBias) + ", got " +
                                            DescribeJson(value));
    }
    out->push_back({static_cast<int32_t>(id), static_cast<float>(value.get<double>())});
  }
  return std::nullopt;
}

std::optional<ApiError> ParseStopTokenIds(const Json& body, const ServedModel& model,
                                          std::vector<int32_t>* out) {
  if (!Present(body, "stop_token_ids")) return std::nullopt;
  const Json& ids = body.at("stop_token_ids");
  if (!ids.is_array() || ids.size() > kMaxStopTokenIds) {
    return InvalidField("stop_token_ids", "stop_token_ids must be a list of at most " +
                                              std::to_string(kMaxStopTokenIds) + " token ids");
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    const Json& id = ids[i];
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= model.vocab_size) {
      return InvalidField("stop_token_ids",
                          "stop_token_ids[" + std::to_string(i) + "] must be a token id in [0, " +
                              std::to_string(model.vocab_size) + "), got " + DescribeJson(id));
    }
    out->push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return std::nullopt;
}

}  // namespace

bool Present(const Json& body, const char* key) {
  auto it = body.find(key);
  return it != body.end() && !it->is_null();
}

std::optional<ApiError> GetInt(const Json& body, const char* key, int64_t min, int64_t max,
                               int64_t* out) {
  if (!Present(body, key)) return std::nullopt;
  const Json& v = body.at(key);
  if (!v.is_number_integer()) {
    return InvalidField(key, std::string(key) + " must be an integer, got " + DescribeJson(v));
  }
  // Unsigned values above int64 max are out of range as well.
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(max)) {
    return InvalidField(key, std::string(key) + " must be at most " + std::to_string(max) +
                                 ", got " + DescribeJson(v));
  }
  int64_t value = v.get<int64_t>();
  if (value < min || value > max) {
    return InvalidField(key, std::string(key) + " must be in [" + std::to_string(min) + ", " +
                                 std::to_string(max) + "], got " + std::to_string(value));
  }
  *out = value;
  return std::nullopt;
}

std::optional<ApiError> GetNumber(const Json& body, const char* key, double* out) {
  if (!Present(body, key)) return std::nullopt;
  const Json& v = body.at(key);
  if (!v.is_number()) {
    return InvalidField(key, std::string(key) + " must be a number, got " + DescribeJson(v));
  }
  *out = v.get<double>();
  return std::nullopt;
}

std::optional<ApiError> GetNumberIn(const Json& body, const char* key, double min, double max,
                                    double* out) {
  double value = *out;
  if (auto e = GetNumber(body, key, &value)) return e;
  if (!(value >= min && value <= max)) {
    return InvalidField(key, std::string(key) + " must be in " + Range(min, max) + ", got " +
                                 DescribeJson(body.at(key)));
  }
  *out = value;
  return std::nullopt;
}

std::optional<ApiError> GetBool(const Json& body, const char* key, bool* out) {
  if (!Present(body, key)) return std::nullopt;
  const Json& v = body.at(key);
  if (!v.is_boolean()) {
    return InvalidField(key, std::string(key) + " must be a boolean, got " + DescribeJson(v));
  }
  *out = v.get<bool>();
  return std::nullopt;
}

ApiError Unsupported(const std::string& param, const std::string& message) {
  return ApiError{400, message, "invalid_request_error", param, "unsupported_parameter"};
}

std::optional<ApiError> RefuseUnsupported(const Json& body, Endpoint endpoint) {
  const bool chat = endpoint == Endpoint::kChatCompletions;
  for (const Refused& r : RefusedOptions()) {
    if (r.where == (chat ? Where::kCompletions : Where::kChat)) continue;
    auto it = body.find(r.key);
    if (it == body.end() || IsDefault(*it, r.default_value)) continue;
    return Unsupported(r.key, std::string(r.key) + " is not supported by this server (got " +
                                  DescribeJson(*it) + ")");
  }
  for (const char* key : {"tool_choice", "function_call"}) {
    if (Present(body, key) && body.at(key) != "none") {
      return Unsupported(key, std::string(key) + " is not supported by this server");
    }
  }
  if (Present(body, "response_format") &&
      !(body.at("response_format").is_object() &&
        body.at("response_format").value("type", Json()) == "text")) {
    return Unsupported("response_format",
                       "response_format is not supported by this server (only {\"type\": "
                       "\"text\"})");
  }
  if (Present(body, "modalities") && body.at("modalities") != Json::array({"text"})) {
    return Unsupported("modalities", "modalities other than [\"text\"] are not supported");
  }
  // Compared as JSON: value() with a bool default would throw for any other type.
  if (Present(body, "stream_options") && body.at("stream_options").is_object() &&
      Present(body.at("stream_options"), "continuous_usage_stats") &&
      body.at("stream_options").at("continuous_usage_stats") != false) {
    return Unsupported("stream_options.continuous_usage_stats",
                       "stream_options.continuous_usage_stats is not supported by this server");
  }
  return std::nullopt;
}

std::optional<ApiError> ParseSamplingExtras(const Json& body, const ServedModel& model,
                                            SamplingParams* sampling,
                                            std::vector<int32_t>* stop_ids) {
  double repetition = 1.0;
  if (auto e = GetNumber(body, "repetition_penalty", &repetition)) return e;
  if (!(repetition > 0 && repetition <= std::numeric_limits<float>::max())) {
    return InvalidField("repetition_penalty", "repetition_penalty must be > 0 (1 = off), got " +
                                                  DescribeJson(body.at("repetition_penalty")));
  }
  double presence = 0.0, frequency = 0.0, min_p = 0.0;
  if (auto e = GetNumberIn(body, "presence_penalty", -2, 2, &presence)) return e;
  if (auto e = GetNumberIn(body, "frequency_penalty", -2, 2, &frequency)) return e;
  if (auto e = GetNumberIn(body, "min_p", 0, 1, &min_p)) return e;
  sampling->repetition_penalty = static_cast<float>(repetition);
  sampling->presence_penalty = static_cast<float>(presence);
  sampling->frequency_penalty = static_cast<float>(frequency);
  sampling->min_p = static_cast<float>(min_p);
  if (auto e = ParseLogitBias(body, model, &sampling->logit_bias)) return e;
  return ParseStopTokenIds(body, model, stop_ids);
}

std::optional<ApiError> ParseChoiceOptions(const Json& body, OpenAiRequest* out) {
  if (auto e = GetInt(body, "n", 1, kMaxChoices, &out->n)) return e;
  if (Present(body, "best_of")) {
    const Json& best_of = body.at("best_of");
    if (!best_of.is_number_integer() || best_of.get<int64_t>() != out->n) {
      return Unsupported("best_of", "best_of other than n is not supported by this server (got " +
                                        DescribeJson(best_of) + ")");
    }
  }
  int32_t& logprobs = out->job.sampling.logprobs;
  if (out->endpoint == Endpoint::kCompletions) {
    if (auto e = GetBool(body, "echo", &out->echo)) return e;
    int64_t count = -1;
    if (auto e = GetInt(body, "logprobs", 0, kMaxTopLogprobs, &count)) return e;
    logprobs = static_cast<int32_t>(count);
    if (out->echo && logprobs >= 0) {
      return Unsupported("echo",
                         "echo with logprobs is not supported by this server: it does not compute "
                         "the prompt's log-probabilities");
    }
    return std::nullopt;
  }
  bool wanted = false;
  int64_t top = -1;
  if (auto e = GetBool(body, "logprobs", &wanted)) return e;
  if (auto e = GetInt(body, "top_logprobs", 0, kMaxTopLogprobs, &top)) return e;
  if (top >= 0 && !wanted) {
    return InvalidField("top_logprobs", "top_logprobs needs logprobs: true");
  }
  logprobs = wanted ? static_cast<int32_t>(top < 0 ? 0 : top) : -1;
  return std::nullopt;
}

}  // namespace millipede
