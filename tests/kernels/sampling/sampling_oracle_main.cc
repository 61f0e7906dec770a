// millipede-test-sampling: runs the sampling references on cases read from a JSON file and
// writes what they computed, so that sampling_oracle_test.py can compare them with Hugging Face
// transformers' logits processors. Test-only: not installed.
//
// Input: a JSON array of cases {"logits": [...], "prompt": [...], "output": [...],
// "params": {"temperature", "top_k", "top_p", "min_p", "repetition_penalty",
// "presence_penalty", "frequency_penalty", "logit_bias": [[id, bias], ...]}, "token": id,
// "k": n}, -inf written as null. Output: one array of {"penalised": [...] (null for -inf),
// "candidates": [[id, weight], ...], "token_logprob": x, "top_ids": [...],
// "top_logprobs": [...]}.
#include <cmath>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "common/json_util.h"
#include "kernels/sampling/sampling.h"
#include "kernels/sampling/sampling_logprobs.h"
#include "kernels/sampling/sampling_penalties.h"

namespace millipede {
namespace {

Json FloatsToJson(const std::vector<float>& values) {
  Json out = Json::array();
  for (float v : values) out.push_back(std::isinf(v) && v < 0 ? Json(nullptr) : Json(v));
  return out;
}

std::vector<float> FloatsFromJson(const Json& values) {
  std::vector<float> out;
  for (const Json& v : values)
    out.push_back(v.is_null() ? -std::numeric_limits<float>::infinity() : v.get<float>());
  return out;
}

SamplingParams ParamsFromJson(const Json& p) {
  SamplingParams s;
  s.temperature = p.value("temperature", 1.0f);
  s.top_k = p.value("top_k", 0);
  s.top_p = p.value("top_p", 1.0f);
  s.min_p = p.value("min_p", 0.0f);
  s.repetition_penalty = p.value("repetition_penalty", 1.0f);
  s.presence_penalty = p.value("presence_penalty", 0.0f);
  s.frequency_penalty = p.value("frequency_penalty", 0.0f);
  for (const Json& e : p.value("logit_bias", Json::array()))
    s.logit_bias.push_back({e.at(0).get<int32_t>(), e.at(1).get<float>()});
  return s;
}

StatusOr<Json> RunCase(const Json& c) {
  const std::vector<float> logits = FloatsFromJson(c.at("logits"));
  const int64_t vocab = static_cast<int64_t>(logits.size());
  const SamplingParams params = ParamsFromJson(c.at("params"));
  const std::vector<int32_t> prompt = c.at("prompt").get<std::vector<int32_t>>();
  const std::vector<int32_t> output = c.at("output").get<std::vector<int32_t>>();
  MP_ASSIGN_OR_RETURN(SamplingPenaltiesTables tables,
                      SamplingPenaltiesTables::Build(vocab, params.logit_bias, prompt, output));
  const Shape shape{vocab};
  std::vector<float> penalised(vocab);
  MP_RETURN_IF_ERROR(
      SamplingPenaltiesRef({.logits = {logits.data(), DType::kF32, shape},
                            .bias = {tables.bias.data(), DType::kF32, shape},
                            .prompt_mask = {tables.prompt_mask.data(), DType::kU8, shape},
                            .output_counts = {tables.output_counts.data(), DType::kI32, shape},
                            .repetition_penalty = params.repetition_penalty,
                            .presence_penalty = params.presence_penalty,
                            .frequency_penalty = params.frequency_penalty,
                            .out = {penalised.data(), DType::kF32, shape}}));
  MP_ASSIGN_OR_RETURN(std::vector<SampleCandidate> candidates,
                      SampleCandidatesRef({penalised.data(), DType::kF32, shape}, params));
  Json kept = Json::array();
  for (const SampleCandidate& k : candidates) kept.push_back({k.id, k.weight});

  const int64_t k = c.at("k").get<int64_t>();
  float token_logprob = 0;
  std::vector<int32_t> top_ids(k);
  std::vector<float> top_logprobs(k);
  MP_RETURN_IF_ERROR(
      SamplingLogprobsRef({.logits = {logits.data(), DType::kF32, shape},
                           .token = c.at("token").get<int32_t>(),
                           .token_logprob = {&token_logprob, DType::kF32, {1}},
                           .top_ids = {top_ids.data(), DType::kI32, {k}},
                           .top_logprobs = {top_logprobs.data(), DType::kF32, {k}}}));
  return Json{{"penalised", FloatsToJson(penalised)},
              {"candidates", kept},
              {"token_logprob", token_logprob},
              {"top_ids", top_ids},
              {"top_logprobs", FloatsToJson(top_logprobs)}};
}

int Main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: millipede-test-sampling CASES.json\n";
    return 2;
  }
  StatusOr<Json> cases = ParseJsonFile(argv[1]);
  if (!cases.ok()) {
    std::cerr << cases.status().ToString() << "\n";
    return 1;
  }
  Json results = Json::array();
  for (size_t i = 0; i < cases->size(); ++i) {
    StatusOr<Json> r = RunCase((*cases)[i]);
    if (!r.ok()) {
      std::cerr << "case " << i << ": " << r.status().ToString() << "\n";
      return 1;
    }
    results.push_back(std::move(r).value());
  }
  std::cout << results.dump() << "\n";
  return 0;
}

}  // namespace
}  // namespace millipede

int main(int argc, char** argv) { return millipede::Main(argc, argv); }
