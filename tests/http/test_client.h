// A blocking HTTP/1.1 client for the front-end tests (Boost.Beast), and an SSE body splitter.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <map>
#include <string>
#include <vector>

#include "common/json_util.h"

namespace millipede::http_test {

struct HttpReply {
  int status = 0;
  std::map<std::string, std::string> headers;
  std::string body;
  // The body as JSON (null when it is not JSON).
  Json json() const {
    auto parsed = ParseJson(body, "reply");
    return parsed.ok() ? *parsed : Json(nullptr);
  }
};

class HttpClient {
 public:
  explicit HttpClient(int port) : stream_(ioc_) {
    stream_.connect(boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"),
                                                   static_cast<uint16_t>(port)));
  }

  // Sends one request on this connection and reads the whole reply (chunked bodies joined).
  HttpReply Send(const std::string& method, const std::string& target, const std::string& body = "",
                 const std::map<std::string, std::string>& headers = {}) {
    namespace http = boost::beast::http;
    http::request<http::string_body> req{http::string_to_verb(method), target, 11};
    req.set(http::field::host, "127.0.0.1");
    if (!body.empty()) req.set(http::field::content_type, "application/json");
    // An empty value removes the header (e.g. a request without Content-Type).
    for (const auto& [name, value] : headers) {
      if (value.empty()) {
        req.erase(name);
      } else {
        req.set(name, value);
      }
    }
    req.body() = body;
    req.prepare_payload();
    http::write(stream_, req);
    http::response_parser<http::string_body> parser;
    parser.body_limit(1 << 30);
    http::read(stream_, buffer_, parser);
    HttpReply reply;
    reply.status = static_cast<int>(parser.get().result_int());
    for (const auto& field : parser.get()) {
      reply.headers[std::string(field.name_string())] = std::string(field.value());
    }
    reply.body = parser.get().body();
    return reply;
  }

 private:
  boost::asio::io_context ioc_;
  boost::beast::tcp_stream stream_;
  boost::beast::flat_buffer buffer_;
};

// Connects a plain socket, sends `request` as it is, then reads until the server closes the
// connection ("" when it cannot connect).
inline std::string RawExchange(int port, const std::string& request) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return "";
  }
  // A server that never closes fails the test instead of hanging it.
  timeval timeout{};
  timeout.tv_sec = 10;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  ::send(fd, request.data(), request.size(), 0);
  std::string received;
  char buffer[4096];
  for (;;) {
    ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    received.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return received;
}

// One request on a fresh connection.
inline HttpReply Fetch(int port, const std::string& method, const std::string& target,
                       const std::string& body = "",
                       const std::map<std::string, std::string>& headers = {}) {
  HttpClient client(port);
  return client.Send(method, target, body, headers);
}

// The `data:` payloads of an SSE body, in order; comment lines (":") are skipped. Each event
// must end with a blank line; `framing_ok` reports whether the body is well-formed.
inline std::vector<std::string> SseData(const std::string& body, bool* framing_ok) {
  std::vector<std::string> data;
  *framing_ok = body.size() >= 2 && body.substr(body.size() - 2) == "\n\n";
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) {
      *framing_ok = false;
      break;
    }
    std::string event = body.substr(pos, end - pos);
    pos = end + 2;
    if (event.rfind(":", 0) == 0) continue;
    if (event.rfind("data: ", 0) != 0 || event.find('\n') != std::string::npos) {
      *framing_ok = false;
      continue;
    }
    data.push_back(event.substr(6));
  }
  return data;
}

}  // namespace millipede::http_test
