// Which handler answers a parsed HTTP request, or why it is refused: a missing or wrong API key,
// a method the route does not take, a JSON route whose body is declared as something else, or no
// such route. No socket and no state, so the request parser's fuzz target runs it as the
// server does.
#pragma once

#include <boost/beast/http.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "http/api_error.h"

namespace millipede {

using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;
using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

enum class HttpRoute {
  kHealth,           // GET /health
  kReady,            // GET /ready
  kModels,           // GET /v1/models, GET /v1/models/{id}
  kCompletions,      // POST /v1/completions
  kChatCompletions,  // POST /v1/chat/completions
  kTokenize,         // POST /tokenize
  kDetokenize,       // POST /detokenize
  kCache,            // GET /v1/cache, DELETE /v1/cache/{id}, POST /v1/cache/{id}/pin|unpin
};

struct RoutedRequest {
  std::optional<HttpRoute> route;  // none: refused
  std::string path;                // the target without its query string
  // The refusal (401, 404, 405 or 415) and the headers that go with it (Allow,
  // WWW-Authenticate).
  ApiError refusal;
  HttpHeaders refusal_headers;
};

// Routes `request`. With a non-empty `api_key` every route but the probes needs
// "Authorization: Bearer KEY" (compared in time independent of where the keys differ).
RoutedRequest RouteHttpRequest(const HttpRequest& request, const std::string& api_key);

}  // namespace millipede
