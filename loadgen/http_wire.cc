#include "loadgen/http_wire.h"

#include <algorithm>
#include <cctype>

#include "common/flags.h"

namespace millipede::loadgen {
namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// Takes one line (without its "\n" or "\r\n") off the front of `text`; nullopt when none is
// complete.
std::optional<std::string_view> TakeLine(std::string_view& text) {
  const size_t end = text.find('\n');
  if (end == std::string_view::npos) return std::nullopt;
  std::string_view line = text.substr(0, end);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  text.remove_prefix(end + 1);
  return line;
}

StatusOr<uint64_t> ParseChunkSize(std::string_view line) {
  line = Trim(line.substr(0, line.find(';')));  // chunk extensions are ignored
  MP_REQUIRE(!line.empty() && line.size() <= 15, "bad chunk size line \"", line, "\"");
  uint64_t size = 0;
  for (char c : line) {
    const int digit = std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
                      : (c >= 'a' && c <= 'f')                    ? c - 'a' + 10
                      : (c >= 'A' && c <= 'F')                    ? c - 'A' + 10
                                                                  : -1;
    MP_REQUIRE(digit >= 0, "bad chunk size line \"", line, "\"");
    size = size * 16 + static_cast<uint64_t>(digit);
  }
  return size;
}

}  // namespace

StatusOr<HttpTarget> ParseHttpTarget(const std::string& text) {
  std::string rest = text;
  HttpTarget t;
  const std::string scheme = "http://";
  const bool has_scheme = rest.compare(0, scheme.size(), scheme) == 0;
  if (has_scheme) rest = rest.substr(scheme.size());
  MP_REQUIRE(rest.find("://") == std::string::npos, "only http:// addresses are supported, got \"",
             text, "\"");
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    t.path = rest.substr(slash);
    rest = rest.substr(0, slash);
  }
  const size_t colon = rest.rfind(':');
  MP_REQUIRE(colon != std::string::npos || has_scheme, "give HOST:PORT, got \"", text, "\"");
  t.host = rest.substr(0, colon);
  if (colon != std::string::npos) {
    MP_ASSIGN_OR_RETURN(int64_t port, ParseInt64(rest.substr(colon + 1), "port"));
    MP_REQUIRE(port > 0 && port < 65536, "port out of range in \"", text, "\"");
    t.port = static_cast<int>(port);
  }
  MP_REQUIRE(!t.host.empty(), "no host in \"", text, "\"");
  return t;
}

StatusOr<HttpResponseHead> ParseResponseHead(std::string_view head) {
  std::optional<std::string_view> status_line = TakeLine(head);
  if (!status_line) {
    status_line = head;
    head = {};
  }
  // "HTTP/1.1 200 OK"
  MP_REQUIRE(status_line->substr(0, 5) == "HTTP/" && status_line->size() >= 12,
             "bad HTTP status line \"", *status_line, "\"");
  HttpResponseHead out;
  MP_ASSIGN_OR_RETURN(int64_t status,
                      ParseInt64(std::string(status_line->substr(9, 3)), "HTTP status"));
  out.status = static_cast<int>(status);
  while (auto line = TakeLine(head)) {
    if (line->empty()) break;
    const size_t colon = line->find(':');
    MP_REQUIRE(colon != std::string_view::npos, "bad HTTP header line \"", *line, "\"");
    out.headers[Lower(std::string(Trim(line->substr(0, colon))))] =
        std::string(Trim(line->substr(colon + 1)));
  }
  if (!head.empty()) {
    const size_t colon = head.find(':');
    MP_REQUIRE(colon != std::string_view::npos, "bad HTTP header line \"", head, "\"");
    out.headers[Lower(std::string(Trim(head.substr(0, colon))))] =
        std::string(Trim(head.substr(colon + 1)));
  }
  return out;
}

BodyDecoder::BodyDecoder(const HttpResponseHead& head) : state_(State::kUntilClose) {
  auto te = head.headers.find("transfer-encoding");
  auto length = head.headers.find("content-length");
  if (te != head.headers.end() && Lower(te->second).find("chunked") != std::string::npos) {
    state_ = State::kSize;
  } else if (length != head.headers.end()) {
    StatusOr<int64_t> n = ParseInt64(length->second, "Content-Length");
    // A malformed length reads to the close, as if it were absent.
    if (n.ok() && *n >= 0) {
      remaining_ = static_cast<uint64_t>(*n);
      state_ = remaining_ == 0 ? State::kDone : State::kLength;
    }
  }
}

Status BodyDecoder::Feed(std::string_view bytes, std::string* out) {
  while (!bytes.empty() && state_ != State::kDone) {
    switch (state_) {
      case State::kUntilClose:
        out->append(bytes);
        return OkStatus();
      case State::kLength:
      case State::kData: {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(remaining_, bytes.size()));
        out->append(bytes.substr(0, n));
        bytes.remove_prefix(n);
        remaining_ -= n;
        if (remaining_ == 0) state_ = state_ == State::kLength ? State::kDone : State::kDataEnd;
        break;
      }
      case State::kSize:
      case State::kDataEnd:
      case State::kTrailer: {
        const size_t end = bytes.find('\n');
        line_.append(bytes.substr(0, end));
        if (end == std::string_view::npos) return OkStatus();
        bytes.remove_prefix(end + 1);
        std::string line = std::move(line_);
        line_.clear();
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (state_ == State::kDataEnd) {
          MP_REQUIRE(line.empty(), "chunk data longer than its size");
          state_ = State::kSize;
        } else if (state_ == State::kTrailer) {
          if (line.empty()) state_ = State::kDone;
        } else {
          MP_ASSIGN_OR_RETURN(remaining_, ParseChunkSize(line));
          state_ = remaining_ == 0 ? State::kTrailer : State::kData;
        }
        break;
      }
      case State::kDone:
        break;
    }
  }
  return OkStatus();
}

Status BodyDecoder::Finish() {
  if (state_ == State::kUntilClose) state_ = State::kDone;
  if (state_ != State::kDone) return IoError("the connection closed before the body's end");
  return OkStatus();
}

std::optional<SseEvent> SseParser::Next() {
  std::string_view rest = std::string_view(buffer_).substr(pos_);
  while (auto line = TakeLine(rest)) {
    pos_ = buffer_.size() - rest.size();
    if (line->empty()) {
      if (!has_data_) continue;
      SseEvent event{false, std::move(data_)};
      data_.clear();
      has_data_ = false;
      return event;
    }
    if (line->front() == ':') return SseEvent{true, std::string(Trim(line->substr(1)))};
    const size_t colon = line->find(':');
    if (line->substr(0, colon) != "data") continue;
    std::string_view value = colon == std::string_view::npos ? "" : line->substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    if (has_data_) data_ += '\n';
    data_.append(value);
    has_data_ = true;
  }
  // Drop what was consumed once it is most of the buffer, so long streams stay small.
  if (pos_ > 4096 && pos_ * 2 > buffer_.size()) {
    buffer_.erase(0, pos_);
    pos_ = 0;
  }
  return std::nullopt;
}

}  // namespace millipede::loadgen
