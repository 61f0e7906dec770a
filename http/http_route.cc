#include "http/http_route.h"

#include <boost/beast/core/string.hpp>
#include <string_view>

namespace millipede {

namespace beast = boost::beast;
namespace http = boost::beast::http;

namespace {

// Compares in time that depends only on the lengths, not on where the strings differ.
bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  size_t n = a.size() > b.size() ? a.size() : b.size();
  volatile unsigned char diff = a.size() != b.size();
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = diff | static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

bool Authorized(const HttpRequest& request, const std::string& key) {
  if (key.empty()) return true;
  beast::string_view header = request[http::field::authorization];
  const beast::string_view kBearer = "Bearer ";
  if (header.size() < kBearer.size() ||
      !beast::iequals(header.substr(0, kBearer.size()), kBearer)) {
    return false;
  }
  beast::string_view token = header.substr(kBearer.size());
  return ConstantTimeEquals(std::string_view(token.data(), token.size()), key);
}

// Whether a JSON endpoint's body is declared as JSON (or not declared at all).
bool JsonContentType(const HttpRequest& request) {
  if (request.find(http::field::content_type) == request.end()) return true;
  beast::string_view value = request[http::field::content_type];
  // The media type, without parameters (charset) and surrounding blanks.
  value = value.substr(0, value.find(';'));
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  return beast::iequals(value, "application/json");
}

RoutedRequest Refused(std::string path, ApiError error, HttpHeaders headers = {}) {
  return RoutedRequest{std::nullopt, std::move(path), std::move(error), std::move(headers)};
}

}  // namespace

RoutedRequest RouteHttpRequest(const HttpRequest& request, const std::string& api_key) {
  std::string target(request.target());
  std::string path = target.substr(0, target.find('?'));
  const http::verb method = request.method();

  // Everything but the probes needs the key (vLLM leaves /tokenize and /detokenize open; they
  // cost CPU time, so here they do not).
  const bool probe = path == "/health" || path == "/ready";
  if (!probe && !Authorized(request, api_key)) {
    return Refused(path,
                   ApiError{401, "missing or invalid API key (send Authorization: Bearer KEY)",
                            "authentication_error", "", "invalid_api_key"},
                   {{"WWW-Authenticate", "Bearer"}});
  }
  auto routed = [&](HttpRoute route) { return RoutedRequest{route, path, {}, {}}; };
  auto wrong_method = [&](const char* allowed) {
    ApiError error{405,
                   "method " + std::string(request.method_string()) + " is not allowed on " + path +
                       " (allowed: " + allowed + ")",
                   "invalid_request_error", "", "method_not_allowed"};
    return Refused(path, std::move(error), {{"Allow", allowed}});
  };
  const bool get = method == http::verb::get;
  if (path == "/health") return get ? routed(HttpRoute::kHealth) : wrong_method("GET");
  if (path == "/ready") return get ? routed(HttpRoute::kReady) : wrong_method("GET");
  if (path == "/v1/models" || path.rfind("/v1/models/", 0) == 0) {
    return get ? routed(HttpRoute::kModels) : wrong_method("GET");
  }
  if (path == "/v1/cache") return get ? routed(HttpRoute::kCache) : wrong_method("GET");
  if (path.rfind("/v1/cache/", 0) == 0) {
    const bool action = path.ends_with("/pin") || path.ends_with("/unpin");
    if (action) {
      return method == http::verb::post ? routed(HttpRoute::kCache) : wrong_method("POST");
    }
    return method == http::verb::delete_ ? routed(HttpRoute::kCache) : wrong_method("DELETE");
  }
  std::optional<HttpRoute> json_route;
  if (path == "/v1/completions") json_route = HttpRoute::kCompletions;
  if (path == "/v1/chat/completions") json_route = HttpRoute::kChatCompletions;
  if (path == "/tokenize") json_route = HttpRoute::kTokenize;
  if (path == "/detokenize") json_route = HttpRoute::kDetokenize;
  if (!json_route) {
    return Refused(
        path, ApiError{404, "no route for " + std::string(request.method_string()) + " " + path,
                       "not_found_error", "", "unknown_route"});
  }
  if (method != http::verb::post) return wrong_method("POST");
  if (!JsonContentType(request)) {
    return Refused(path, ApiError{415,
                                  "Content-Type must be application/json, got " +
                                      std::string(request[http::field::content_type]),
                                  "invalid_request_error", "", "unsupported_media_type"});
  }
  return routed(*json_route);
}

}  // namespace millipede
