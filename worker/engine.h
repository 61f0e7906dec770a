// The single-sequence engine: a Llama-family decoder (llama, mistral, qwen2) run layer by layer
// on a backend, with a KV cache, chunked projections/MLP and logits for the last position only.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/checkpoint/model_config.h"
#include "common/status.h"
#include "worker/backend.h"
#include "worker/kv_cache.h"
#include "worker/model_weights.h"

namespace millipede {

struct EngineOptions {
  // Hugging Face model directory (config.json + safetensors). Empty: use `random_config`.
  std::string model_dir;
  // Random weights for this config when model_dir is empty (benchmarks, tests).
  ModelConfig random_config;
  RandomWeightsOptions random_weights;
  BackendKind backend = BackendKind::kCpu;
  // Storage type of the KV cache: BF16 (default), F16 or F32.
  DType kv_dtype = DType::kBF16;
  // Tokens per chunk for projections and the MLP: activations are O(chunk x intermediate) rather
  // than O(sequence x intermediate).
  int64_t prefill_chunk = 512;
};

class Engine {
 public:
  static StatusOr<std::unique_ptr<Engine>> Create(const EngineOptions& options);

  const ModelConfig& config() const { return config_; }
  const EngineOptions& options() const { return options_; }
  Backend& backend() { return *backend_; }
  // Tokens the model may see at once: prompt plus generated (config max_position_embeddings,
  // further limited by a sliding window, which this engine does not implement).
  int64_t max_context() const;

  // Starts a new sequence with room for `capacity` positions (frees the previous one).
  Status StartSequence(int64_t capacity);
  // Frees the current sequence's KV cache.
  void EndSequence();
  // Tokens in the current sequence so far.
  int64_t length() const { return kv_ ? kv_->length() : 0; }
  const KvCache* kv_cache() const { return kv_.get(); }

  // Runs `ids` at positions [length(), length() + n) through the model, appending their K/V to
  // the cache, and returns the logits of the last of them ([vocab] F32, backend memory, valid
  // until the next call). Ids must lie in [0, vocab).
  StatusOr<ConstTensorView> Forward(std::span<const int32_t> ids);
  // Forward, then the logits copied to the host.
  Status ForwardToHost(std::span<const int32_t> ids, std::vector<float>* logits);

 private:
  Engine() = default;
  Status EnsureScratch(int64_t chunk);
  // Attention, output projection and MLP of `layer` for tokens [begin, end) of this pass.
  Status AttentionBlock(int64_t layer, int64_t begin, int64_t end, int64_t position0);

  EngineOptions options_;
  ModelConfig config_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<ModelWeights> weights_;
  std::unique_ptr<KvCache> kv_;

  // Per-forward buffers.
  BackendTensor hidden_;  // [n, hidden] F32 residual stream
  BackendTensor q_;       // [n, heads * head_dim] F32 queries (after RoPE)
  // Per-chunk scratch, sized for `scratch_rows_` tokens.
  int64_t scratch_rows_ = 0;
  BackendTensor normed_;     // [chunk, hidden]
  BackendTensor k_, v_;      // [chunk, kv_heads * head_dim]
  BackendTensor attn_;       // [chunk, heads * head_dim]
  BackendTensor gate_, up_;  // [chunk, intermediate]
  BackendTensor positions_;  // [chunk] I64
  BackendTensor ids_;        // [chunk] I32
  BackendTensor logits_;     // [1, vocab]
};

}  // namespace millipede
