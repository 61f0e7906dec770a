#include <algorithm>
#include <boost/asio/buffer.hpp>
#include <boost/beast/http.hpp>
#include <string>

#include "common/json_util.h"
#include "http/http_route.h"
#include "http/openai_protocol.h"
#include "http/request_framing.h"
#include "http/tokenize.h"
#include "tests/fuzz/fuzz_service.h"
#include "tests/fuzz/fuzz_targets.h"
#include "tokenizer/tokenizer.h"

namespace millipede::fuzz {
namespace {

namespace beast = boost::beast;
namespace http = boost::beast::http;

// Requests read from one input while the connection stays open.
constexpr int kMaxRequests = 8;

// Feeds the input to parsers as a connection's reads do: pieces appended to a buffer the parser
// consumes from, as http::read does with the session's flat_buffer. The piece size varies with
// the input's length so that headers and chunks are split at every kind of place.
class ByteFeed {
 public:
  explicit ByteFeed(std::string_view input) : input_(input), piece_(1 + input.size() % 509) {}

  bool empty() const { return buffer_.empty() && fed_ == input_.size(); }

  // Reads one request into `parser`: the error that ended it, none when it is complete.
  beast::error_code Read(http::request_parser<http::string_body>& parser) {
    beast::error_code ec;
    bool need_more = buffer_.empty();
    while (!parser.is_done()) {
      if (need_more) {
        if (fed_ == input_.size()) {
          parser.put_eof(ec);
          return ec;
        }
        const size_t n = std::min(piece_, input_.size() - fed_);
        buffer_.append(input_.substr(fed_, n));
        fed_ += n;
      }
      ec = {};
      const size_t used = parser.put(boost::asio::buffer(buffer_.data(), buffer_.size()), ec);
      buffer_.erase(0, used);
      if (ec && ec != http::error::need_more) return ec;
      // Without progress the parser needs more bytes than the buffer holds.
      need_more = ec == http::error::need_more || used == 0 || buffer_.empty();
    }
    return ec;
  }

