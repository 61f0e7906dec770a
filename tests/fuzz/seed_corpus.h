// The fuzz targets' seed corpus, generated in code: whole HTTP requests (HttpSeeds) and
// Cap'n Proto JobSpec messages in the flat wire form (JobSpecSeeds), covering number edge cases
// in every field position, deep nesting, invalid UTF-8 and surrogates, huge strings, duplicate
// keys, wrong types, truncated bodies, chunked transfer-encoding and header edge cases.
// `millipede_fuzz_seeds DIR` writes them for libFuzzer; the randomized test mutates them.
#pragma once

#include <string>
#include <vector>

namespace millipede::fuzz {

// JSON-ish number spellings that overflow, underflow or are not JSON at all: 1e400, -0, 2^63,
// 2^64, -2^63-1, NaN and Infinity text, hex floats, huge exponents, ...
const std::vector<std::string>& NumberEdgeCases();

// Deep nesting (10^5 levels), invalid UTF-8 and \u escapes (lone and paired surrogates).
std::vector<std::string> NestingEdgeCases();
const std::vector<std::string>& StringEdgeCases();  // JSON string literals, quotes included

// A POST of `body` to `path` with the key, a JSON Content-Type and a matching Content-Length;
// `headers` ("Name: value\r\n" lines) go before the blank line.
std::string PostRequest(const std::string& path, const std::string& body,
                        const std::string& headers = "");

std::vector<std::string> HttpBodySeeds();  // JSON bodies posted to every JSON route
std::vector<std::string> HttpWireSeeds();  // header, chunked and framing edge cases
std::vector<std::string> HttpSeeds();      // both
std::vector<std::string> JobSpecSeeds();

}  // namespace millipede::fuzz
