// The OpenAI wire format of responses and stream chunks (declared in openai_protocol.h).
#include <cmath>

#include "common/json_util.h"
#include "http/openai_protocol.h"

namespace millipede {
namespace {

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

Json BaseObject(const ResponseMeta& meta, bool chunk) {
  const bool chat = meta.endpoint == Endpoint::kChatCompletions;
  const char* object =
      chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  return Json{
      {"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
}

Json Usage(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens) {
  return Json{{"prompt_tokens", prompt_tokens},
              {"completion_tokens", completion_tokens},
              {"total_tokens", prompt_tokens + completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
}

// JSON has no infinity: an impossible token's log-probability is shown as vLLM shows it.
double Finite(float logprob) { return std::isfinite(logprob) ? logprob : -9999.0; }

Json Bytes(const std::string& token) {
  Json bytes = Json::array();
  for (unsigned char c : token) bytes.push_back(static_cast<int>(c));
  return bytes;
}

// Completions: parallel lists; each top_logprobs entry maps token text to its log-probability,
// the sampled token included (as OpenAI's API returns it).
Json CompletionLogprobs(const LogprobsRun& run) {
  Json tokens = Json::array(), values = Json::array(), tops = Json::array(),
       offsets = Json::array();
  int64_t offset = run.text_offset;
  for (size_t i = 0; i < run.tokens.size(); ++i) {
    const TokenLogprobs& t = run.tokens[i];
    tokens.push_back(t.token);
    values.push_back(Finite(t.logprob));
    Json top = Json::object();
    for (const auto& [text, logprob] : t.top) top[text] = Finite(logprob);
    top[t.token] = Finite(t.logprob);
    tops.push_back(std::move(top));
    offsets.push_back(offset);
    offset += i < run.token_chars.size() ? run.token_chars[i] : 0;
  }
  return Json{{"tokens", tokens},
              {"token_logprobs", values},
              {"top_logprobs", tops},
              {"text_offset", offsets}};
}

// Chat: one content entry per token, with its UTF-8 bytes and its alternatives.
Json ChatLogprobs(const LogprobsRun& run) {
  Json content = Json::array();
  for (const TokenLogprobs& t : run.tokens) {
    Json top = Json::array();
    for (const auto& [text, logprob] : t.top)
      top.push_back({{"token", text}, {"logprob", Finite(logprob)}, {"bytes", Bytes(text)}});
    content.push_back({{"token", t.token},
                       {"logprob", Finite(t.logprob)},
                       {"bytes", Bytes(t.token)},
                       {"top_logprobs", top}});
  }
  return Json{{"content", content}, {"refusal", nullptr}};
}

Json LogprobsJson(Endpoint endpoint, const LogprobsRun* run) {
  if (run == nullptr) return nullptr;
  return endpoint == Endpoint::kChatCompletions ? ChatLogprobs(*run) : CompletionLogprobs(*run);
}

}  // namespace

std::string CompletionBody(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices,
                           int64_t prompt_tokens) {
  Json body = BaseObject(meta, /*chunk=*/false);
  Json list = Json::array();
  int64_t generated = 0;
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    generated += static_cast<int64_t>(c.completion.ids.size());
    Json choice = {{"index", i}, {"finish_reason", c.completion.finish_reason}};
    const LogprobsRun* run = c.logprobs ? &*c.logprobs : nullptr;
    if (meta.endpoint == Endpoint::kChatCompletions) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    } else {
      choice["text"] = c.text;
    }
    choice["logprobs"] = LogprobsJson(meta.endpoint, run);
    list.push_back(std::move(choice));
  }
  body["choices"] = std::move(list);
  // Each choice is a job of the same prompt: the first one's reuse is the request's.
  body["usage"] = Usage(prompt_tokens, generated,
                        choices.empty() ? 0 : choices[0].completion.cached_tokens);
  return Dump(body);
}

std::string StreamChunkEvent(const ResponseMeta& meta, int64_t index, const std::string& text,
                             const std::string& finish_reason, bool role_only,
                             const LogprobsRun* logprobs) {
  Json body = BaseObject(meta, /*chunk=*/true);
  Json choice = {{"index", index},
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
  }
  choice["logprobs"] = LogprobsJson(meta.endpoint, logprobs);
  body["choices"] = Json::array({choice});
  return "data: " + Dump(body) + "\n\n";
}

std::string StreamUsageEvent(const ResponseMeta& meta, int64_t prompt_tokens,
                             int64_t completion_tokens, int64_t cached_tokens) {
  Json body = BaseObject(meta, /*chunk=*/true);
  body["choices"] = Json::array();
  body["usage"] = Usage(prompt_tokens, completion_tokens, cached_tokens);
  return "data: " + Dump(body) + "\n\n";
}

std::string StreamErrorEvent(const ApiError& error) {
  return "data: " + ApiErrorBody(error) + "\n\n";
}

}  // namespace millipede
