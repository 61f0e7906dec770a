// The weights of a Llama-family decoder as the engine's backend sees them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/checkpoint/checkpoint.h"
#include "common/checkpoint/model_config.h"
#include "common/status.h"
#include "common/tensor.h"
#include "worker/backend.h"
#include "worker/random_weights.h"

namespace millipede {

// Views in backend memory. Optional biases have data == nullptr when absent.
struct LayerWeights {
  ConstTensorView input_norm;      // [hidden]
  ConstTensorView q_proj, q_bias;  // [heads * head_dim, hidden], [heads * head_dim]
  ConstTensorView k_proj, k_bias;  // [kv_heads * head_dim, hidden], [kv_heads * head_dim]
  ConstTensorView v_proj, v_bias;  // [kv_heads * head_dim, hidden], [kv_heads * head_dim]
  ConstTensorView o_proj, o_bias;  // [hidden, heads * head_dim], [hidden]
  ConstTensorView post_attention_norm;  // [hidden]
  ConstTensorView gate_proj, gate_bias;  // [intermediate, hidden], [intermediate]
  ConstTensorView up_proj, up_bias;      // [intermediate, hidden], [intermediate]
  ConstTensorView down_proj, down_bias;  // [hidden, intermediate], [hidden]
};

// Holds what keeps the views alive (a mapped checkpoint or generated host tensors; a device
// backend owns its own copies).
class ModelWeights {
 public:
  // Opens `model_dir`'s safetensors, checks them against `config` and adopts them into `backend`.
  static StatusOr<std::unique_ptr<ModelWeights>> Load(const std::string& model_dir,
                                                      const ModelConfig& config,
                                                      Backend& backend);
  // Generates random weights for `config` (see random_weights.h) and adopts them into `backend`.
  static StatusOr<std::unique_ptr<ModelWeights>> Random(const ModelConfig& config,
                                                        const RandomWeightsOptions& options,
                                                        Backend& backend);

  ConstTensorView embed_tokens;  // [vocab, hidden]
  ConstTensorView final_norm;    // [hidden]
  ConstTensorView lm_head;       // [vocab, hidden] (the embedding when tied)
  std::vector<LayerWeights> layers;
  DType dtype = DType::kBF16;  // of the projection weights

 private:
  template <typename GetFn>
  Status Assign(const ModelConfig& config, Backend& backend, GetFn get);

  Checkpoint checkpoint_;
  std::vector<NamedHostTensor> generated_;  // random weights, or aligned copies of misaligned ones
};

}  // namespace millipede
