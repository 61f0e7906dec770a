// HTTP framing seeds: request lines, headers (Content-Length, Transfer-Encoding, Content-Type,
// Authorization, Expect, Connection), chunked bodies and pipelined requests.
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_service.h"
#include "tests/fuzz/seed_corpus.h"

namespace millipede::fuzz {
namespace {

const char kBody[] = R"({"prompt":"Hello","max_tokens":2})";

std::string Auth() { return std::string("Authorization: Bearer ") + kApiKey + "\r\n"; }

// A request with the given first line and headers, and `body` after the blank line as it is.
std::string Raw(const std::string& start, const std::string& headers, const std::string& body) {
  return start + "\r\nHost: fuzz\r\n" + headers + "\r\n" + body;
}

std::string Chunked(const std::string& chunks, const std::string& extra = "") {
  return Raw("POST /v1/completions HTTP/1.1",
             Auth() + "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n" + extra,
             chunks);
}

std::string Hex(size_t n) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  do {
    out.insert(out.begin(), kDigits[n % 16]);
    n /= 16;
  } while (n != 0);
  return out;
}

// `body` in chunks of `size` bytes, then the last chunk.
std::string InChunks(const std::string& body, size_t size) {
  std::string out;
  for (size_t i = 0; i < body.size(); i += size) {
    std::string piece = body.substr(i, size);
    out += Hex(piece.size()) + "\r\n" + piece + "\r\n";
  }
  return out + "0\r\n\r\n";
}

std::vector<std::string> ChunkedSeeds() {
  const std::string body(kBody);
  const std::string n = Hex(body.size());
  std::vector<std::string> seeds = {
      Chunked(InChunks(body, 1)),
      Chunked(InChunks(body, 7)),
      Chunked(InChunks(body, 4096)),
      Chunked(n + ";ext=1;q=\"a b\"\r\n" + body + "\r\n0\r\n\r\n"),
      Chunked(n + "\r\n" + body + "\r\n0\r\nX-Trailer: 1\r\nY: 2\r\n\r\n"),
      Chunked(n + "\r\n" + body + "\r\n0\r\n"),
      Chunked(n + "\r\n" + body + "\r\n"),
      Chunked(n + "\r\n" + body),
      Chunked(n + "\r\n" + body.substr(0, 5)),
      Chunked("ffffffffffffffffffff\r\n" + body + "\r\n0\r\n\r\n"),
      Chunked("fffffffffffffff\r\n" + body + "\r\n0\r\n\r\n"),
      Chunked("7fffffffffffffff\r\n" + body),
      Chunked("-1\r\n" + body + "\r\n0\r\n\r\n"),
      Chunked("0x" + n + "\r\n" + body + "\r\n0\r\n\r\n"),
      Chunked(" " + n + "\r\n" + body + "\r\n0\r\n\r\n"),
      Chunked(n + " \r\n" + body + "\r\n0\r\n\r\n"),
      Chunked(n + "\n" + body + "\n0\n\n"),
      Chunked("\r\n" + body),
      Chunked("100001\r\n" + std::string(0x100001, 'a') + "\r\n0\r\n\r\n"),
      Chunked(InChunks(body, 5), "Content-Length: 5\r\n"),
      Chunked(InChunks(body, 5), "Transfer-Encoding: chunked\r\n"),
      Raw("POST /v1/completions HTTP/1.1", Auth() + "Transfer-Encoding: gzip, chunked\r\n",
          InChunks(body, 9)),
      Raw("POST /v1/completions HTTP/1.1", Auth() + "Transfer-Encoding: chunked, gzip\r\n",
          InChunks(body, 9)),
      Raw("POST /v1/completions HTTP/1.1", Auth() + "Transfer-Encoding: identity\r\n", body),
      Raw("POST /v1/completions HTTP/1.0", Auth() + "Transfer-Encoding: chunked\r\n",
          InChunks(body, 9)),
      // RFC 9112: unknown codings (501), chunked not last or twice, codings over several lines,
      // and Transfer-Encoding with Content-Length in either order (400, closed).
      Raw("POST /v1/completions HTTP/1.1", Auth() + "Transfer-Encoding: xyz, chunked\r\n",
          InChunks(body, 9)),
      Raw("POST /v1/completions HTTP/1.1", Auth() + "Transfer-Encoding: gzip\r\n", body),
      Raw("POST /v1/completions HTTP/1.1", Auth() + "Transfer-Encoding: chunked, chunked\r\n",
          InChunks(body, 9)),
      Raw("POST /v1/completions HTTP/1.1",
          Auth() + "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n", InChunks(body, 9)),
      Raw("POST /v1/completions HTTP/1.1", Auth() + "Transfer-Encoding: Chunked ; q=1 ,\r\n",
          InChunks(body, 9)),
      // An element with no coding name before its parameters (400, closed).
      Raw("POST /v1/completions HTTP/1.1", Auth() + "Transfer-Encoding: ;x, chunked\r\n",
          InChunks(body, 9)),
      Raw("POST /v1/completions HTTP/1.1",
          Auth() + "Transfer-Encoding: gzip\r\nContent-Length: " + std::to_string(body.size()) +
              "\r\n",
          body),
      Raw("POST /v1/completions HTTP/1.1",
          Auth() + "Content-Length: " + std::to_string(body.size()) +
              "\r\nTransfer-Encoding: chunked\r\n",
          InChunks(body, 9)),
  };
  return seeds;
}

std::vector<std::string> HeaderSeeds() {
  const std::string body(kBody);
  const std::string post = "POST /v1/completions HTTP/1.1";
  const std::string json = "Content-Type: application/json\r\n";
  const std::string n = std::to_string(body.size());
  const std::string more = std::to_string(body.size() + 1);
  std::vector<std::string> seeds;
  for (const std::string& length : {std::string("99999999999999999999"),
                                    std::string("18446744073709551616"),
                                    std::string("18446744073709551615"),
                                    std::string("9223372036854775808"),
                                    std::string("1048577"),
                                    std::string("-1"),
                                    std::string("-0"),
                                    " " + n,
                                    n + " ",
                                    n + ", " + n,
                                    n + "," + more,
                                    "+" + n,
                                    "0" + n,
                                    std::string("0x22"),
                                    std::string("3.4e1"),
                                    std::string(""),
                                    std::string("0"),
                                    std::string("1"),
                                    more,
                                    std::string("10")}) {
    seeds.push_back(Raw(post, Auth() + json + "Content-Length: " + length + "\r\n", body));
  }
  for (const std::string& second : {n, more}) {
    seeds.push_back(
        Raw(post, Auth() + json + "Content-Length: " + n + "\r\nContent-Length: " + second + "\r\n",
            body));
  }
  for (const char* type :
       {"text/plain", "application/json; charset=utf-8", " APPLICATION/JSON ", "application/json;",
        ";", "", "application/jsonx", "application/x-www-form-urlencoded", "\xff\xfe"}) {
    seeds.push_back(
        PostRequest("/v1/completions", body, std::string("Content-Type: ") + type + "\r\n"));
  }
  for (const std::string& auth :
       {std::string("bearer ") + kApiKey, std::string("Bearer  ") + kApiKey,
        std::string("Bearer ") + kApiKey + "x", std::string("Basic Zm9v"), std::string("Bearer "),
        std::string("Bearer"), std::string(""), std::string("Bearer ") + std::string(9000, 'k')}) {
    seeds.push_back(Raw(
        post, "Authorization: " + auth + "\r\n" + json + "Content-Length: " + n + "\r\n", body));
  }
  seeds.push_back(Raw(post, json + "Content-Length: " + n + "\r\n", body));  // no key at all
  // Header sizes and syntax.
  seeds.push_back(
      PostRequest("/v1/completions", body, "X-Big: " + std::string(9000, 'x') + "\r\n"));
  std::string many;
  for (int i = 0; i < 1000; ++i) many += "X-" + std::to_string(i) + ": v\r\n";
  seeds.push_back(PostRequest("/v1/completions", body, many));
  for (const std::string& line :
       {std::string("Bad Header: x\r\n"), std::string("NoColon\r\n"),
        std::string("X: a\r\n folded\r\n"), std::string(": empty-name\r\n"),
        std::string("X: nul\0byte\r\n", 13), std::string("X:\r\n"), std::string("X : y\r\n"),
        std::string("Expect: 100-continue\r\n"), std::string("Connection: close\r\n"),
        std::string("Connection: keep-alive, Upgrade\r\nUpgrade: h2c\r\n"),
        std::string("X: \xff\xfe\r\n")}) {
    seeds.push_back(PostRequest("/v1/completions", body, line));
  }
  return seeds;
}

std::vector<std::string> RequestLineSeeds() {
  const std::string headers = Auth();
  std::vector<std::string> seeds;
  for (const char* line : {"GET /health HTTP/1.1",
                           "GET /ready HTTP/1.1",
                           "GET /v1/models HTTP/1.1",
                           "GET /v1/models/fuzz-model HTTP/1.1",
                           "GET /v1/models/org/fuzz-model-id HTTP/1.1",
                           "GET /v1/models/%ff%00 HTTP/1.1",
                           "GET /v1/models/\xff HTTP/1.1",
                           "POST /health HTTP/1.1",
                           "DELETE /v1/models HTTP/1.1",
                           "GET /v1/completions HTTP/1.1",
                           "PUT /tokenize HTTP/1.1",
                           "GET /nowhere HTTP/1.1",
                           "GET /health?x=1 HTTP/1.1",
                           "GET http://fuzz/health HTTP/1.1",
                           "GET * HTTP/1.1",
                           "OPTIONS * HTTP/1.1",
                           "GET /health HTTP/1.0",
                           "GET /health HTTP/9.9",
                           "GET /health HTTP/1",
                           "GET /health",
                           "get /health HTTP/1.1",
                           "PRI * HTTP/2.0",
                           "GET  /health HTTP/1.1",
                           "GET /health  HTTP/1.1",
                           "GET /he alth HTTP/1.1",
                           "\r\nGET /health HTTP/1.1",
                           "GET /health HTTP/1.1\n"}) {
    seeds.push_back(Raw(line, headers, ""));
  }
  seeds.push_back(Raw("GET /v1/models/" + std::string(9000, 'm') + " HTTP/1.1", headers, ""));
  seeds.push_back("GET /health HTTP/1.1\n\n");
  seeds.push_back("");
  seeds.push_back("\r\n\r\n");
  // Pipelined: three requests in one input, then one cut short.
  const std::string one = PostRequest("/tokenize", R"({"prompt":"Hi"})");
  const std::string two = PostRequest("/detokenize", R"({"tokens":[1,2]})");
  seeds.push_back(one + two + Raw("GET /health HTTP/1.1", "", "") + one.substr(0, 30));
  seeds.push_back(PostRequest("/v1/completions", kBody, "Connection: close\r\n") + one);
  return seeds;
}

}  // namespace

std::string PostRequest(const std::string& path, const std::string& body,
                        const std::string& headers) {
  return "POST " + path + " HTTP/1.1\r\nHost: fuzz\r\nAuthorization: Bearer " + kApiKey +
         "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n" + headers + "\r\n" + body;
}

std::vector<std::string> HttpWireSeeds() {
  std::vector<std::string> seeds = ChunkedSeeds();
  for (std::string& s : HeaderSeeds()) seeds.push_back(std::move(s));
  for (std::string& s : RequestLineSeeds()) seeds.push_back(std::move(s));
  return seeds;
}

std::vector<std::string> HttpSeeds() {
  std::vector<std::string> seeds = HttpWireSeeds();
  for (std::string& s : HttpBodySeeds()) seeds.push_back(std::move(s));
  return seeds;
}

}  // namespace millipede::fuzz
