// RunHttp against a scripted OpenAI-style server on loopback: streams, refusals, disconnects
// at the planned point and timeouts. (The real service is driven by the `service_loadgen`
// scenario.)
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "common/json_util.h"
#include "loadgen/runner.h"

namespace millipede::loadgen {
namespace {

// Answers POSTs by the request's max_tokens: 429 -> a queue-full error; 999 -> silence for two
// seconds; n -> a chunked SSE stream of a prefill comment, n one-token text chunks, a usage
// chunk and [DONE], 5 ms apart. Counts streams whose client went away before the end.
class FakeServer {
 public:
  FakeServer() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(listen(fd_, 64), 0);
    socklen_t len = sizeof(addr);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { Accept(); });
  }
  ~FakeServer() {
    stop_ = true;
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    acceptor_.join();
    std::lock_guard<std::mutex> lock(mutex_);
    for (std::thread& t : handlers_) t.join();
  }
  int port() const { return port_; }
  int disconnects() const { return disconnects_; }

 private:
  void Accept() {
    for (;;) {
      const int c = accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::lock_guard<std::mutex> lock(mutex_);
      handlers_.emplace_back([this, c] {
        Serve(c);
        close(c);
      });
    }
  }
  static std::string ReadRequestBody(int c) {
    std::string data;
    char buf[4096];
    size_t head_end;
    while ((head_end = data.find("\r\n\r\n")) == std::string::npos) {
      const ssize_t n = recv(c, buf, sizeof(buf), 0);
      if (n <= 0) return "";
      data.append(buf, static_cast<size_t>(n));
    }
    const size_t at = data.find("Content-Length: ") + 16;
    const size_t length = std::stoul(data.substr(at));
    while (data.size() < head_end + 4 + length) {
      const ssize_t n = recv(c, buf, sizeof(buf), 0);
      if (n <= 0) return "";
      data.append(buf, static_cast<size_t>(n));
    }
    return data.substr(head_end + 4, length);
  }
  static bool Send(int c, const std::string& bytes) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return send(c, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
  }
  static std::string Chunk(const std::string& event) {
    char size[16];
    std::snprintf(size, sizeof(size), "%zx\r\n", event.size());
    return size + event + "\r\n";
  }
  void Serve(int c) {
    StatusOr<Json> body = ParseJson(ReadRequestBody(c), "request");
    if (!body.ok()) return;
    const int64_t n = (*body)["max_tokens"].get<int64_t>();
    if (n == 429) {
      const std::string error = R"({"error":{"message":"queue full","code":"queue_full"}})";
      Send(c, "HTTP/1.1 429 Too Many Requests\r\nContent-Length: " + std::to_string(error.size()) +
                  "\r\n\r\n" + error);
      return;
    }
    if (n == 999) {
      for (int i = 0; i < 200 && !stop_; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;
    }
    std::vector<std::string> events = {": prefill 1/2\n\n"};
    for (int64_t i = 0; i < n; ++i) {
      events.push_back(R"(data: {"choices":[{"index":0,"text":"t","finish_reason":null}]})"
                       "\n\n");
    }
    events.push_back("data: {\"choices\":[],\"usage\":{\"completion_tokens\":" + std::to_string(n) +
                     "}}\n\n");
    events.push_back("data: [DONE]\n\n");
    bool alive = Send(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
    for (const std::string& e : events) alive = alive && Send(c, Chunk(e));
    alive = alive && Send(c, "0\r\n\r\n");
    if (!alive) ++disconnects_;
  }

  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> disconnects_{0};
  std::thread acceptor_;
  std::mutex mutex_;
  std::vector<std::thread> handlers_;
};

RunOptions Options() {
  RunOptions o;
  o.vocab_size = 50;
  o.model = "m";
  return o;
}

TEST(HttpRunnerTest, StreamsAndDisconnectsAtThePlannedPoint) {
  FakeServer server;
  WorkloadOptions w;
  w.num_requests = 12;
  w.lengths.prompt = {3, 30};
  w.lengths.output = {2, 8};
  w.cancel_fraction = 0.5;
  auto plan = PlanWorkload(w);
  ASSERT_TRUE(plan.ok());
  auto records = RunHttp(HttpTarget{"127.0.0.1", server.port(), "/"}, *plan, Options());
  ASSERT_TRUE(records.ok()) << records.status().ToString();
  ASSERT_EQ(records->size(), 12u);
  int cancelled = 0;
  for (size_t i = 0; i < records->size(); ++i) {
    const RequestRecord& r = (*records)[i];
    const PlannedRequest& p = (*plan)[i];
    EXPECT_EQ(r.index, p.index);
    EXPECT_GE(r.end_s, r.start_s);
    if (p.cancel_after_tokens) {
      ++cancelled;
      EXPECT_EQ(r.outcome, Outcome::kCancelled) << r.failure_message;
      // At 0 tokens the cancel comes with the prefill comment, before any text.
      EXPECT_EQ(static_cast<int64_t>(r.output_times_s.size()), *p.cancel_after_tokens);
    } else {
      EXPECT_EQ(r.outcome, Outcome::kOk) << r.failure_message;
      EXPECT_EQ(r.output_tokens, p.output_tokens);
      EXPECT_EQ(static_cast<int64_t>(r.output_times_s.size()), p.output_tokens);
    }
  }
  EXPECT_EQ(cancelled, 6);
  // Each handler sees its client gone within a send or two; give the last ones time to notice.
  for (int i = 0; i < 100 && server.disconnects() < cancelled; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(server.disconnects(), cancelled);
}

TEST(HttpRunnerTest, RefusalsAndTimeoutsAreFailures) {
  FakeServer server;
  std::vector<PlannedRequest> plan = {
      {0, 0, 5, 429, false, {}}, {1, 0, 5, 999, false, {}}, {2, 0.05, 5, 3, false, {}}};
  RunOptions o = Options();
  o.request_timeout_s = 0.3;
  auto records = RunHttp(HttpTarget{"127.0.0.1", server.port(), "/"}, plan, o);
  ASSERT_TRUE(records.ok()) << records.status().ToString();
  EXPECT_EQ((*records)[0].outcome, Outcome::kFailed);
  EXPECT_EQ((*records)[0].failure_code, "http_429_queue_full");
  EXPECT_EQ((*records)[0].failure_message, "queue full");
  EXPECT_EQ((*records)[1].outcome, Outcome::kFailed);
  EXPECT_EQ((*records)[1].failure_code, "timeout");
  EXPECT_EQ((*records)[2].outcome, Outcome::kOk);
  EXPECT_GE((*records)[2].start_s, 0.05);
}

TEST(HttpRunnerTest, NoServerIsAFailurePerRequest) {
  int port = 0;
  {
    FakeServer closed;  // a port that was just free
    port = closed.port();
  }
  std::vector<PlannedRequest> plan = {{0, 0, 5, 3, false, {}}};
  auto records = RunHttp(HttpTarget{"127.0.0.1", port, "/"}, plan, Options());
  ASSERT_TRUE(records.ok());
  EXPECT_EQ((*records)[0].outcome, Outcome::kFailed);
  EXPECT_EQ((*records)[0].failure_code, "IO_ERROR");
}

TEST(HttpRunnerTest, CancelPoints) {
  PlannedRequest p;
  EXPECT_FALSE(CancelDue(p, true, 5));
  p.cancel_after_tokens = 0;
  EXPECT_FALSE(CancelDue(p, false, 0));
  EXPECT_TRUE(CancelDue(p, true, 0));
  EXPECT_TRUE(CancelDue(p, false, 1));
  p.cancel_after_tokens = 3;
  EXPECT_FALSE(CancelDue(p, true, 2));
  EXPECT_TRUE(CancelDue(p, true, 3));
}

// The model and vocabulary a run without --model / --vocab-size takes from GET /v1/models.
TEST(HttpRunnerTest, ModelFromTheModelList) {
  const std::string body =
      R"({"object": "list", "data": [{"id": "a", "object": "model", "vocab_size": 32000},
                                      {"id": "b", "object": "model", "max_model_len": 8}]})";
  StatusOr<ListedModel> first = ModelFromList(body, "");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->id, "a");
  EXPECT_EQ(first->vocab_size, 32000);
  // A server that does not report the vocabulary (another OpenAI-compatible server): 0, and
  // the caller asks for --vocab-size.
  StatusOr<ListedModel> b = ModelFromList(body, "b");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->id, "b");
  EXPECT_EQ(b->vocab_size, 0);

  auto refused = [](const std::string& text, const std::string& wanted, const std::string& says) {
    StatusOr<ListedModel> m = ModelFromList(text, wanted);
    ASSERT_FALSE(m.ok()) << text;
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(m.status().message().find(says), std::string::npos) << m.status().ToString();
  };
  refused(body, "c", "does not list the model \"c\"");
  // One listed model: another name the server answers to (its own id) takes its vocabulary.
  StatusOr<ListedModel> alias =
      ModelFromList(R"({"data": [{"id": "served", "vocab_size": 49152}]})", "own-id");
  ASSERT_TRUE(alias.ok()) << alias.status().ToString();
  EXPECT_EQ(alias->vocab_size, 49152);
  refused(R"({"data": []})", "", "lists no model");
  refused(R"([1])", "", "no JSON object");
  refused(R"({"data": [{"object": "model"}]})", "", "no model with an id");
  refused(R"({"data": [{"id": "a", "vocab_size": -3}]})", "", "vocab_size -3");
  refused(R"({"data": [{"id": "a", "vocab_size": "many"}]})", "", "--vocab-size");
  refused("not json", "", "GET /v1/models");
}

}  // namespace
}  // namespace millipede::loadgen
