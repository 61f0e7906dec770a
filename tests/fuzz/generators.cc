#include "tests/fuzz/generators.h"

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "common/json_util.h"
#include "rpc/millipede.capnp.h"
#include "tests/fuzz/seed_corpus.h"

namespace millipede::fuzz {
namespace {

size_t Below(std::mt19937_64& rng, size_t n) {
  return std::uniform_int_distribution<size_t>(0, n - 1)(rng);
}
double Uniform(std::mt19937_64& rng, double lo, double hi) {
  return std::uniform_real_distribution<double>(lo, hi)(rng);
}
int64_t Int(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// A token id: in the fuzz tokenizer's vocabulary (over 260 ids) but for one in 32.
int32_t Id(std::mt19937_64& rng) {
  static const int32_t kOutside[] = {-1, 100000, std::numeric_limits<int32_t>::max()};
  return Below(rng, 32) ? static_cast<int32_t>(Int(rng, 0, 259)) : kOutside[Below(rng, 3)];
}

// Text from pieces the tokenizer knows, special tokens and multi-byte characters included.
std::string Text(std::mt19937_64& rng) {
  static const char* const kPieces[] = {
      "Hello", " there", " fox", "<|eot_id|>", "<|begin_of_text|>", "\xc3\xa9", "\xf0\x9f\x98\x80",
      " ",     "\\n",    "\\\"", "\\u00e9",    "\\ud83d\\ude00"};
  std::string text;
  for (size_t i = 0, n = 1 + Below(rng, 6); i < n; ++i) text += kPieces[Below(rng, 12)];
  return "\"" + text + "\"";
}

std::string Ids(std::mt19937_64& rng) {
  std::string ids = "[";
  for (size_t i = 0, n = 1 + Below(rng, 6); i < n; ++i) {
    if (i > 0) ids += ',';
    ids += std::to_string(Id(rng));
  }
  return ids + "]";
}

std::string Number(double x) { return Json(x).dump(); }

// A valid value of `key` most of the time; otherwise an edge number or string.
std::string Value(std::mt19937_64& rng, const std::string& key, bool chat) {
  const size_t pick = Below(rng, 40);
  if (pick == 0) return NumberEdgeCases()[Below(rng, NumberEdgeCases().size())];
  if (pick == 1) return StringEdgeCases()[Below(rng, StringEdgeCases().size())];
  if (key == "max_tokens" || key == "max_completion_tokens") return std::to_string(Int(rng, 1, 40));
  if (key == "temperature") return Number(Uniform(rng, 0, 2));
  if (key == "top_p") return Number(Uniform(rng, 0.01, 1));
  if (key == "top_k") return std::to_string(Int(rng, -1, 50));
  if (key == "seed") return std::to_string(Int(rng, -5, 1 << 30));
  if (key == "n" || key == "best_of") return std::to_string(Int(rng, 1, 4));
  if (key == "logprobs")
    return chat ? (Below(rng, 2) ? "true" : "false") : std::to_string(Int(rng, 0, 5));
  if (key == "top_logprobs") return std::to_string(Int(rng, 0, 20));
  if (key == "presence_penalty" || key == "frequency_penalty") return Number(Uniform(rng, -2, 2));
  if (key == "repetition_penalty") return Number(Uniform(rng, 0.1, 3));
  if (key == "min_p") return Number(Uniform(rng, 0, 1));
  if (key == "logit_bias") {
    return "{\"" + std::to_string(Id(rng)) + "\":" + Number(Uniform(rng, -100, 100)) + "}";
  }
  if (key == "stop_token_ids" || key == "tokens") return Ids(rng);
  if (key == "stop") return Below(rng, 2) ? Text(rng) : "[" + Text(rng) + "," + Text(rng) + "]";
  if (key == "stream_options") return Below(rng, 2) ? R"({"include_usage":true})" : "{}";
  if (key == "prompt") return Below(rng, 3) ? Text(rng) : Ids(rng);
  if (key == "model") return Below(rng, 4) ? "\"fuzz-model\"" : "\"org/fuzz-model-id\"";
  if (key == "messages") {
    static const char* const kRoles[] = {"system", "user", "assistant", "tool"};
    std::string list = "[";
    for (size_t i = 0, n = 1 + Below(rng, 3); i < n; ++i) {
      std::string content =
          Below(rng, 3) ? Text(rng) : R"([{"type":"text","text":)" + Text(rng) + "}]";
      list += std::string(i ? "," : "") + R"({"role":")" + kRoles[Below(rng, 4)] +
              R"(","content":)" + content + "}";
    }
    return list + "]";
  }
  return Below(rng, 2) ? "true" : "false";  // stream, echo, ignore_eos, add_special_tokens, ...
}

}  // namespace

