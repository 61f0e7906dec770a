// The weights of a Llama-family decoder as the engine's backend sees them.
#pragma once

#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/model_config.h"
#include "common/status.h"
#include "common/tensor.h"
#include "worker/backend/backend.h"
#include "worker/kv_scales.h"
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
  // The projections one GEMM can run together, as one matrix when they lie back to back in
  // backend memory with one dtype (a device backend places them so; data == nullptr otherwise,
  // e.g. a memory-mapped checkpoint on the CPU backend). A bias is absent when the model has none
  // or when its parts are not adjacent. Views of the same memory as the matrices above.
  ConstTensorView qkv_proj;      // [(heads + 2 * kv_heads) * head_dim, hidden]: q | k | v
  ConstTensorView qkv_bias;      // [(heads + 2 * kv_heads) * head_dim]
  ConstTensorView gate_up_proj;  // [2 * intermediate, hidden]: gate | up
  ConstTensorView gate_up_bias;  // [2 * intermediate]
};

// The weights of one layer that are adopted together (Backend::AdoptWeights), each group in the
// order its fused matrix holds them: q/k/v projections, gate/up projections and, when the model
// has them, their biases.
std::vector<std::vector<std::string>> FusedWeightGroups(const ModelConfig& config, int64_t layer);

// `parts` as one tensor (rows concatenated) when they lie back to back in memory in this order
// with one dtype and the same trailing dimensions; a view with data == nullptr otherwise.
ConstTensorView AdjacentRows(std::initializer_list<ConstTensorView> parts);

// Holds what keeps the views alive (a mapped checkpoint or generated host tensors; a device
// backend owns its own copies). Every factory folds `kv_scales` (one per layer, or none) into
// the attention weights as it adopts them (kv_scales.h): the weights it scales are adopted from
// scaled host copies.
class ModelWeights {
 public:
  // Opens `model_dir`'s safetensors, checks them against `config` and adopts them into `backend`.
  static StatusOr<std::unique_ptr<ModelWeights>> Load(const std::string& model_dir,
                                                      const ModelConfig& config, Backend& backend,
                                                      const KvScales& kv_scales = {});
  // Adopts `tensors` (every weight of ExpectedModelTensors(config), by Hugging Face name, e.g.
  // dequantised from a GGUF file) into `backend`; the CPU backend keeps them, packing each fused
  // group back to back.
  static StatusOr<std::unique_ptr<ModelWeights>> FromHost(const ModelConfig& config,
                                                          std::vector<NamedHostTensor> tensors,
                                                          Backend& backend,
                                                          const KvScales& kv_scales = {});
  // Generates random weights for `config` (see random_weights.h) and adopts them into `backend`.
  static StatusOr<std::unique_ptr<ModelWeights>> Random(const ModelConfig& config,
                                                        const RandomWeightsOptions& options,
                                                        Backend& backend,
                                                        const KvScales& kv_scales = {});

  ConstTensorView embed_tokens;  // [vocab, hidden]
  ConstTensorView final_norm;    // [hidden]
  ConstTensorView lm_head;       // [vocab, hidden] (the embedding when tied)
  std::vector<LayerWeights> layers;
  DType dtype = DType::kBF16;  // of the projection weights

 private:
  template <typename GetFn>
  Status Assign(const ModelConfig& config, Backend& backend, const KvScales& kv_scales, GetFn get);

  Checkpoint checkpoint_;
  std::vector<NamedHostTensor> generated_;  // host weights, or aligned copies of misaligned ones
};

}  // namespace millipede
