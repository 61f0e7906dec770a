// HttpSession's /tokenize and /detokenize (tokenize.h): the work runs off the event loop.
#include "http/tokenize.h"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>

#include "common/json_util.h"
#include "http/http_session.h"
#include "http/openai_fields.h"
#include "tokenizer/tokenizer.h"

namespace millipede {

namespace net = boost::asio;

namespace {

std::optional<ApiError> CheckModel(const Json& body, const ServedModel& model) {
  if (!Present(body, "model")) return std::nullopt;
  const Json& name = body.at("model");
  if (!name.is_string()) return InvalidField("model", "model must be a string");
  if (name == model.name || (!model.alt_name.empty() && name == model.alt_name)) {
    return std::nullopt;
  }
  return ApiError{404,
                  "The model `" + name.get<std::string>() +
                      "` does not exist; this server serves `" + model.name + "`",
                  "invalid_request_error", "model", "model_not_found"};
}

// The text to tokenize and whether the BOS goes first.
std::optional<ApiError> TokenizeInput(const std::string& text, const Json& body,
                                      const ServedModel& model, std::string* prompt,
                                      bool* add_bos) {
  if (Present(body, "messages")) {
    // The chat path of /v1/chat/completions formats the messages (and checks them).
    OpenAiRequest chat;
    if (auto e = ParseOpenAiRequest(Endpoint::kChatCompletions, text, model, &chat)) return e;
    *prompt = std::move(chat.job.prompt_text);
    *add_bos = false;
    return std::nullopt;
  }
  if (!Present(body, "prompt") || !body.at("prompt").is_string()) {
    return InvalidField("prompt", "prompt (a string) or messages is required");
  }
  *prompt = body.at("prompt").get<std::string>();
  *add_bos = true;
  return GetBool(body, "add_special_tokens", add_bos);
}

}  // namespace

TokenizeAnswer TokenizeBody(const std::string& text, const ServedModel& model,
                            int64_t max_model_len) {
  auto parsed = ParseJson(text, "request body");
  if (!parsed.ok() || !parsed->is_object()) {
    return {ApiError{400,
                     parsed.ok() ? "request body must be a JSON object" : parsed.status().message(),
                     "invalid_request_error", "", "invalid_json"},
            ""};
  }
  const Json& body = *parsed;
  if (auto e = CheckModel(body, model)) return {e, ""};
  std::string prompt;
  bool add_bos = false, token_strs = false;
  if (auto e = TokenizeInput(text, body, model, &prompt, &add_bos)) return {e, ""};
  if (auto e = GetBool(body, "return_token_strs", &token_strs)) return {e, ""};
  const Tokenizer& tokenizer = *model.tokenizer;
  StatusOr<std::vector<int32_t>> encoded = EncodePrompt(tokenizer, prompt, add_bos);
  if (!encoded.ok()) return {InvalidField("prompt", encoded.status().message()), ""};
  const std::vector<int32_t>& ids = *encoded;
  Json strs = nullptr;
  if (token_strs) {
    strs = Json::array();
    for (int32_t id : ids) {
      StatusOr<std::string> token = tokenizer.IdToToken(id);
      strs.push_back(token.ok() ? *token : std::string());
    }
  }
  Json answer = {{"count", ids.size()},
                 {"max_model_len", max_model_len},
                 {"tokens", ids},
                 {"token_strs", strs}};
  return {std::nullopt, answer.dump(-1, ' ', false, Json::error_handler_t::replace)};
}

TokenizeAnswer DetokenizeBody(const std::string& text, const ServedModel& model) {
  auto parsed = ParseJson(text, "request body");
  if (!parsed.ok() || !parsed->is_object()) {
    return {ApiError{400,
                     parsed.ok() ? "request body must be a JSON object" : parsed.status().message(),
                     "invalid_request_error", "", "invalid_json"},
            ""};
  }
  const Json& body = *parsed;
  if (auto e = CheckModel(body, model)) return {e, ""};
  if (!Present(body, "tokens") || !body.at("tokens").is_array()) {
    return {InvalidField("tokens", "tokens (a list of token ids) is required"), ""};
  }
  std::vector<int32_t> ids;
  const Json& tokens = body.at("tokens");
  for (size_t i = 0; i < tokens.size(); ++i) {
    const Json& id = tokens[i];
    const std::optional<int64_t> value = IntegerValue(id);
    if (!value || *value < 0 || *value >= model.vocab_size) {
      return {InvalidField("tokens",
                           "tokens[" + std::to_string(i) + "] must be a token id in [0, " +
                               std::to_string(model.vocab_size) + "), got " + DescribeJson(id)),
              ""};
    }
    ids.push_back(static_cast<int32_t>(*value));
  }
  StatusOr<std::string> decoded = model.tokenizer->Decode(ids);
  if (!decoded.ok()) return {InvalidField("tokens", decoded.status().message()), ""};
  return {std::nullopt,
          Json{{"prompt", *decoded}}.dump(-1, ' ', false, Json::error_handler_t::replace)};
}

void HttpSession::StartTokenize(bool detokenize) {
  phase_ = Phase::kTokenizing;
  Watch();
  net::post(ctx_->submit_pool, [ctx = ctx_, weak = weak_from_this(),
                                body = std::move(parser_->get().body()), detokenize] {
    TokenizeAnswer answer = detokenize ? DetokenizeBody(body, ctx->model)
                                       : TokenizeBody(body, ctx->model, ctx->max_model_len);
    ctx->gate.Post([weak, answer = std::move(answer)] {
      auto self = weak.lock();
      if (!self) return;
      net::dispatch(self->executor(),
                    [self, answer] { self->OnTokenizeResult(answer.error, answer.body); });
    });
  });
}

void HttpSession::OnTokenizeResult(const std::optional<ApiError>& error, const std::string& body) {
  if (closed_ || phase_ != Phase::kTokenizing) return;
  phase_ = Phase::kRunning;
  if (error) return Refuse(*error);
  SendJson(200, body);
}

}  // namespace millipede
