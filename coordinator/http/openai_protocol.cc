#include "coordinator/http/openai_protocol.h"

#include <cmath>
#include <limits>

#include "common/json_util.h"
#include "common/tokenizer/tokenizer.h"

namespace millipede {
namespace {

constexpr size_t kMaxStopStrings = 16;

bool Present(const Json& body, const char* key) {
  auto it = body.find(key);
  return it != body.end() && !it->is_null();
}

// Reads an optional integer field into *out; an error names the field and the allowed range.
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

std::optional<ApiError> GetBool(const Json& body, const char* key, bool* out) {
  if (!Present(body, key)) return std::nullopt;
  const Json& v = body.at(key);
  if (!v.is_boolean()) {
    return InvalidField(key, std::string(key) + " must be a boolean, got " + DescribeJson(v));
  }
  *out = v.get<bool>();
  return std::nullopt;
}

// Options that change the output's meaning and are not implemented: refused unless they hold
// their default value, so a client never silently gets something other than it asked for.
std::optional<ApiError> RefuseUnsupported(const Json& body) {
  auto refuse = [](const char* key) {
    return InvalidField(key, std::string(key) + " is not supported by this server");
  };
  for (const char* key : {"presence_penalty", "frequency_penalty"}) {
    if (Present(body, key) && !(body.at(key).is_number() && body.at(key).get<double>() == 0)) {
      return refuse(key);
    }
  }
  for (const char* key : {"logprobs", "echo"}) {
    if (Present(body, key) && body.at(key) != false) return refuse(key);
  }
  if (Present(body, "best_of") && body.at("best_of") != 1) return refuse("best_of");
  if (Present(body, "suffix") && body.at("suffix") != "") return refuse("suffix");
  for (const char* key :
       {"logit_bias", "tools", "functions", "tool_choice", "function_call", "top_logprobs"}) {
    if (Present(body, key) && !body.at(key).empty()) return refuse(key);
  }
  if (Present(body, "response_format") &&
      !(body.at("response_format").is_object() &&
        body.at("response_format").value("type", "") == "text")) {
    return refuse("response_format");
  }
  return std::nullopt;
}

// Sampling, length, stop and stream fields shared by both endpoints.
std::optional<ApiError> ParseCommon(const Json& body, OpenAiRequest* out) {
  if (auto e = RefuseUnsupported(body)) return e;
  int64_t n = 1;
  if (auto e = GetInt(body, "n", 1, std::numeric_limits<int32_t>::max(), &n)) return e;
  if (n != 1) return InvalidField("n", "only n=1 is supported, got " + std::to_string(n));

  const int64_t kMaxTokens = std::numeric_limits<int64_t>::max();
  for (const char* key : {"max_completion_tokens", "max_tokens"}) {
    int64_t value = -1;
    if (auto e = GetInt(body, key, 1, kMaxTokens, &value)) return e;
    if (value > 0 && !out->max_tokens_given) {
      out->job.max_new_tokens = value;
      out->max_tokens_given = true;
    }
  }

  SamplingParams& sampling = out->job.sampling;
  double temperature = 1.0;  // OpenAI's default
  if (auto e = GetNumber(body, "temperature", &temperature)) return e;
  if (!(temperature >= 0 && temperature <= 2)) {
    return InvalidField("temperature", "temperature must be in [0, 2], got " +
                                           DescribeJson(body.at("temperature")));
  }
  sampling.temperature = static_cast<float>(temperature);
  double top_p = 1.0;
  if (auto e = GetNumber(body, "top_p", &top_p)) return e;
  if (!(top_p > 0 && top_p <= 1)) {
    return InvalidField("top_p", "top_p must be in (0, 1], got " + DescribeJson(body.at("top_p")));
  }
  sampling.top_p = static_cast<float>(top_p);
  int64_t top_k = 0;
  if (auto e = GetInt(body, "top_k", -1, std::numeric_limits<int32_t>::max(), &top_k)) return e;
  sampling.top_k = top_k < 0 ? 0 : static_cast<int32_t>(top_k);  // -1 = off, as in vLLM
  int64_t seed = 0;
  if (auto e = GetInt(body, "seed", std::numeric_limits<int64_t>::min(),
                      std::numeric_limits<int64_t>::max(), &seed)) {
    return e;
  }
  sampling.seed = static_cast<uint64_t>(seed);

  if (Present(body, "stop")) {
    const Json& stop = body.at("stop");
    std::vector<std::string> strings;
    if (stop.is_string()) {
      strings.push_back(stop.get<std::string>());
    } else if (stop.is_array() && stop.size() <= kMaxStopStrings) {
      for (const Json& s : stop) {
        if (!s.is_string()) return InvalidField("stop", "stop must be a string or strings");
        strings.push_back(s.get<std::string>());
      }
    } else {
      return InvalidField("stop", "stop must be a string or a list of at most " +
                                      std::to_string(kMaxStopStrings) + " strings");
    }
    for (const std::string& s : strings) {
      if (s.empty()) return InvalidField("stop", "stop strings must not be empty");
      out->job.stop_strings.push_back(s);
    }
  }

  if (auto e = GetBool(body, "stream", &out->stream)) return e;
  if (Present(body, "stream_options")) {
    const Json& options = body.at("stream_options");
    if (!options.is_object()) return InvalidField("stream_options", "must be an object");
    if (!out->stream) {
      return InvalidField("stream_options", "stream_options is only allowed with stream: true");
    }
    if (auto e = GetBool(options, "include_usage", &out->include_usage)) {
      e->param = "stream_options.include_usage";
      return e;
    }
  }
  if (auto e = GetBool(body, "ignore_eos", &out->job.ignore_eos)) return e;
  return std::nullopt;
}

// prompt: a string, token ids, or a list holding exactly one of those.
std::optional<ApiError> ParsePrompt(const Json& body, OpenAiRequest* out) {
  if (!Present(body, "prompt")) return InvalidField("prompt", "prompt is required");
  const Json* prompt = &body.at("prompt");
  if (prompt->is_array() && prompt->size() == 1 &&
      (prompt->front().is_string() || prompt->front().is_array())) {
    prompt = &prompt->front();
  }
  if (prompt->is_string()) {
    out->job.prompt_text = prompt->get<std::string>();
    if (out->job.prompt_text.empty()) return InvalidField("prompt", "prompt must not be empty");
    out->add_bos = true;
    return std::nullopt;
  }
  if (!prompt->is_array() || prompt->empty()) {
    return InvalidField("prompt", "prompt must be a non-empty string or list of token ids");
  }
  for (size_t i = 0; i < prompt->size(); ++i) {
    const Json& id = (*prompt)[i];
    if (id.is_string() || id.is_array()) {
      return InvalidField("prompt", "batched prompts are not supported: send one prompt");
    }
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return InvalidField("prompt", "prompt[" + std::to_string(i) +
                                        "] must be a non-negative token id, got " +
                                        DescribeJson(id));
    }
    out->job.prompt_ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return std::nullopt;
}

// messages: [{role, content}], content a string or a list of {"type": "text", "text"} parts.
std::optional<ApiError> ParseMessages(const Json& body, std::vector<ChatMessage>* messages) {
  if (!Present(body, "messages")) return InvalidField("messages", "messages is required");
  const Json& list = body.at("messages");
  if (!list.is_array() || list.empty()) {
    return InvalidField("messages", "messages must be a non-empty list");
  }
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = "messages[" + std::to_string(i) + "]";
    const Json& m = list[i];
    if (!m.is_object()) return InvalidField(where, where + " must be an object");
    ChatMessage message;
    if (!m.contains("role") || !m["role"].is_string()) {
      return InvalidField(where + ".role", where + ".role must be a string");
    }
    message.role = m["role"].get<std::string>();
    const Json content = m.value("content", Json(nullptr));
    if (content.is_string()) {
      message.content = content.get<std::string>();
    } else if (content.is_array()) {
      for (const Json& part : content) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
            !part["text"].is_string()) {
          return InvalidField(where + ".content",
                              where + ".content parts must be {\"type\": \"text\", \"text\": ...}");
        }
        message.content += part["text"].get<std::string>();
      }
    } else if (!(content.is_null() && message.role == "assistant")) {
      return InvalidField(where + ".content", where + ".content must be a string or text parts");
    }
    messages->push_back(std::move(message));
  }
  return std::nullopt;
}

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

