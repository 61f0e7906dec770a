#include "http/http_session.h"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "common/json_util.h"
#include "http/http_route.h"
#include "http/request_framing.h"

namespace millipede {

namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

// Seconds a client should wait before it retries a 429 or 503 (the Retry-After header).
constexpr int kRetryAfterS = 1;

// Bytes of a pipelined next request held while a job runs; past this the connection stops
// reading until the answer is out.
constexpr size_t kMaxReadAhead = 1 << 20;
// Stream output a client has not read yet; past this it is treated as gone (its job is
// cancelled).
constexpr size_t kMaxQueuedOutput = 16 << 20;

const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";

std::chrono::steady_clock::duration Seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(s));
}

// The request_errors_total reason of a refusal (ServiceMetrics::RequestError).
const char* RefusalReason(const ApiError& error) {
  switch (error.http_status) {
    case 401:
      return "unauthorized";
    case 404:
      return "not_found";
    case 405:
      return "method_not_allowed";
    case 413:
      return "too_large";
    case 415:
      return "unsupported_media_type";
    case 501:
      return "unsupported";
    default:
      break;
  }
  if (error.code == "unsupported_parameter") return "unsupported";
  if (error.code == "context_length_exceeded") return "too_long";
  return "invalid";
}

}  // namespace

HttpSession::HttpSession(tcp::socket&& socket, std::shared_ptr<ServerContext> ctx)
    : stream_(std::move(socket)), ctx_(std::move(ctx)), idle_timer_(stream_.get_executor()) {}

HttpSession::~HttpSession() { CancelJobs(); }

void HttpSession::Start() {
  net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->ReadHeader(); });
}

void HttpSession::ReadHeader() {
  phase_ = Phase::kReading;
  parser_.emplace();
  parser_->body_limit(static_cast<uint64_t>(ctx_->options.max_body_bytes));
  stream_.expires_after(Seconds(ctx_->options.idle_timeout_s));
  http::async_read_header(
      stream_, buffer_, *parser_,
      [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
}

void HttpSession::OnHeader(beast::error_code ec) {
  if (closed_) return;
  if (!ec) {
    auto& req = parser_->get();
    version_ = req.version();
    // A body that cannot be framed safely is not read: the answer ends the connection.
    std::optional<ApiError> refusal = CheckRequestFraming(req);
    // What was accepted as chunked must be what the parser reads as chunked.
    if (!refusal && req.find(http::field::transfer_encoding) != req.end() &&
        !parser_->chunked()) {
      refusal = ApiError{400,
                         "malformed HTTP request: Transfer-Encoding is not readable as chunked",
                         "invalid_request_error", "", "malformed_request"};
    }
    if (refusal) {
      stream_.expires_never();
      keep_alive_ = false;
      return Refuse(*refusal);
    }
    if (beast::iequals(req[http::field::expect], "100-continue")) {
      net::async_write(stream_, net::buffer(kContinue, sizeof(kContinue) - 1),
                       [self = shared_from_this()](beast::error_code write_ec, size_t) {
                         if (write_ec) return self->Close();
                         http::async_read(
                             self->stream_, self->buffer_, *self->parser_,
                             [self](beast::error_code read_ec, size_t) { self->OnBody(read_ec); });
                       });
      return;
    }
    http::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code read_ec, size_t) { self->OnBody(read_ec); });
    return;
  }
  OnBody(ec);
}

void HttpSession::OnBody(beast::error_code ec) {
  if (closed_) return;
  stream_.expires_never();
  if (ec == http::error::body_limit) {
    keep_alive_ = false;
    return Refuse(ApiError{413,
                           "request body exceeds the limit of " +
                               std::to_string(ctx_->options.max_body_bytes) + " bytes",
                           "invalid_request_error", "", "request_too_large"});
  }
  if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
      ec == net::error::connection_reset || ec == net::error::eof ||
      ec == net::error::operation_aborted) {
    return Close();
  }
  if (ec) {
    keep_alive_ = false;
    // Beast's own words for this one are only "bad transfer encoding".
    const std::string what = ec == http::error::bad_transfer_encoding
                                 ? "Transfer-Encoding repeats chunked or comes with Content-Length"
                                 : ec.message();
    return Refuse(ApiError{400, "malformed HTTP request: " + what, "invalid_request_error", "",
                           "malformed_request"});
  }
  Route();
}

void HttpSession::Route() {
  // No request may end the process: an unexpected exception in its handling is a 500 for it.
  try {
    RouteChecked();
  } catch (const std::exception& e) {
    const uint64_t number = ctx_->next_request.fetch_add(1);
    std::cerr << "millipede-coordinator: HTTP request " + std::to_string(number) +
                     ": internal error: " + e.what() + "\n";
    ctx_->service.CountRefusal("internal");
    keep_alive_ = false;
    if (!stream_started_ && !closed_)
      return Refuse(ApiError{500, "internal error (request " + std::to_string(number) + ")",
                             "server_error", "", "internal_error"});
    Close();
  }
}

void HttpSession::RouteChecked() {
  auto& req = parser_->get();
  keep_alive_ = req.keep_alive();
  RoutedRequest routed = RouteHttpRequest(req, ctx_->options.api_key);
  if (!routed.route) return Refuse(routed.refusal, routed.refusal_headers);
  switch (*routed.route) {
    case HttpRoute::kHealth:
      return HandleHealth();
    case HttpRoute::kReady:
      return HandleReady();
    case HttpRoute::kModels:
      return HandleModels(routed.path);
    case HttpRoute::kCompletions:
      return StartJob(Endpoint::kCompletions);
    case HttpRoute::kChatCompletions:
      return StartJob(Endpoint::kChatCompletions);
    case HttpRoute::kTokenize:
      return StartTokenize(/*detokenize=*/false);
    case HttpRoute::kDetokenize:
      return StartTokenize(/*detokenize=*/true);
    case HttpRoute::kCache:
      return HandleCache(routed.path);
  }
}

