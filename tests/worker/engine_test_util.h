// Shared helpers for the engine tests: small random model configs, relative errors, policies.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string_view>
#include <vector>

#include "models/model_presets.h"
#include "worker/engine/engine.h"

namespace millipede::testing {

// A small llama-shaped config with GQA (4 query heads over 2 KV heads).
inline ModelConfig SmallConfig() {
  ModelConfig c = *ModelPreset("tiny");
  c.vocab_size = 97;
  c.bos_token_id.reset();
  c.eos_token_ids = {5};
  c.max_position_embeddings = 8192;
  return c;
}

// SmallConfig widened to the tensor-core attention path (8 query heads over 2 KV heads of
// head_dim 64), `layers` deep: the GPU engine suites compare it with the CPU engine.
inline ModelConfig GpuSmallConfig(int64_t layers) {
  ModelConfig c = SmallConfig();
  c.num_hidden_layers = layers;
  c.hidden_size = 256;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 2;
  c.head_dim = 64;
  c.intermediate_size = 512;
  return c;
}

inline EngineOptions RandomEngineOptions(const ModelConfig& c, DType weights, DType kv,
                                         int64_t chunk = 512, uint64_t seed = 11) {
  EngineOptions o;
  o.random_config = c;
  o.random_weights.dtype = weights;
  o.random_weights.seed = seed;
  o.kv_dtype = kv;
  o.prefill_chunk = chunk;
  return o;
}

// A GpuSmallConfig(4) engine with random fp32 weights and `kv` KV (bf16 by default) on
// `backend`, `chunk` tokens per prefill chunk: the GPU engine suites build one per backend and
// compare them (a test failure and null when it cannot be made).
inline std::unique_ptr<Engine> GpuSmallEngine(BackendKind backend, int64_t chunk,
                                              bool split_kv_heads = true, DType kv = DType::kBF16) {
  EngineOptions o = RandomEngineOptions(GpuSmallConfig(4), DType::kF32, kv, chunk);
  o.backend = backend;
  o.split_kv_heads = split_kv_heads;
  auto e = Engine::Create(o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? std::move(e).value() : nullptr;
}

// max_i |a_i - b_i| / max_i |b_i|
inline double MaxRelError(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return scale > 0 ? err / scale : err;
}

inline std::vector<int32_t> RandomIds(int64_t n, int32_t vocab, uint32_t seed) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  uint32_t x = seed * 2654435761u + 1;
  for (auto& id : ids) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    id = static_cast<int32_t>(x % static_cast<uint32_t>(vocab));
  }
  return ids;
}

// A policy file's text parsed for `engine`'s model, as the service parses a job's at admission;
// a test failure (and the dense policy) when it does not parse.
inline AttentionPolicy PolicyFor(const Engine& engine, std::string_view json) {
  const ModelConfig& c = engine.config();
  StatusOr<AttentionPolicy> p =
      ParseAttentionPolicy(json, c.num_hidden_layers, c.num_key_value_heads);
  if (p.ok()) return std::move(p).value();
  ADD_FAILURE() << p.status().ToString();
  return DensePolicy(c.num_hidden_layers, c.num_key_value_heads);
}

// Logits [sequence][step][vocab] (host copies).
using StepLogits = std::vector<std::vector<std::vector<float>>>;

// Starts sequences 1..N with random prompts of `prompts` tokens (room for `steps` more) under the
// engine's policy and prefills each, resets the engine's stats, then runs `steps` decode steps of
// fixed tokens with every sequence's token in one plan. Empty where a step fails (a test failure).
inline StepLogits PrefillThenDecodeTogether(Engine& e, const std::vector<int64_t>& prompts,
                                            int64_t steps) {
  StepLogits out(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const SequenceId id = static_cast<SequenceId>(i + 1);
    const std::vector<int32_t> ids = RandomIds(prompts[i], 97, 10 + static_cast<uint32_t>(i));
    EXPECT_TRUE(e.StartSequence(id, {prompts[i] + steps, prompts[i], e.policy()}).ok());
    EXPECT_TRUE(e.RunStep({{SequenceStep{id, StepKind::kPrefill, {{0, prompts[i]}}, ids}}}).ok());
  }
  e.ResetStats();
  for (int32_t token : RandomIds(steps, 97, 99)) {
    StepPlan plan;
    for (size_t i = 0; i < prompts.size(); ++i)
      plan.steps.push_back({static_cast<SequenceId>(i + 1), StepKind::kDecode, {}, {token}});
    StatusOr<StepOutput> step = e.RunStep(plan);
    EXPECT_TRUE(step.ok()) << step.status().ToString();
    if (!step.ok()) return out;
    for (size_t i = 0; i < prompts.size(); ++i) {
      const ConstTensorView& logits = *step->logits[i];
      out[i].emplace_back(static_cast<size_t>(logits.NumElements()));
      EXPECT_TRUE(
          e.backend().CopyToHost(logits, {out[i].back().data(), DType::kF32, logits.shape}).ok());
    }
  }
  return out;
}

}  // namespace millipede::testing
