#include "models/model_presets.h"

namespace millipede {

std::vector<std::string> ModelPresetNames() { return {"tiny", "llama3-8b", "retrieval"}; }

StatusOr<ModelConfig> ModelPreset(const std::string& name) {
  ModelConfig c;
  c.model_type = "llama";
  c.hidden_act = "silu";
  c.torch_dtype = "bfloat16";
  if (name == "tiny") {
    c.vocab_size = 512;
    c.hidden_size = 64;
    c.intermediate_size = 176;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 16;
    c.rms_norm_eps = 1e-5;
    c.rope_theta = 10000.0;
    c.max_position_embeddings = 32768;
    c.tie_word_embeddings = false;
    return c;
  }
  if (name == "llama3-8b") {
    c.vocab_size = 128256;
    c.hidden_size = 4096;
    c.intermediate_size = 14336;
    c.num_hidden_layers = 32;
    c.num_attention_heads = 32;
    c.num_key_value_heads = 8;
    c.head_dim = 128;
    c.rms_norm_eps = 1e-5;
    c.rope_theta = 500000.0;
    c.rope_scaling.type = RopeScalingType::kLlama3;
    c.rope_scaling.factor = 8.0;
    c.rope_scaling.low_freq_factor = 1.0;
    c.rope_scaling.high_freq_factor = 4.0;
    c.rope_scaling.original_max_position_embeddings = 8192;
    c.max_position_embeddings = 4194304;
    c.bos_token_id = 128000;
    c.eos_token_ids = {128001, 128009};
    return c;
  }
  if (name == "retrieval") {
    // The constructed retrieval model (models/retrieval_model.h); its weights are set by hand for
    // this exact shape. vocab_size comes from its tokenizer.
    c.vocab_size = 2048;
    c.hidden_size = 512;  // = 8 heads x head_dim 64, so no reader needs head_dim from config.json
    c.intermediate_size = 128;
    c.num_hidden_layers = 3;
    c.num_attention_heads = 8;
    c.num_key_value_heads = 2;
    c.head_dim = 64;  // the tensor-core attention kernel takes head_dim 64 and 128
    c.rms_norm_eps = 1e-5;
    // Rotary frequencies theta^(-2j/64): pairs j >= 23 turn by at most 1.2e-7 rad over 2^20
    // positions, so the content dimensions placed there match at any distance.
    c.rope_theta = 1e18;
    c.max_position_embeddings = 1048576;
    c.tie_word_embeddings = false;
    return c;
  }
  std::string names;
  for (const auto& n : ModelPresetNames()) names += (names.empty() ? "" : ", ") + n;
  return InvalidArgumentError("unknown model preset \"" + name + "\" (known: " + names + ")");
}

}  // namespace millipede
