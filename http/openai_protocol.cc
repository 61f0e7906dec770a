#include "http/openai_protocol.h"

#include <cmath>
#include <limits>

#include "common/json_util.h"
#include "http/openai_fields.h"
#include "tokenizer/tokenizer.h"

namespace millipede {
namespace {

constexpr size_t kMaxStopStrings = 16;

// Sampling, length, stop and stream fields shared by both endpoints.
std::optional<ApiError> ParseCommon(const Json& body, const ServedModel& model,
                                    OpenAiRequest* out) {
  if (auto e = RefuseUnsupported(body, out->endpoint)) return e;
  if (auto e = ParseChoiceOptions(body, out)) return e;

  const int64_t kMaxTokens = std::numeric_limits<int64_t>::max();
  bool max_given = false;
  for (const char* key : {"max_completion_tokens", "max_tokens"}) {
    int64_t value = -1;
    if (auto e = GetInt(body, key, 1, kMaxTokens, &value)) return e;
    if (value > 0 && !max_given) {
      out->job.max_new_tokens = value;
      out->job.max_new_tokens_to_limit = false;
      max_given = true;
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
  if (auto e = ParseSamplingExtras(body, model, &sampling, &out->job.stop_ids)) return e;

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
    // An empty object asks for nothing (vLLM accepts it without stream as well).
    if (!out->stream && !options.empty()) {
      return InvalidField("stream_options", "stream_options is only allowed with stream: true");
    }
    if (auto e = GetBool(options, "include_usage", &out->include_usage)) {
      e->param = "stream_options.include_usage";
      return e;
    }
  }
  if (auto e = GetBool(body, "ignore_eos", &out->job.ignore_eos)) return e;
  if (auto e = GetBool(body, "cache", &out->job.cache)) return e;
  if (auto e = GetBool(body, "cache_pin", &out->job.pin)) return e;
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
    // vLLM's add_special_tokens (default true): the BOS, as HF's encode() adds it.
    out->job.add_bos = true;
    return GetBool(body, "add_special_tokens", &out->job.add_bos);
  }
  if (!prompt->is_array() || prompt->empty()) {
    return InvalidField("prompt", "prompt must be a non-empty string or list of token ids");
  }
  for (size_t i = 0; i < prompt->size(); ++i) {
    const Json& id = (*prompt)[i];
    if (id.is_string() || id.is_array()) {
      return InvalidField("prompt", "batched prompts are not supported: send one prompt");
    }
    const std::optional<int64_t> value = IntegerValue(id);
    if (!value || *value < 0 || *value > std::numeric_limits<int32_t>::max()) {
      return InvalidField("prompt", "prompt[" + std::to_string(i) +
                                        "] must be a non-negative token id, got " +
                                        DescribeJson(id));
    }
    out->job.prompt_ids.push_back(static_cast<int32_t>(*value));
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
        // value() with a string default would throw for a "type" that is not a string.
        if (!part.is_object() || part.value("type", Json()) != "text" || !part.contains("text") ||
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

// The chat's prompt text, by the model's template or a built-in format, and the end-of-turn
// token as a stop id and a stop string (so that it is also cut from the text).
std::optional<ApiError> FormatChatPrompt(const ServedModel& model,
                                         const std::vector<ChatMessage>& messages,
                                         OpenAiRequest* out) {
  std::string end_of_turn;
  if (model.chat_template) {
    auto text = model.chat_template->Render(messages, /*add_generation_prompt=*/true);
    if (!text.ok()) {
      return ApiError{400, text.status().message(), "invalid_request_error", "messages",
                      "chat_template_error"};
    }
    out->job.prompt_text = std::move(text).value();
    end_of_turn = model.chat_template->eos_token();
  } else if (!model.chat_template_error.empty()) {
    return ApiError{400, model.chat_template_error, "invalid_request_error", "messages",
                    "chat_template_unavailable"};
  } else {
    auto format = ResolveChatFormat(model.chat_format, *model.tokenizer);
    if (!format.ok()) {
      return ApiError{400, format.status().message(), "invalid_request_error", "messages",
                      "chat_template_unavailable"};
    }
    auto text = FormatChat(*format, messages);
    if (!text.ok()) return InvalidField("messages", text.status().message());
    out->job.prompt_text = std::move(text).value();
    end_of_turn = ChatEndOfTurn(*format);
  }
  if (end_of_turn.empty()) return std::nullopt;
  if (auto id = model.tokenizer->TokenToId(end_of_turn)) out->job.stop_ids.push_back(*id);
  out->job.stop_strings.push_back(end_of_turn);
  return std::nullopt;
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
    if (auto e = FormatChatPrompt(model, messages, out)) return e;
    // Without max_tokens a chat answer gets the server's default cap, and never more than the
    // rest of the context (0: the rest of the context, as OpenAI's and vLLM's servers do).
    out->job.max_new_tokens = model.chat_default_max_tokens;
    out->job.max_new_tokens_to_limit = true;
  }
  return ParseCommon(body, model, out);
}

}  // namespace millipede
