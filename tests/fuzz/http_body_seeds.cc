// JSON bodies for the HTTP seeds: each edge value in every field position of every JSON route,
// whole-body edge cases, and truncations of full-featured bodies.
#include <string>
#include <utility>
#include <vector>

#include "tests/fuzz/seed_corpus.h"

namespace millipede::fuzz {
namespace {

// Levels of the deep-nesting seeds: far past any parser's limit, small enough to post.
constexpr int kDeep = 100000;

std::string Repeat(const std::string& s, int n) {
  std::string out;
  out.reserve(s.size() * static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

struct Template {
  const char* path;
  const char* body;  // '@' is replaced by the edge value
};

// Every field a body may carry, on the route that reads it.
const std::vector<Template>& Templates() {
  static const std::vector<Template> templates = {
      {"/v1/completions", R"({"prompt":"Hi","max_tokens":@})"},
      {"/v1/completions", R"({"prompt":"Hi","max_completion_tokens":@})"},
      {"/v1/completions", R"({"prompt":"Hi","temperature":@})"},
      {"/v1/completions", R"({"prompt":"Hi","top_p":@})"},
      {"/v1/completions", R"({"prompt":"Hi","top_k":@})"},
      {"/v1/completions", R"({"prompt":"Hi","seed":@})"},
      {"/v1/completions", R"({"prompt":"Hi","n":@})"},
      {"/v1/completions", R"({"prompt":"Hi","n":2,"best_of":@})"},
      {"/v1/completions", R"({"prompt":"Hi","logprobs":@})"},
      {"/v1/completions", R"({"prompt":"Hi","presence_penalty":@})"},
      {"/v1/completions", R"({"prompt":"Hi","frequency_penalty":@})"},
      {"/v1/completions", R"({"prompt":"Hi","repetition_penalty":@})"},
      {"/v1/completions", R"({"prompt":"Hi","min_p":@})"},
      {"/v1/completions", R"({"prompt":"Hi","logit_bias":{"5":@}})"},
      {"/v1/completions", R"({"prompt":"Hi","logit_bias":@})"},
      {"/v1/completions", R"({"prompt":"Hi","stop_token_ids":[@]})"},
      {"/v1/completions", R"({"prompt":"Hi","stop":@})"},
      {"/v1/completions", R"({"prompt":"Hi","stop":["a",@]})"},
      {"/v1/completions", R"({"prompt":@,"max_tokens":2})"},
      {"/v1/completions", R"({"prompt":[@,1,2],"max_tokens":2})"},
      {"/v1/completions", R"({"prompt":[[@]],"max_tokens":2})"},
      {"/v1/completions", R"({"prompt":"Hi","x":@})"},
      {"/v1/completions", R"({"prompt":"Hi","stream":@})"},
      {"/v1/completions", R"({"prompt":"Hi","stream":true,"stream_options":{"include_usage":@}})"},
      {"/v1/completions", R"({"prompt":"Hi","echo":@})"},
      {"/v1/completions", R"({"prompt":"Hi","ignore_eos":@})"},
      {"/v1/completions", R"({"prompt":"Hi","add_special_tokens":@})"},
      {"/v1/completions", R"({"prompt":"Hi","suffix":@})"},
      {"/v1/completions", R"({"prompt":"Hi","min_tokens":@})"},
      {"/v1/completions", R"({"prompt":"Hi","length_penalty":@})"},
      {"/v1/completions", R"({"model":@,"prompt":"Hi"})"},
      {"/v1/completions", R"(@)"},
      {"/v1/chat/completions",
       R"({"messages":[{"role":"user","content":"Hi"}],"max_completion_tokens":@})"},
      {"/v1/chat/completions",
       R"({"messages":[{"role":"user","content":"Hi"}],"logprobs":true,"top_logprobs":@})"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"Hi"}],"logprobs":@})"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"Hi"}],"temperature":@})"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":@}]})"},
      {"/v1/chat/completions", R"({"messages":[{"role":@,"content":"Hi"}]})"},
      {"/v1/chat/completions", R"({"messages":[@]})"},
      {"/v1/chat/completions", R"({"messages":@})"},
      {"/v1/chat/completions",
       R"({"messages":[{"role":"user","content":[{"type":"text","text":@}]}]})"},
      {"/v1/chat/completions",
       R"({"messages":[{"role":"user","content":[{"type":@,"text":"Hi"}]}]})"},
      {"/v1/chat/completions",
       R"({"messages":[{"role":"user","content":"Hi"}],"response_format":{"type":@}})"},
      {"/v1/chat/completions",
       R"({"messages":[{"role":"user","content":"Hi"}],"response_format":@})"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"Hi"}],"stream":true,)"
                               R"("stream_options":{"continuous_usage_stats":@}})"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"Hi"}],"tool_choice":@})"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"Hi"}],"modalities":@})"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"Hi"}],"echo":@})"},
      {"/tokenize", R"({"prompt":@})"},
      {"/tokenize", R"({"prompt":"Hi","add_special_tokens":@})"},
      {"/tokenize", R"({"prompt":"Hi","return_token_strs":@})"},
      {"/tokenize", R"({"messages":[{"role":"user","content":@}]})"},
      {"/tokenize", R"({"prompt":"Hi","model":@})"},
      {"/detokenize", R"({"tokens":[@]})"},
      {"/detokenize", R"({"tokens":@})"},
      {"/detokenize", R"({"tokens":[1],"model":@})"},
  };
  return templates;
}

