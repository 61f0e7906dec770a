// The weight tensors a config implies, and checking a checkpoint against them.
#pragma once

#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/model_config.h"
#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

struct ExpectedTensor {
  std::string name;
  Shape shape;
};

// A weight held in host memory under its Hugging Face name (generated, or dequantised from a
// GGUF file).
struct NamedHostTensor {
  std::string name;
  HostTensor tensor;
};

// The Hugging Face names and shapes of every weight of a model with config `c`, in order:
//   model.embed_tokens.weight                          [vocab, hidden]
//   per layer i, prefix model.layers.{i}.:
//     input_layernorm.weight                           [hidden]
//     self_attn.q_proj.weight                          [heads * head_dim, hidden]
//     self_attn.q_proj.bias       (if qkv_bias)        [heads * head_dim]
//     self_attn.{k,v}_proj.weight                      [kv_heads * head_dim, hidden]
//     self_attn.{k,v}_proj.bias   (if qkv_bias)        [kv_heads * head_dim]
//     self_attn.o_proj.weight                          [hidden, heads * head_dim]
//     self_attn.o_proj.bias       (if o_proj_bias)     [hidden]
//     post_attention_layernorm.weight                  [hidden]
//     mlp.{gate,up}_proj.weight                        [intermediate, hidden]
//     mlp.{gate,up}_proj.bias     (if mlp_bias)        [intermediate]
//     mlp.down_proj.weight                             [hidden, intermediate]
//     mlp.down_proj.bias          (if mlp_bias)        [hidden]
//   model.norm.weight                                  [hidden]
//   lm_head.weight              (unless tied)          [vocab, hidden]
// `c` should pass ValidateModelConfig (sizes positive and bounded).
std::vector<ExpectedTensor> ExpectedModelTensors(const ModelConfig& c);

// Checks that `ckpt` holds exactly the tensors of ExpectedModelTensors(c), each of a float dtype
// and the expected shape. Reports the first missing tensor or wrong shape in the order above,
// with expected and actual shapes, then any unexpected tensor. Ignored: "*rotary_emb.inv_freq"
// buffers some exports include, and lm_head.weight in a tied model if it has the embedding's
// shape (some exporters write the tied copy out). InvalidArgument naming ckpt.dir().
Status CheckCheckpointMatchesConfig(const Checkpoint& ckpt, const ModelConfig& c);

}  // namespace millipede
