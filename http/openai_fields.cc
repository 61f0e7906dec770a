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

// An option this server does not implement and the values besides null that mean "not used"
// (null is OpenAI's and vLLM's "the default" for every one of them).
struct Refused {
  const char* key;
  Where where;
  std::vector<Json> defaults;
};

// For options whose default is null: vLLM treats an empty list or object as unset too.
const std::vector<Json> kEmpty = {Json::array(), Json::object()};
const std::vector<Json> kNullOnly = {};

const std::vector<Refused>& RefusedOptions() {
  static const std::vector<Refused> options = {
      {"suffix", Where::kCompletions, {""}},
      {"top_logprobs", Where::kCompletions, kNullOnly},  // completions take logprobs: N
      {"prompt_embeds", Where::kCompletions, kNullOnly},
      {"use_beam_search", Where::kBoth, {false}},
      {"length_penalty", Where::kBoth, {1.0}},
      {"min_tokens", Where::kBoth, {0}},
      {"include_stop_str_in_output", Where::kBoth, {false}},
      {"skip_special_tokens", Where::kBoth, {true}},
      {"spaces_between_special_tokens", Where::kBoth, {true}},
      {"truncate_prompt_tokens", Where::kBoth, kEmpty},
      {"prompt_logprobs", Where::kBoth, kEmpty},
      {"allowed_token_ids", Where::kBoth, kEmpty},
      {"bad_words", Where::kBoth, kEmpty},
      {"guided_json", Where::kBoth, kEmpty},
      {"guided_regex", Where::kBoth, kEmpty},
      {"guided_choice", Where::kBoth, kEmpty},
      {"guided_grammar", Where::kBoth, kEmpty},
      {"guided_decoding_backend", Where::kBoth, kEmpty},
      {"guided_whitespace_pattern", Where::kBoth, kEmpty},
      {"structured_outputs", Where::kBoth, kEmpty},
      {"logits_processors", Where::kBoth, kEmpty},
      {"tools", Where::kBoth, kEmpty},
      {"functions", Where::kBoth, kEmpty},
      {"priority", Where::kBoth, {0}},
      {"request_id", Where::kBoth, kNullOnly},
      {"return_tokens_as_token_ids", Where::kBoth, {false}},
      {"return_token_ids", Where::kBoth, {false}},
      {"cache_salt", Where::kBoth, kNullOnly},
      {"kv_transfer_params", Where::kBoth, kEmpty},
      {"vllm_xargs", Where::kBoth, kEmpty},
      {"audio", Where::kChat, kNullOnly},
      {"prediction", Where::kChat, kNullOnly},
      {"echo", Where::kChat, {false}},
      {"continue_final_message", Where::kChat, {false}},
      {"add_generation_prompt", Where::kChat, {true}},
      {"add_special_tokens", Where::kChat, {false}},
      {"chat_template", Where::kChat, kNullOnly},
      {"chat_template_kwargs", Where::kChat, kEmpty},
      {"documents", Where::kChat, kEmpty},
      {"mm_processor_kwargs", Where::kChat, kEmpty},
      // Without tools (refused above) parallel tool calls mean nothing; OpenAI's default is true.
      {"parallel_tool_calls", Where::kChat, {true}},
      {"reasoning_effort", Where::kChat, kNullOnly},
      {"include_reasoning", Where::kChat, {true}},
      {"verbosity", Where::kChat, {"medium"}},
      {"metadata", Where::kChat, {Json::object()}},
      {"store", Where::kChat, {false}},
      // One tier here: "auto" and "default" both mean the standard one.
      {"service_tier", Where::kChat, {"auto", "default"}},
      // {} turns web search on.
      {"web_search_options", Where::kChat, kNullOnly},
  };
  return options;
}

bool IsDefault(const Json& value, const std::vector<Json>& defaults) {
  if (value.is_null()) return true;
  for (const Json& d : defaults) {
    if (value == d) return true;  // numbers compare by value: 1 == 1.0
  }
  return false;
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
    const std::optional<int64_t> value = IntegerValue(id);
    if (!value || *value < 0 || *value >= model.vocab_size) {
      return InvalidField("stop_token_ids",
                          "stop_token_ids[" + std::to_string(i) + "] must be a token id in [0, " +
                              std::to_string(model.vocab_size) + "), got " + DescribeJson(id));
    }
    out->push_back(static_cast<int32_t>(*value));
  }
  return std::nullopt;
}

// A JSON integer, or a finite number with no fractional part (2.0).
bool IsWholeNumber(const Json& value) {
  if (value.is_number_integer()) return true;
  if (!value.is_number_float()) return false;
  const double d = value.get<double>();
  return std::isfinite(d) && std::trunc(d) == d;
}

}  // namespace

bool Present(const Json& body, const char* key) {
  auto it = body.find(key);
  return it != body.end() && !it->is_null();
}

std::optional<int64_t> IntegerValue(const Json& value) {
  if (!IsWholeNumber(value)) return std::nullopt;
  if (value.is_number_unsigned()) {
    if (value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return std::nullopt;
    return static_cast<int64_t>(value.get<uint64_t>());
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  // [-2^63, 2^63): the whole doubles that convert to int64 exactly.
  const double d = value.get<double>();
  constexpr double kTwo63 = 9223372036854775808.0;
  if (!(d >= -kTwo63 && d < kTwo63)) return std::nullopt;
  return static_cast<int64_t>(d);
}

std::optional<ApiError> GetInt(const Json& body, const char* key, int64_t min, int64_t max,
                               int64_t* out) {
  if (!Present(body, key)) return std::nullopt;
  const Json& v = body.at(key);
  if (!IsWholeNumber(v)) {
    return InvalidField(key, std::string(key) + " must be an integer, got " + DescribeJson(v));
  }
  // Values beyond int64 (unsigned or float) are out of range as well.
  std::optional<int64_t> value = IntegerValue(v);
  if (!value || *value < min || *value > max) {
    return InvalidField(key, std::string(key) + " must be in [" + std::to_string(min) + ", " +
                                 std::to_string(max) + "], got " + DescribeJson(v));
  }
  *out = *value;
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
    if (it == body.end() || IsDefault(*it, r.defaults)) continue;
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
    if (IntegerValue(best_of) != out->n) {
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
