#include "loadgen/http_wire.h"

#include <gtest/gtest.h>

namespace millipede::loadgen {
namespace {

TEST(HttpWireTest, Targets) {
  auto t = ParseHttpTarget("127.0.0.1:8000");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->host, "127.0.0.1");
  EXPECT_EQ(t->port, 8000);
  EXPECT_EQ(t->path, "/");
  t = ParseHttpTarget("http://localhost:9400/metrics");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->host, "localhost");
  EXPECT_EQ(t->path, "/metrics");
  t = ParseHttpTarget("http://example");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->port, 80);
  for (const char* bad : {"localhost", "https://x:1", "x:0", "x:70000", ":80", "x:port"}) {
    EXPECT_FALSE(ParseHttpTarget(bad).ok()) << bad;
  }
}

TEST(HttpWireTest, ResponseHead) {
  auto head = ParseResponseHead(
      "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
      "Content-Length:  12 \r\nX-Odd:a:b");
  ASSERT_TRUE(head.ok()) << head.status().ToString();
  EXPECT_EQ(head->status, 429);
  EXPECT_EQ(head->headers.at("content-type"), "application/json");
  EXPECT_EQ(head->headers.at("content-length"), "12");
  EXPECT_EQ(head->headers.at("x-odd"), "a:b");
  EXPECT_FALSE(ParseResponseHead("ICY 200 OK").ok());
  EXPECT_FALSE(ParseResponseHead("HTTP/1.1 200 OK\r\nno colon").ok());
}

HttpResponseHead Head(const char* name, const char* value) {
  HttpResponseHead h;
  h.status = 200;
  h.headers[name] = value;
  return h;
}

// Feeds `wire` to a decoder in pieces of `step` bytes.
std::string Decode(const HttpResponseHead& head, const std::string& wire, size_t step, bool* done) {
  BodyDecoder d(head);
  std::string out;
  for (size_t i = 0; i < wire.size(); i += step) {
    EXPECT_TRUE(d.Feed(std::string_view(wire).substr(i, step), &out).ok());
  }
  *done = d.done();
  return out;
}

TEST(HttpWireTest, ChunkedBodiesInAnySplit) {
  const std::string wire =
      "5\r\nhello\r\n1A;ext=1\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nTrailer: x\r\n\r\nEXTRA";
  for (size_t step = 1; step <= wire.size(); ++step) {
    bool done = false;
    EXPECT_EQ(Decode(Head("transfer-encoding", "chunked"), wire, step, &done),
              "helloabcdefghijklmnopqrstuvwxyz")
        << step;
    EXPECT_TRUE(done);
  }
  BodyDecoder bad(Head("transfer-encoding", "chunked"));
  std::string out;
  EXPECT_FALSE(bad.Feed("zz\r\n", &out).ok());
  BodyDecoder overlong(Head("transfer-encoding", "chunked"));
  EXPECT_FALSE(overlong.Feed("2\r\nabc\r\n", &out).ok());
  BodyDecoder cut(Head("transfer-encoding", "chunked"));
  EXPECT_TRUE(cut.Feed("5\r\nhel", &out).ok());
  EXPECT_FALSE(cut.Finish().ok());
}

TEST(HttpWireTest, LengthAndCloseDelimitedBodies) {
  bool done = false;
  EXPECT_EQ(Decode(Head("content-length", "4"), "abcdef", 3, &done), "abcd");
  EXPECT_TRUE(done);
  EXPECT_EQ(Decode(Head("content-length", "0"), "", 1, &done), "");
  EXPECT_TRUE(done);
  EXPECT_EQ(Decode(Head("server", "x"), "all of it", 2, &done), "all of it");
  EXPECT_FALSE(done);
  BodyDecoder until_close(Head("server", "x"));
  EXPECT_TRUE(until_close.Finish().ok());
  BodyDecoder short_body(Head("content-length", "10"));
  std::string out;
  EXPECT_TRUE(short_body.Feed("abc", &out).ok());
  EXPECT_FALSE(short_body.Finish().ok());
}

TEST(HttpWireTest, ServerSentEvents) {
  const std::string stream =
      ": prefill 10/100\n\ndata: {\"a\":1}\n\nevent: x\r\ndata: line1\r\ndata: line2\r\n\r\n"
      "data:[DONE]\n\n";
  for (size_t step = 1; step <= stream.size(); ++step) {
    SseParser p;
    std::vector<SseEvent> events;
    for (size_t i = 0; i < stream.size(); i += step) {
      p.Feed(std::string_view(stream).substr(i, step));
      while (auto e = p.Next()) events.push_back(*e);
    }
    ASSERT_EQ(events.size(), 4u) << step;
    EXPECT_TRUE(events[0].comment);
    EXPECT_EQ(events[0].data, "prefill 10/100");
    EXPECT_FALSE(events[1].comment);
    EXPECT_EQ(events[1].data, "{\"a\":1}");
    EXPECT_EQ(events[2].data, "line1\nline2");
    EXPECT_EQ(events[3].data, "[DONE]");
  }
}

}  // namespace
}  // namespace millipede::loadgen
