#include "loadgen/http_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace millipede::loadgen {
namespace {

std::string Errno(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// Milliseconds until `deadline` for poll(): -1 = none, at least 0.
int PollTimeoutMs(Clock::time_point deadline) {
  if (deadline == Clock::time_point::max()) return -1;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, 1 << 30));
}

// A non-blocking socket connected to `ai`, or -1 with errno set.
int StartConnect(const addrinfo* ai) {
  const int fd =
      socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
  if (fd < 0) return -1;
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 || errno == EINPROGRESS) return fd;
  const int saved = errno;
  close(fd);
  errno = saved;
  return -1;
}

}  // namespace

Clock::time_point DeadlineAfter(double seconds) {
  if (seconds <= 0) return Clock::time_point::max();
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

StatusOr<std::unique_ptr<HttpConnection>> HttpConnection::Open(const std::string& host, int port,
                                                               Clock::time_point deadline) {
  const std::string where = host + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &list);
  if (rc != 0) return IoError("cannot resolve " + where + ": " + gai_strerror(rc));
  std::string last_error = "no address";
  for (const addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    const int fd = StartConnect(ai);
    if (fd < 0) {
      last_error = Errno("connect");
      continue;
    }
    std::unique_ptr<HttpConnection> c(new HttpConnection(fd, deadline));
    Status ready = c->Wait(POLLOUT);
    int error = 0;
    socklen_t len = sizeof(error);
    if (ready.ok() && getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) == 0 && error == 0) {
      freeaddrinfo(list);
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      return c;
    }
    last_error = ready.ok() ? std::string("connect: ") + std::strerror(error) : ready.message();
  }
  freeaddrinfo(list);
  return IoError("cannot connect to " + where + ": " + last_error);
}

HttpConnection::~HttpConnection() { Close(); }

void HttpConnection::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

Status HttpConnection::Wait(short events) {
  MP_ASSERT(fd_ >= 0, "the connection is closed");
  pollfd p{fd_, events, 0};
  for (;;) {
    const int n = poll(&p, 1, PollTimeoutMs(deadline_));
    if (n > 0) return OkStatus();
    if (n == 0) {
      timed_out_ = true;
      return IoError("timed out");
    }
    if (errno != EINTR) return IoError(Errno("poll"));
  }
}

Status HttpConnection::SendRequest(const std::string& method, const HttpTarget& target,
                                   const std::string& path, std::string_view body,
                                   const std::string& api_key) {
  std::string head = method + " " + path + " HTTP/1.1\r\nHost: " + target.host + ":" +
                     std::to_string(target.port) + "\r\nConnection: close\r\nAccept: */*\r\n";
  if (!api_key.empty()) head += "Authorization: Bearer " + api_key + "\r\n";
  if (!body.empty() || method == "POST") {
    head +=
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  head += "\r\n";
  for (std::string_view part : {std::string_view(head), body}) {
    while (!part.empty()) {
      MP_RETURN_IF_ERROR(Wait(POLLOUT));
      const ssize_t n = send(fd_, part.data(), part.size(), MSG_NOSIGNAL);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n < 0) return IoError(Errno("send"));
      part.remove_prefix(static_cast<size_t>(n));
    }
  }
  return OkStatus();
}

StatusOr<size_t> HttpConnection::Receive(char* chunk, size_t size) {
  for (;;) {
    MP_RETURN_IF_ERROR(Wait(POLLIN));
    const ssize_t n = recv(fd_, chunk, size, 0);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno != EAGAIN && errno != EINTR) return IoError(Errno("recv"));
  }
}

StatusOr<HttpResponseHead> HttpConnection::ReadHead() {
  char chunk[16384];
  for (;;) {
    const size_t end = pending_.find("\r\n\r\n");
    if (end != std::string::npos) {
      MP_ASSIGN_OR_RETURN(HttpResponseHead head, ParseResponseHead(pending_.substr(0, end)));
      pending_.erase(0, end + 4);
      decoder_ = std::make_unique<BodyDecoder>(head);
      return head;
    }
    MP_REQUIRE(pending_.size() < (1u << 20), "the response head exceeds 1 MiB");
    MP_ASSIGN_OR_RETURN(size_t n, Receive(chunk, sizeof(chunk)));
    if (n == 0) return IoError("the connection closed before the response head");
    pending_.append(chunk, n);
  }
}

StatusOr<bool> HttpConnection::ReadBody(std::string* out) {
  MP_ASSERT(decoder_ != nullptr, "ReadBody before ReadHead");
  if (!pending_.empty()) {
    MP_RETURN_IF_ERROR(decoder_->Feed(pending_, out));
    pending_.clear();
    return !decoder_->done();
  }
  if (decoder_->done()) return false;
  char chunk[16384];
  MP_ASSIGN_OR_RETURN(size_t n, Receive(chunk, sizeof(chunk)));
  if (n == 0) {
    MP_RETURN_IF_ERROR(decoder_->Finish());
    return false;
  }
  MP_RETURN_IF_ERROR(decoder_->Feed(std::string_view(chunk, n), out));
  return !decoder_->done();
}

StatusOr<HttpResult> HttpFetch(const HttpTarget& target, const std::string& method,
                               const std::string& path, std::string_view body,
                               const std::string& api_key, double timeout_s) {
  MP_ASSIGN_OR_RETURN(std::unique_ptr<HttpConnection> c,
                      HttpConnection::Open(target.host, target.port, DeadlineAfter(timeout_s)));
  MP_RETURN_IF_ERROR(c->SendRequest(method, target, path, body, api_key));
  HttpResult result;
  MP_ASSIGN_OR_RETURN(result.head, c->ReadHead());
  for (;;) {
    MP_ASSIGN_OR_RETURN(bool more, c->ReadBody(&result.body));
    if (!more) break;
  }
  return result;
}

}  // namespace millipede::loadgen