std::string RandomHttpRequest(std::mt19937_64& rng) {
  struct Route {
    const char* path;
    bool chat;
    std::vector<const char*> required;
    std::vector<const char*> optional;
  };
  static const std::vector<const char*> kSampling = {"model",
                                                     "max_tokens",
                                                     "temperature",
                                                     "top_p",
                                                     "top_k",
                                                     "seed",
                                                     "n",
                                                     "best_of",
                                                     "logprobs",
                                                     "presence_penalty",
                                                     "frequency_penalty",
                                                     "repetition_penalty",
                                                     "min_p",
                                                     "logit_bias",
                                                     "stop_token_ids",
                                                     "stop",
                                                     "stream",
                                                     "stream_options",
                                                     "ignore_eos"};
  static const std::vector<Route> kRoutes = [] {
    std::vector<Route> routes = {
        {"/v1/completions", false, {"prompt"}, kSampling},
        {"/v1/chat/completions", true, {"messages"}, kSampling},
        {"/tokenize", false, {"prompt"}, {"model", "add_special_tokens", "return_token_strs"}},
        {"/tokenize", true, {"messages"}, {"model", "return_token_strs"}},
        {"/detokenize", false, {"tokens"}, {"model"}}};
    routes[0].optional.insert(routes[0].optional.end(), {"echo", "add_special_tokens"});
    routes[1].optional.insert(routes[1].optional.end(), {"top_logprobs", "max_completion_tokens"});
    return routes;
  }();
  const Route& route = kRoutes[Below(rng, kRoutes.size())];
  std::string body = "{";
  auto add = [&](const char* key) {
    body +=
        (body.size() > 1 ? ",\"" : "\"") + std::string(key) + "\":" + Value(rng, key, route.chat);
  };
  for (const char* key : route.required) add(key);
  for (const char* key : route.optional) {
    if (Below(rng, 4) == 0) add(key);
  }
  return PostRequest(route.path, body + "}");
}

std::string RandomJobSpec(std::mt19937_64& rng) {
  auto pick_float = [&](float valid) {
    static const float kEdges[] = {std::numeric_limits<float>::quiet_NaN(),
                                   std::numeric_limits<float>::infinity(), -0.0f, -1.0f, 2.5f};
    return Below(rng, 40) ? valid : kEdges[Below(rng, 5)];
  };
  capnp::MallocMessageBuilder message;
  rpc::JobSpec::Builder spec = message.initRoot<rpc::JobSpec>();
  if (Below(rng, 2)) {
    static const char* const kValid[] = {"Hello there", "fox <|eot_id|>", "\xc3\xa9"};
    static const char* const kInvalid[] = {"a\xff", ""};
    spec.getPrompt().setText(Below(rng, 8) ? kValid[Below(rng, 3)] : kInvalid[Below(rng, 2)]);
  } else {
    auto ids = spec.getPrompt().initIds(static_cast<unsigned>(Below(rng, 16)));
    for (unsigned i = 0; i < ids.size(); ++i) ids.set(i, Id(rng));
  }
  spec.setMaxNewTokens(Below(rng, 8) ? Int(rng, 1, 64) : Int(rng, -2, 1) << Below(rng, 62));
  auto s = spec.initSampling();
  s.setTemperature(pick_float(static_cast<float>(Uniform(rng, 0, 2))));
  s.setTopK(static_cast<int32_t>(Int(rng, Below(rng, 32) ? 0 : -1, 50)));
  s.setTopP(pick_float(static_cast<float>(Uniform(rng, 0.01, 1))));
  s.setSeed(rng());
  s.setRepetitionPenalty(pick_float(static_cast<float>(Uniform(rng, 0.1, 3))));
  s.setPresencePenalty(pick_float(static_cast<float>(Uniform(rng, -2, 2))));
  s.setFrequencyPenalty(pick_float(static_cast<float>(Uniform(rng, -2, 2))));
  s.setMinP(pick_float(static_cast<float>(Uniform(rng, 0, 1))));
  auto bias = s.initLogitBias(static_cast<unsigned>(Below(rng, 4)));
  for (unsigned i = 0; i < bias.size(); ++i) {
    bias[i].setId(Id(rng));
    bias[i].setBias(pick_float(static_cast<float>(Uniform(rng, -100, 100))));
  }
  s.setLogprobs(static_cast<int32_t>(Below(rng, 16) ? Int(rng, -1, 20) : Int(rng, -3, 22)));
  auto stop_ids = spec.initStopIds(static_cast<unsigned>(Below(rng, 3)));
  for (unsigned i = 0; i < stop_ids.size(); ++i) {
    stop_ids.set(i, Id(rng));
  }
  auto stops = spec.initStopStrings(static_cast<unsigned>(Below(rng, 3)));
  for (unsigned i = 0; i < stops.size(); ++i) stops.set(i, Below(rng, 16) ? "fox" : "");
  spec.setIgnoreEos(Below(rng, 2) == 1);
  if (Below(rng, 3) == 0) {
    static const char* const kPolicies[] = {
        R"({"version": 1})", R"({"version": 1, "default": {"prefill": "a-shape"}})",
        R"({"version": 1, "layers": [{"layer": 1, "decode": ["streaming-head", "full"]}]})",
        R"({"version": 1, "layers": [{"layer": 9}]})", "{"};
    spec.setPolicyJson(kPolicies[Below(rng, 5)]);
  }
  kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  kj::ArrayPtr<const kj::byte> bytes = words.asBytes();
  return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

}  // namespace millipede::fuzz