 private:
  std::string_view input_;
  size_t piece_;
  size_t fed_ = 0;
  std::string buffer_;
};

// The bodies a request's answer would carry, as clients receive them.
Status CheckResponses(Endpoint endpoint, const OpenAiRequest& request) {
  const FuzzService& service = GetFuzzService();
  const JobRequest& job = request.job;
  std::string text = job.prompt_text;
  if (text.empty()) {
    StatusOr<std::string> decoded = service.tokenizer->Decode(job.prompt_ids);
    MP_ASSERT(decoded.ok(), "decoding valid prompt ids: ", decoded.status().ToString());
    text = *decoded;
  }
  JobCompletion completion;
  completion.finish_reason = "length";
  completion.text = text;
  completion.ids = job.prompt_ids;
  ResponseMeta meta{endpoint, "cmpl-fuzz", 0, service.model.name};
  MP_RETURN_IF_ERROR(
      CheckJsonBody(CompletionBody(meta, {ChoiceResult{completion, text, std::nullopt}}, 1),
                    "the completion body")
          .status());
  const std::string event = StreamChunkEvent(meta, 0, text, "");
  const std::string prefix = "data: ";
  MP_ASSERT(event.rfind(prefix, 0) == 0 && event.size() >= prefix.size() + 2,
            "a stream event without its framing");
  return CheckJsonBody(event.substr(prefix.size(), event.size() - prefix.size() - 2),
                       "a stream chunk")
      .status();
}

StatusOr<FuzzStage> CheckCompletion(Endpoint endpoint, const std::string& body) {
  const FuzzService& service = GetFuzzService();
  OpenAiRequest request;
  if (auto error = ParseOpenAiRequest(endpoint, body, service.model, &request)) {
    MP_RETURN_IF_ERROR(CheckApiError(*error));
    return FuzzStage::kRefusedBody;
  }
  const JobRequest& job = request.job;
  MP_ASSERT(request.n >= 1 && request.n <= kMaxChoices, "n = ", request.n);
  MP_ASSERT(job.prompt_text.empty() != job.prompt_ids.empty(), "not exactly one prompt form");
  MP_ASSERT(endpoint == Endpoint::kCompletions || !job.prompt_text.empty(), "a chat without text");
  MP_ASSERT(job.max_new_tokens_to_limit || job.max_new_tokens >= 1, "max_new_tokens ",
            job.max_new_tokens);
  const SamplingParams& s = job.sampling;
  // (top_p is checked as a double: one that rounds to 0 as a float is admission's to refuse.)
  MP_ASSERT(s.temperature >= 0 && s.temperature <= 2 && s.top_p >= 0 && s.top_p <= 1 &&
                s.top_k >= 0 && s.logprobs >= -1 && s.logprobs <= kMaxTopLogprobs,
            "sampling out of the documented ranges");
  MP_ASSIGN_OR_RETURN(bool admitted, CheckAdmission(job));
  if (!admitted) return FuzzStage::kRefusedAdmit;
  MP_RETURN_IF_ERROR(CheckResponses(endpoint, request));
  return FuzzStage::kAdmitted;
}

StatusOr<FuzzStage> CheckTokenize(bool detokenize, const std::string& body) {
  const FuzzService& service = GetFuzzService();
  TokenizeAnswer answer = detokenize
                              ? DetokenizeBody(body, service.model)
                              : TokenizeBody(body, service.model, service.limits.context_limit);
  if (answer.error) {
    MP_RETURN_IF_ERROR(CheckApiError(*answer.error));
    return FuzzStage::kRefusedBody;
  }
  MP_ASSIGN_OR_RETURN(Json json, CheckJsonBody(answer.body, "the answer"));
  if (detokenize) {
    MP_ASSERT(json.is_object() && json.contains("prompt") && json["prompt"].is_string(),
              "/detokenize answered without a prompt");
  } else {
    MP_ASSERT(json.is_object() && json.contains("tokens") && json["tokens"].is_array() &&
                  json.value("count", Json()) == json["tokens"].size(),
              "/tokenize answered a count that is not the tokens'");
  }
  return FuzzStage::kAnswered;
}

StatusOr<FuzzStage> CheckRequest(const HttpRequest& request) {
  // As a server with the key routes it, then as one without a key (to reach the bodies).
  RoutedRequest keyed = RouteHttpRequest(request, kApiKey);
  if (!keyed.route) MP_RETURN_IF_ERROR(CheckApiError(keyed.refusal));
  RoutedRequest open = RouteHttpRequest(request, "");
  if (!open.route) {
    MP_RETURN_IF_ERROR(CheckApiError(open.refusal));
    return FuzzStage::kRefusedRoute;
  }
  MP_ASSERT(!keyed.route || keyed.route == open.route, "the key changed the route");
  switch (*open.route) {
    case HttpRoute::kCompletions:
      return CheckCompletion(Endpoint::kCompletions, request.body());
    case HttpRoute::kChatCompletions:
      return CheckCompletion(Endpoint::kChatCompletions, request.body());
    case HttpRoute::kTokenize:
      return CheckTokenize(/*detokenize=*/false, request.body());
    case HttpRoute::kDetokenize:
      return CheckTokenize(/*detokenize=*/true, request.body());
    case HttpRoute::kHealth:
    case HttpRoute::kReady:
    case HttpRoute::kModels:
      break;
  }
  return FuzzStage::kRouted;
}

}  // namespace

StatusOr<FuzzStage> FuzzHttpRequest(std::string_view input) {
  const FuzzService& service = GetFuzzService();
  MP_ASSERT(service.tokenizer != nullptr, "the fuzz tokenizer did not build");
  ByteFeed feed(input);
  FuzzStage deepest = FuzzStage::kNothing;
  for (int i = 0; i < kMaxRequests && !feed.empty(); ++i) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(static_cast<uint64_t>(service.options.max_body_bytes));
    beast::error_code ec = feed.Read(parser);
    // The session answers a parse error with 400 (413 over the body limit) and closes.
    if (ec) return std::max(deepest, parser.got_some() ? FuzzStage::kRefusedWire : deepest);
    // Refused after the header (the session reads no body then) and closed.
    if (std::optional<ApiError> refusal = CheckRequestFraming(parser.get())) {
      MP_RETURN_IF_ERROR(CheckApiError(*refusal));
      return std::max(deepest, FuzzStage::kRefusedWire);
    }
    // As the session: a Transfer-Encoding the parser does not read as chunked is refused.
    if (parser.get().find(http::field::transfer_encoding) != parser.get().end() &&
        !parser.chunked())
      return std::max(deepest, FuzzStage::kRefusedWire);
    MP_ASSIGN_OR_RETURN(FuzzStage stage, CheckRequest(parser.get()));
    deepest = std::max(deepest, stage);
    if (!parser.get().keep_alive()) break;
  }
  return deepest;
}

}  // namespace millipede::fuzz
