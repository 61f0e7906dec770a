// Request framing at the socket (RFC 9112): Transfer-Encoding is understood only as one chunked
// applied last; anything else is refused before the body is read, and the connection ends.
#include <gtest/gtest.h>

#include <string>

#include "tests/http/test_fixture.h"

namespace millipede::http_test {
namespace {

const std::string kBody = R"({"prompt":[1,2,3],"max_tokens":8})";

std::string Chunked(const std::string& body) {
  char size[32];
  std::snprintf(size, sizeof(size), "%zx", body.size());
  return std::string(size) + "\r\n" + body + "\r\n0\r\n\r\n";
}

// A POST /v1/completions with `headers` and `body` as they are; a second request follows on the
// same connection, which must never be answered after a refusal.
std::string Request(const std::string& headers, const std::string& body) {
  return "POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + headers + "\r\n" + body +
         "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
}

// The status line's code and the JSON body of the first reply in `raw`.
struct RawReply {
  int status = 0;
  Json body;
  int replies = 0;  // status lines in `raw`
};

RawReply Parse(const std::string& raw) {
  RawReply reply;
  for (size_t pos = raw.find("HTTP/1.1 "); pos != std::string::npos;
       pos = raw.find("HTTP/1.1 ", pos + 1)) {
    ++reply.replies;
  }
  if (raw.rfind("HTTP/1.1 ", 0) == 0) reply.status = std::stoi(raw.substr(9, 3));
  const size_t start = raw.find("\r\n\r\n");
  const size_t brace = start == std::string::npos ? start : raw.find('{', start);
  if (brace != std::string::npos) {
    auto parsed = ParseJson(raw.substr(brace, raw.rfind('}') + 1 - brace), "reply");
    if (parsed.ok()) reply.body = *parsed;
  }
  return reply;
}

TEST_F(HttpServerTest, ChunkedAloneIsRead) {
  const std::string raw = RawExchange(
      port_, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
             "Transfer-Encoding: chunked\r\n\r\n" +
                 Chunked(kBody));
  EXPECT_EQ(Parse(raw).status, 200) << raw;
  EXPECT_NE(raw.find("<3>"), std::string::npos) << raw;
  // Case, parameters and empty list elements do not matter.
  const std::string spaced = RawExchange(
      port_, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
             "Transfer-Encoding: , CHUNKED ;x=1\r\n\r\n" +
                 Chunked(kBody));
  EXPECT_EQ(Parse(spaced).status, 200) << spaced;
}

TEST_F(HttpServerTest, UnknownTransferCodingsAre501AndClose) {
  for (const std::string headers :
       {"Transfer-Encoding: xyz, chunked\r\n", "Transfer-Encoding: gzip, chunked\r\n",
        "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n"}) {
    SCOPED_TRACE(headers);
    const std::string raw = RawExchange(port_, Request(headers, Chunked(kBody)));
    RawReply reply = Parse(raw);
    EXPECT_EQ(reply.status, 501) << raw;
    EXPECT_EQ(reply.replies, 1) << raw;
    EXPECT_NE(raw.find("Connection: close"), std::string::npos) << raw;
    EXPECT_EQ(reply.body["error"]["code"], "unsupported_transfer_coding") << raw;
    const std::string message = reply.body["error"]["message"].get<std::string>();
    EXPECT_NE(message.find(headers.find("xyz") != std::string::npos ? "\"xyz\"" : "\"gzip\""),
              std::string::npos)
        << message;
  }
  EXPECT_TRUE(fake_.requests().empty());
}

TEST_F(HttpServerTest, UnframeableBodiesAre400AndClose) {
  const std::string length = "Content-Length: " + std::to_string(kBody.size()) + "\r\n";
  struct Case {
    std::string headers;
    std::string body;
    std::string says;
  };
  const Case cases[] = {
      // RFC 9112 section 6.3: the final coding must be chunked.
      {"Transfer-Encoding: gzip\r\n", kBody, "final transfer coding must be chunked"},
      {"Transfer-Encoding: chunked, gzip\r\n", Chunked(kBody), "final transfer coding"},
      {"Transfer-Encoding: chunked, chunked\r\n", Chunked(kBody), "only once"},
      {"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", Chunked(kBody),
       "Transfer-Encoding"},
      {"Transfer-Encoding: ,\r\n", kBody, "no transfer coding"},
      // An element without a coding name: a parser that stops at the ";" reads no body, and
      // the chunked bytes would become the connection's next request.
      {"Transfer-Encoding: ;x, chunked\r\n", Chunked(kBody), "not a coding name"},
      {"Transfer-Encoding: \t;x,chunked\r\n", Chunked(kBody), "not a coding name"},
      {"Transfer-Encoding: a b, chunked\r\n", Chunked(kBody), "not a coding name"},
      // Both lengths: a smuggling pattern, refused in either order.
      {"Transfer-Encoding: chunked\r\n" + length, Chunked(kBody), "Content-Length"},
      {length + "Transfer-Encoding: chunked\r\n", Chunked(kBody), "Content-Length"},
      {"Transfer-Encoding: gzip\r\n" + length, kBody, "Content-Length"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.headers);
    const std::string raw = RawExchange(port_, Request(c.headers, c.body));
    RawReply reply = Parse(raw);
    EXPECT_EQ(reply.status, 400) << raw;
    EXPECT_EQ(reply.replies, 1) << raw;
    EXPECT_NE(raw.find("Connection: close"), std::string::npos) << raw;
    EXPECT_EQ(reply.body["error"]["code"], "malformed_request") << raw;
    EXPECT_NE(reply.body["error"]["message"].get<std::string>().find(c.says), std::string::npos)
        << raw;
  }
  // Transfer-Encoding in HTTP/1.0 is faulty framing.
  const std::string old = RawExchange(port_, "POST /v1/completions HTTP/1.0\r\nHost: x\r\n"
                                             "Transfer-Encoding: chunked\r\n\r\n" +
                                                 Chunked(kBody));
  EXPECT_EQ(old.rfind("HTTP/1.0 400", 0), 0u) << old;
  EXPECT_TRUE(fake_.requests().empty());
}

}  // namespace
}  // namespace millipede::http_test
