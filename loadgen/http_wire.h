// The parts of HTTP/1.1 and server-sent events a streaming client reads, as pure code over
// bytes: the response head, the body (chunked, Content-Length or up to the close) and SSE
// events.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace millipede::loadgen {

// "HOST:PORT" or "http://HOST[:PORT][/PATH]" (port 80 and path "/" by default).
struct HttpTarget {
  std::string host;
  int port = 80;
  std::string path = "/";
};
StatusOr<HttpTarget> ParseHttpTarget(const std::string& text);

struct HttpResponseHead {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased; a repeated name keeps the last
};

// Parses the status line and header lines of `head` (the bytes before the empty line, line
// ends "\r\n" or "\n").
StatusOr<HttpResponseHead> ParseResponseHead(std::string_view head);

// Turns the bytes after the head into the body: dechunks "Transfer-Encoding: chunked", stops
// after Content-Length bytes, or takes everything up to the connection's close.
class BodyDecoder {
 public:
  explicit BodyDecoder(const HttpResponseHead& head);

  // Appends the body bytes within `bytes` to `out`; bytes after the body's end are ignored.
  // A malformed chunk size is an error.
  Status Feed(std::string_view bytes, std::string* out);
  // True once the body is complete (a closing body only completes at Finish).
  bool done() const { return state_ == State::kDone; }
  // The connection closed: fine when the body reads to the close or was complete.
  Status Finish();

 private:
  enum class State { kSize, kData, kDataEnd, kTrailer, kLength, kUntilClose, kDone };
  State state_;
  uint64_t remaining_ = 0;
  std::string line_;  // a chunk-size or trailer line in progress
};

// One server-sent event: a comment line (": text") or the data of an event (its "data:" lines
// joined by "\n").
struct SseEvent {
  bool comment = false;
  std::string data;
};

// Splits an SSE stream into events; fields other than data and comments are ignored.
class SseParser {
 public:
  void Feed(std::string_view bytes) { buffer_.append(bytes); }
  // The next complete event, if one has arrived.
  std::optional<SseEvent> Next();

 private:
  std::string buffer_;
  size_t pos_ = 0;
  std::string data_;
  bool has_data_ = false;
};

}  // namespace millipede::loadgen