Json BaseObject(const ResponseMeta& meta, bool chunk) {
  const bool chat = meta.endpoint == Endpoint::kChatCompletions;
  const char* object =
      chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  return Json{
      {"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
}

Json Usage(int64_t prompt_tokens, int64_t completion_tokens) {
  return Json{{"prompt_tokens", prompt_tokens},
              {"completion_tokens", completion_tokens},
              {"total_tokens", prompt_tokens + completion_tokens}};
}

}  // namespace

std::optional<ApiError> ParseOpenAiRequest(Endpoint endpoint, const std::string& body_text,
                                           const ServedModel& model, OpenAiRequest* out) {
  *out = OpenAiRequest{};
  out->endpoint = endpoint;
  auto parsed = ParseJson(body_text, "request body");
  if (!parsed.ok())
    return ApiError{400, parsed.status().message(), "invalid_request_error", "", "invalid_json"};
  const Json& body = *parsed;
  if (!body.is_object())
    return ApiError{400, "request body must be a JSON object", "invalid_request_error", "",
                    "invalid_json"};

  if (Present(body, "model")) {
    const Json& name = body.at("model");
    if (!name.is_string()) return InvalidField("model", "model must be a string");
    if (name != model.name && (model.alt_name.empty() || name != model.alt_name)) {
      return ApiError{404,
                      "The model `" + name.get<std::string>() +
                          "` does not exist; this server "
                          "serves `" +
                          model.name + "`",
                      "invalid_request_error", "model", "model_not_found"};
    }
  }
  if (endpoint == Endpoint::kCompletions) {
    out->job.max_new_tokens = 16;  // OpenAI's default for completions
    if (auto e = ParsePrompt(body, out)) return e;
  } else {
    std::vector<ChatMessage> messages;
    if (auto e = ParseMessages(body, &messages)) return e;
    auto format = ResolveChatFormat(model.chat_format, *model.tokenizer);
    if (!format.ok()) {
      return ApiError{400, format.status().message(), "invalid_request_error", "messages",
                      "chat_template_unavailable"};
    }
    auto text = FormatChat(*format, messages);
    if (!text.ok()) return InvalidField("messages", text.status().message());
    out->job.prompt_text = std::move(text).value();
    // The end-of-turn token stops generation; as a stop string it is also cut from the text.
    const char* end_of_turn = ChatEndOfTurn(*format);
    if (auto id = model.tokenizer->TokenToId(end_of_turn)) out->job.stop_ids.push_back(*id);
    out->job.stop_strings.push_back(end_of_turn);
  }
  return ParseCommon(body, out);
}

std::string CompletionBody(const ResponseMeta& meta, const JobCompletion& completion) {
  Json body = BaseObject(meta, /*chunk=*/false);
  Json choice = {{"index", 0}, {"finish_reason", completion.finish_reason}};
  if (meta.endpoint == Endpoint::kChatCompletions) {
    choice["message"] = {{"role", "assistant"}, {"content", completion.text}};
  } else {
    choice["text"] = completion.text;
    choice["logprobs"] = nullptr;
  }
  body["choices"] = Json::array({choice});
  body["usage"] = Usage(completion.prompt_tokens, static_cast<int64_t>(completion.ids.size()));
  return Dump(body);
}

std::string StreamChunkEvent(const ResponseMeta& meta, const std::string& text,
                             const std::string& finish_reason, bool role_only) {
  Json body = BaseObject(meta, /*chunk=*/true);
  Json choice = {{"index", 0},
                 {"finish_reason", finish_reason.empty() ? Json(nullptr) : Json(finish_reason)}};
  if (meta.endpoint == Endpoint::kChatCompletions) {
    Json delta = Json::object();
    if (role_only) {
      delta = {{"role", "assistant"}, {"content", ""}};
    } else if (!text.empty()) {
      delta["content"] = text;
    }
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
    choice["logprobs"] = nullptr;
  }
  body["choices"] = Json::array({choice});
  return "data: " + Dump(body) + "\n\n";
}

std::string StreamUsageEvent(const ResponseMeta& meta, int64_t prompt_tokens,
                             int64_t completion_tokens) {
  Json body = BaseObject(meta, /*chunk=*/true);
  body["choices"] = Json::array();
  body["usage"] = Usage(prompt_tokens, completion_tokens);
  return "data: " + Dump(body) + "\n\n";
}

std::string StreamErrorEvent(const ApiError& error) {
  return "data: " + ApiErrorBody(error) + "\n\n";
}

}  // namespace millipede