std::string Fill(const char* body, const std::string& value) {
  std::string out(body);
  return out.replace(out.find('@'), 1, value);
}

// Full-featured bodies of each route, mutated and truncated below.
const std::vector<std::pair<const char*, const char*>>& FullBodies() {
  static const std::vector<std::pair<const char*, const char*>> bodies = {
      {"/v1/completions",
       R"({"model":"fuzz-model","prompt":"Hello there","max_tokens":4,"temperature":0.5,)"
       R"("top_p":0.9,"top_k":5,"seed":7,"n":2,"best_of":2,"stop":["fox","\n"],"logprobs":2,)"
       R"("logit_bias":{"5":1.5,"7":-100},"stop_token_ids":[3],"presence_penalty":0.1,)"
       R"("frequency_penalty":0.2,"repetition_penalty":1.1,"min_p":0.05,"stream":true,)"
       R"("stream_options":{"include_usage":true},"ignore_eos":false,"add_special_tokens":true})"},
      {"/v1/completions",
       R"({"model":"org/fuzz-model-id","prompt":[[1,2,3,4]],"max_tokens":3,"echo":true})"},
      {"/v1/chat/completions",
       R"({"model":"fuzz-model","messages":[{"role":"system","content":"be brief"},)"
       R"({"role":"user","content":[{"type":"text","text":"Hi"},{"type":"text","text":"!"}]},)"
       R"({"role":"assistant","content":null},{"role":"user","content":"again"}],)"
       R"("max_completion_tokens":8,"logprobs":true,"top_logprobs":3,)"
       R"("response_format":{"type":"text"},"tool_choice":"none","modalities":["text"],)"
       R"("n":3,"seed":-1,"stop":"<|eot_id|>"})"},
      {"/tokenize",
       R"({"model":"fuzz-model","prompt":"Hello <|eot_id|>","add_special_tokens":false,)"
       R"("return_token_strs":true})"},
      {"/tokenize", R"({"messages":[{"role":"user","content":"Hi"}],"return_token_strs":true})"},
      {"/detokenize", R"({"model":"fuzz-model","tokens":[0,1,2,255,256,300]})"},
  };
  return bodies;
}

}  // namespace

const std::vector<std::string>& NumberEdgeCases() {
  static const std::vector<std::string> numbers = {"1e400",
                                                   "-1e400",
                                                   "1e999",
                                                   "-1e999",
                                                   "1e-400",
                                                   "-1e-400",
                                                   "-0",
                                                   "-0.0",
                                                   "0e0",
                                                   "9223372036854775807",
                                                   "9223372036854775808",
                                                   "-9223372036854775808",
                                                   "-9223372036854775809",
                                                   "18446744073709551615",
                                                   "18446744073709551616",
                                                   "2147483647",
                                                   "2147483648",
                                                   "-2147483649",
                                                   "4294967296",
                                                   "1.7976931348623157e308",
                                                   "4.9e-324",
                                                   "2.4703282292062327e-324",
                                                   "123456789012345678901234567890",
                                                   "1e99999999999999999999",
                                                   "1E+2147483648",
                                                   "0.1e-2147483649",
                                                   "NaN",
                                                   "-NaN",
                                                   "nan",
                                                   "Infinity",
                                                   "-Infinity",
                                                   "inf",
                                                   "0x1p5",
                                                   "0x10",
                                                   "1.",
                                                   ".5",
                                                   "01",
                                                   "+1",
                                                   "-",
                                                   "1e",
                                                   "1e+",
                                                   "1.5e3",
                                                   "2",
                                                   "0",
                                                   "-1",
                                                   "16",
                                                   "17",
                                                   "20",
                                                   "21",
                                                   "100",
                                                   "-100",
                                                   "100.0001"};
  return numbers;
}

