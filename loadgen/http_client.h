// A small blocking HTTP/1.1 client over POSIX sockets: one request per connection
// ("Connection: close"), the response read as it arrives so a streaming body can be consumed
// event by event, every read and write bounded by a deadline. Closing the connection mid-body
// is how a client disconnects.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "loadgen/http_wire.h"

namespace millipede::loadgen {

using Clock = std::chrono::steady_clock;

class HttpConnection {
 public:
  // Connects to host:port (IPv4 or IPv6, the first address that answers). Every failure is an
  // IoError naming what failed; past `deadline` it says "timed out" (and timed_out() is true).
  static StatusOr<std::unique_ptr<HttpConnection>> Open(const std::string& host, int port,
                                                        Clock::time_point deadline);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  // Sends a request: `method` `path` with a JSON body when `body` is not empty, and
  // "Authorization: Bearer" when `api_key` is not empty.
  Status SendRequest(const std::string& method, const HttpTarget& target, const std::string& path,
                     std::string_view body, const std::string& api_key);
  // Reads the status line and headers.
  StatusOr<HttpResponseHead> ReadHead();
  // Appends the next body bytes that arrive (decoded) to `out`; false once the body has ended.
  StatusOr<bool> ReadBody(std::string* out);
  // Closes the socket now (a disconnect when the response is still streaming).
  void Close();
  bool timed_out() const { return timed_out_; }

 private:
  HttpConnection(int fd, Clock::time_point deadline) : fd_(fd), deadline_(deadline) {}
  // Waits for the socket to be ready (POLLIN or POLLOUT) until the deadline.
  Status Wait(short events);
  // recv() into `chunk`; 0 bytes = closed.
  StatusOr<size_t> Receive(char* chunk, size_t size);

  int fd_ = -1;
  Clock::time_point deadline_;
  bool timed_out_ = false;
  std::string pending_;  // bytes received after the head, not yet decoded
  std::unique_ptr<BodyDecoder> decoder_;
};

struct HttpResult {
  HttpResponseHead head;
  std::string body;
};

// One whole request and response within `timeout_s`.
StatusOr<HttpResult> HttpFetch(const HttpTarget& target, const std::string& method,
                               const std::string& path, std::string_view body,
                               const std::string& api_key, double timeout_s);

// `now + seconds`, or no deadline for seconds <= 0.
Clock::time_point DeadlineAfter(double seconds);

}  // namespace millipede::loadgen