void HttpSession::Watch() {
  if (watching_ || closed_ || buffer_.size() >= kMaxReadAhead) return;
  watching_ = true;
  stream_.expires_never();
  stream_.async_read_some(buffer_.prepare(4096),
                          [self = shared_from_this()](beast::error_code ec, size_t bytes) {
                            self->OnWatch(ec, bytes);
                          });
}

void HttpSession::OnWatch(beast::error_code ec, size_t bytes) {
  watching_ = false;
  if (closed_) return;
  if (ec == net::error::operation_aborted && resume_reading_) {
    resume_reading_ = false;
    return ReadHeader();
  }
  if (ec) return PeerGone();
  buffer_.commit(bytes);
  if (awaiting_request_ || resume_reading_) {
    awaiting_request_ = false;
    resume_reading_ = false;
    idle_timer_.cancel();
    return ReadHeader();
  }
  if (phase_ != Phase::kIdle && phase_ != Phase::kReading) Watch();
}

void HttpSession::SendJson(unsigned status, const std::string& body,
                           const std::vector<std::pair<std::string, std::string>>& headers) {
  http::response<http::string_body> res{static_cast<http::status>(status), version_};
  res.set(http::field::server, "millipede");
  res.set(http::field::content_type, "application/json");
  for (const auto& [name, value] : headers) res.set(name, value);
  res.keep_alive(keep_alive_);
  res.body() = body;
  res.prepare_payload();
  std::ostringstream out;
  out << res;
  Enqueue(out.str(), /*ends_response=*/true);
}

void HttpSession::SendError(const ApiError& error,
                            std::vector<std::pair<std::string, std::string>> headers) {
  // A full queue, a drain, a silent or failed worker: the client should come back (to this
  // service once a supervisor restarted it, or to another replica).
  if (error.http_status == 429 || error.http_status == 503) {
    const bool given = std::any_of(headers.begin(), headers.end(),
                                   [](const auto& h) { return h.first == "Retry-After"; });
    if (!given) headers.emplace_back("Retry-After", std::to_string(kRetryAfterS));
  }
  SendJson(static_cast<unsigned>(error.http_status), ApiErrorBody(error), headers);
}

void HttpSession::Refuse(const ApiError& error,
                         const std::vector<std::pair<std::string, std::string>>& headers) {
  ctx_->service.CountRefusal(RefusalReason(error));
  SendError(error, headers);
}

void HttpSession::BeginStream() {
  stream_started_ = true;
  std::string head = version_ >= 11 ? "HTTP/1.1 200 OK\r\n" : "HTTP/1.0 200 OK\r\n";
  head +=
      "Server: millipede\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
      "X-Accel-Buffering: no\r\n";
  if (version_ >= 11) {
    head += "Transfer-Encoding: chunked\r\n";
    head += keep_alive_ ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  } else {
    keep_alive_ = false;  // HTTP/1.0 has no chunking: the end of the stream is the close
    head += "Connection: close\r\n";
  }
  Enqueue(head + "\r\n", false);
}

void HttpSession::StreamWrite(const std::string& event) {
  if (version_ < 11) return Enqueue(event, false);
  char size[32];
  std::snprintf(size, sizeof(size), "%zx\r\n", event.size());
  Enqueue(size + event + "\r\n", false);
}

void HttpSession::EndStream() { Enqueue(version_ >= 11 ? "0\r\n\r\n" : "", true); }

void HttpSession::Enqueue(std::string bytes, bool ends_response) {
  if (closed_) return;
  out_bytes_ += bytes.size();
  out_.push_back(std::move(bytes));
  if (ends_response) response_queued_ = true;
  // Only a stream can pile up output faster than the client reads it.
  if (stream_started_ && out_bytes_ > kMaxQueuedOutput) return PeerGone();
  if (!writing_) DoWrite();
}

void HttpSession::DoWrite() {
  writing_ = true;
  net::async_write(
      stream_, net::buffer(out_.front()),
      [self = shared_from_this()](beast::error_code ec, size_t) { self->OnWrite(ec); });
}

void HttpSession::OnWrite(beast::error_code ec) {
  writing_ = false;
  if (closed_) return;
  if (ec) return PeerGone();
  out_bytes_ -= out_.front().size();
  out_.pop_front();
  if (!out_.empty()) return DoWrite();
  if (response_queued_) {
    response_queued_ = false;
    AfterResponse();
  }
}

void HttpSession::AfterResponse() {
  phase_ = Phase::kIdle;
  choices_.clear();
  request_done_ = false;
  stream_started_ = false;
  early_events_.clear();
  if (!keep_alive_) return Close();
  if (watching_ && buffer_.size() > 0) {
    // The next request arrived while this one was answered: stop the pending read (nothing
    // else is pending now) and parse what is buffered.
    resume_reading_ = true;
    beast::error_code ec;
    stream_.socket().cancel(ec);
    return;
  }
  if (watching_) {
    // The pending read starts the next request; a quiet connection is closed.
    awaiting_request_ = true;
    idle_timer_.expires_after(Seconds(ctx_->options.idle_timeout_s));
    idle_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (!ec && self->awaiting_request_) self->Close();
    });
    return;
  }
  ReadHeader();
}

void HttpSession::PeerGone() {
  CancelJobs();
  Close();
}

void HttpSession::Close() {
  if (closed_) return;
  closed_ = true;
  awaiting_request_ = false;
  idle_timer_.cancel();
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_.socket().close(ec);
}

}  // namespace millipede
