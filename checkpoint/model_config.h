// The model architecture described by a Hugging Face config.json, for the decoder-only families
// we serve: llama, mistral and qwen2 (pre-norm RMSNorm, rotary attention with grouped KV heads,
// SiLU-gated MLP).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/json_util.h"
#include "common/rope_scaling.h"
#include "common/status.h"

namespace millipede {

struct ModelConfig {
  std::string model_type;  // "llama", "mistral" or "qwen2"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;  // width of the gated MLP
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // config default: num_attention_heads
  int64_t head_dim = 0;             // config default: hidden_size / num_attention_heads
  double rms_norm_eps = 1e-6;       // config default as in transformers
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;  // "type" or "rope_type": default, linear, dynamic or llama3
  int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;  // lm_head reuses model.embed_tokens.weight
  // Biases, derived from the family: llama's attention_bias puts one on q, k, v and o; qwen2 always
  // has q, k, v biases and never an o bias; mistral has none. Only llama has mlp_bias (on gate,
  // up and down).
  bool qkv_bias = false;
  bool o_proj_bias = false;
  bool mlp_bias = false;
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;  // eos_token_id: one id or a list; empty if absent
  std::string torch_dtype;             // informational: "bfloat16", ... ("torch_dtype" or "dtype")
  // Attention window in tokens; 0 = full attention. Mistral's sliding_window; qwen2's only when
  // use_sliding_window is true, and only if it covers all layers (max_window_layers 0) — a
  // window on some layers only is rejected — or none (max_window_layers >= num_hidden_layers).
  int64_t sliding_window = 0;
  std::string hidden_act = "silu";  // the only activation supported
};

// Field-by-field equality (doubles compared exactly).
bool operator==(const ModelConfig& a, const ModelConfig& b);

// "default" (for kNone), "linear", "dynamic" or "llama3".
const char* RopeScalingTypeName(RopeScalingType type);

// Reads a parsed config.json and validates it (ValidateModelConfig). Fields transformers gives
// defaults to take the same defaults here, except the sizes and max_position_embeddings, which
// must be present. Newer transformers' "rope_parameters" is read when "rope_scaling" is absent.
// Unknown keys are ignored. Errors are InvalidArgument starting with `what`.
StatusOr<ModelConfig> ParseModelConfig(const Json& j, const std::string& what);
// Reads and parses the file at `path` (normally <model_dir>/config.json).
StatusOr<ModelConfig> LoadModelConfig(const std::string& path);

// A config.json for `c` that transformers loads as the matching *ForCausalLM architecture and
// that ParseModelConfig reads back equal to `c` (for a config that passes ValidateModelConfig).
Json ModelConfigToJson(const ModelConfig& c);

// Checks the invariants the rest of the system relies on: known model_type and hidden_act;
// positive sizes within sane limits; heads divisible by KV heads; even head_dim; positive finite
// eps and theta; scaling factor >= 1; llama3 scaling with original_max_position_embeddings > 0
// and 0 < low_freq_factor < high_freq_factor; biases and sliding window as the family allows;
// token ids inside the vocabulary. InvalidArgument naming the field and value.
Status ValidateModelConfig(const ModelConfig& c);

}  // namespace millipede
