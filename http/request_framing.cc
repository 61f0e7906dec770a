#include "http/request_framing.h"

#include <string>
#include <string_view>
#include <vector>

namespace millipede {
namespace {

namespace http = boost::beast::http;

std::string_view TrimWhitespace(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// RFC 9110's token: what a transfer coding's name must be.
bool IsToken(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    const bool alnum = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (!alnum && std::string_view("!#$%&'*+-.^_`|~").find(c) == std::string_view::npos)
      return false;
  }
  return true;
}

// The coding names of every Transfer-Encoding line in order, lower-cased, parameters dropped;
// empty list elements (", ,") are skipped as RFC 9110's list syntax allows. Nullopt when an
// element's name is not a token (";x", "a b"): a parser that reads the list differently would
// frame the body differently, so such a request is refused.
std::optional<std::vector<std::string>> TransferCodings(const http::request_header<>& header) {
  std::vector<std::string> codings;
  auto [first, last] = header.equal_range(http::field::transfer_encoding);
  for (auto field = first; field != last; ++field) {
    std::string_view rest(field->value().data(), field->value().size());
    while (true) {
      const size_t comma = rest.find(',');
      const std::string_view element = TrimWhitespace(rest.substr(0, comma));
      if (!element.empty()) {
        const std::string_view name = TrimWhitespace(element.substr(0, element.find(';')));
        if (!IsToken(name)) return std::nullopt;
        codings.push_back(Lower(name));
      }
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  return codings;
}

ApiError BadFraming(const std::string& message) {
  return ApiError{400, "malformed HTTP request: " + message, "invalid_request_error", "",
                  "malformed_request"};
}

std::string Quoted(const std::string& coding) { return "\"" + coding.substr(0, 64) + "\""; }

}  // namespace

std::optional<ApiError> CheckRequestFraming(const http::request_header<>& header) {
  if (header.find(http::field::transfer_encoding) == header.end()) return std::nullopt;
  if (header.version() < 11) {
    return BadFraming("Transfer-Encoding is not allowed in an HTTP/1.0 request");
  }
  if (header.find(http::field::content_length) != header.end()) {
    return BadFraming("a request must not carry both Transfer-Encoding and Content-Length");
  }
  const std::optional<std::vector<std::string>> listed = TransferCodings(header);
  if (!listed) return BadFraming("Transfer-Encoding holds an element that is not a coding name");
  const std::vector<std::string>& codings = *listed;
  if (codings.empty()) return BadFraming("Transfer-Encoding names no transfer coding");
  if (codings.back() != "chunked") {
    return BadFraming("the final transfer coding must be chunked, got " +
                      Quoted(codings.back()) + ", so the body's length cannot be determined");
  }
  for (size_t i = 0; i + 1 < codings.size(); ++i) {
    if (codings[i] == "chunked") return BadFraming("chunked may be applied only once");
  }
  if (codings.size() > 1) {
    return ApiError{501,
                    "the transfer coding " + Quoted(codings.front()) +
                        " is not implemented by this server: send the body with "
                        "Transfer-Encoding: chunked alone, or with Content-Length",
                    "invalid_request_error", "", "unsupported_transfer_coding"};
  }
  return std::nullopt;
}

}  // namespace millipede