const std::vector<std::string>& StringEdgeCases() {
  static const std::vector<std::string> strings = {
      R"("\ud800")",
      R"("\udc00")",
      R"("\ud800\udc00")",
      R"("\udbff\udfff")",
      R"("\ud800\u0041")",
      R"("\ud800x")",
      R"("\udc00\ud800")",
      R"("\u0000")",
      R"("\uZZZZ")",
      R"("\u12")",
      R"("\x41")",
      "\"\xff\"",
      "\"\xc0\x80\"",
      "\"\xed\xa0\x80\"",
      "\"\xe2\x82\"",
      "\"\xf4\x90\x80\x80\"",
      "\"\xf0\x9f\x98\x80\"",
      "\"a\x01"
      "b\"",
      "\"a\nb\"",
      R"("")",
      R"("<|eot_id|>")",
      R"("<|begin_of_text|><|start_header_id|>user<|end_header_id|>")",
      R"("text")",
      "\"" + std::string(2000, 'a') + "\"",
      "\"unterminated",
      "[]",
      "{}",
      "true",
      "null",
      "[[]]",
      R"({"a":1})",
      R"(["x"])",
      R"({"type":"text","text":"Hi"})"};
  return strings;
}

std::vector<std::string> NestingEdgeCases() {
  return {Repeat("[", kDeep) + Repeat("]", kDeep),
          Repeat("[", kDeep),
          Repeat(R"({"a":)", kDeep / 2) + "1" + Repeat("}", kDeep / 2),
          Repeat(R"([{"a":)", 20000) + "1" + Repeat("}]", 20000),
          Repeat("[", 64) + Repeat("]", 64),
          Repeat("[", 65) + Repeat("]", 65),
          Repeat("[", 63) + "1e400" + Repeat("]", 63),
          Repeat("[", 200) + "\"\xff\"" + Repeat("]", 200)};
}

std::vector<std::string> HttpBodySeeds() {
  std::vector<std::string> seeds;
  std::vector<std::string> values = NumberEdgeCases();
  for (const std::string& s : StringEdgeCases()) values.push_back(s);
  for (const Template& t : Templates()) {
    for (const std::string& v : values) seeds.push_back(PostRequest(t.path, Fill(t.body, v)));
  }
  // Deep nesting in a few positions only (each seed is ~200 KB).
  for (const std::string& v : NestingEdgeCases()) {
    for (const char* body : {"@", R"({"prompt":@})", R"({"prompt":"Hi","x":@})"}) {
      seeds.push_back(PostRequest("/v1/completions", Fill(body, v)));
    }
    seeds.push_back(PostRequest("/v1/chat/completions", Fill(R"({"messages":@})", v)));
    seeds.push_back(PostRequest("/detokenize", Fill(R"({"tokens":@})", v)));
  }
  for (const auto& [path, body] : FullBodies()) {
    const std::string text(body);
    seeds.push_back(PostRequest(path, text));
    // Truncated, with a Content-Length that matches and with one that promises the rest.
    for (size_t cut = 1; cut < text.size(); cut += 13) {
      seeds.push_back(PostRequest(path, text.substr(0, cut)));
      std::string promised = PostRequest(path, text);
      seeds.push_back(promised.substr(0, promised.size() - text.size() + cut));
    }
  }
  // Duplicate keys (the last one wins in the parser) and whole-body oddities.
  for (const char* body :
       {R"({"prompt":"Hi","max_tokens":1,"max_tokens":1e400})",
        R"({"prompt":"Hi","max_tokens":1e400,"max_tokens":1})", R"({"prompt":"Hi","prompt":[1]})",
        R"({"model":"nope","model":"fuzz-model","prompt":"Hi"})",
        R"({"prompt":"Hi","logit_bias":{"5":1,"5":2,"05":3}})",
        R"({"prompt":"Hi","logit_bias":{"99999999999":1,"-1":1,"":1,"1e3":1,"0x10":1}})",
        R"({"prompt":"Hi","logit_bias":{"4294967301":1}})", "", " ", "null", "[]", "{}", "{}{}",
        "{} x", "\xef\xbb\xbf{\"prompt\":\"Hi\"}", "/* c */{\"prompt\":\"Hi\"}",
        R"({"prompt":"Hi",})", R"({'prompt':'Hi'})", R"({"prompt":"Hi")"}) {
    for (const char* path : {"/v1/completions", "/v1/chat/completions", "/tokenize"}) {
      seeds.push_back(PostRequest(path, body));
    }
  }
  // Huge strings: over the admission limit (256 KiB) and under it.
  seeds.push_back(PostRequest(
      "/v1/completions", R"({"prompt":")" + std::string(300000, 'a') + R"(","max_tokens":1})"));
  seeds.push_back(
      PostRequest("/tokenize", R"({"prompt":")" + Repeat("Hello there ", 5000) + R"("})"));
  std::string ids = "[1";
  for (int i = 0; i < 5000; ++i) ids += ",2";
  seeds.push_back(PostRequest("/v1/completions", R"({"prompt":)" + ids + R"(],"max_tokens":1})"));
  seeds.push_back(PostRequest("/detokenize", R"({"tokens":)" + ids + "]}"));
  return seeds;
}

}  // namespace millipede::fuzz
