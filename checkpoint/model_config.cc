#include "checkpoint/model_config.h"

#include <cmath>
#include <limits>

namespace millipede {
namespace {

// Caps on sizes keep products like heads * head_dim far from overflow and reject nonsense early.
constexpr int64_t kMaxDim = int64_t{1} << 24;
constexpr int64_t kMaxLayers = int64_t{1} << 16;

// transformers' Qwen2Config defaults, used only when use_sliding_window is true.
constexpr int64_t kQwen2DefaultSlidingWindow = 4096;
constexpr int64_t kQwen2DefaultMaxWindowLayers = 28;

bool Present(const Json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

StatusOr<int32_t> ParseTokenId(const Json& v, const char* key, const std::string& what) {
  MP_REQUIRE(v.is_number_integer() && v.get<int64_t>() >= 0 &&
                 v.get<int64_t>() <= std::numeric_limits<int32_t>::max(),
             what, ": \"", key, "\" must be a non-negative 32-bit token id, got ", DescribeJson(v));
  return static_cast<int32_t>(v.get<int64_t>());
}

Status ParseTokenIds(const Json& j, const std::string& what, ModelConfig* c) {
  if (Present(j, "bos_token_id")) {
    MP_ASSIGN_OR_RETURN(c->bos_token_id, ParseTokenId(j["bos_token_id"], "bos_token_id", what));
  }
  if (!Present(j, "eos_token_id")) return OkStatus();
  const Json& eos = j["eos_token_id"];
  if (eos.is_array()) {
    for (const Json& id : eos) {
      MP_ASSIGN_OR_RETURN(int32_t v, ParseTokenId(id, "eos_token_id", what));
      c->eos_token_ids.push_back(v);
    }
  } else {
    MP_ASSIGN_OR_RETURN(int32_t v, ParseTokenId(eos, "eos_token_id", what));
    c->eos_token_ids.push_back(v);
  }
  return OkStatus();
}

// Reads "rope_scaling" (or transformers 5's "rope_parameters") and rope_theta.
Status ParseRope(const Json& j, const std::string& what, ModelConfig* c) {
  const Json* scaling = nullptr;
  std::string where;
  if (Present(j, "rope_scaling")) {
    scaling = &j["rope_scaling"];
    where = what + ": rope_scaling";
  } else if (Present(j, "rope_parameters")) {
    scaling = &j["rope_parameters"];
    where = what + ": rope_parameters";
  }
  if (Present(j, "rope_theta")) {
    MP_ASSIGN_OR_RETURN(c->rope_theta, JsonGetNumber(j, "rope_theta", what));
  } else if (scaling != nullptr && scaling->is_object() && Present(*scaling, "rope_theta")) {
    MP_ASSIGN_OR_RETURN(c->rope_theta, JsonGetNumber(*scaling, "rope_theta", where));
  }
  if (scaling == nullptr) return OkStatus();
  MP_REQUIRE(scaling->is_object(), where, " must be an object or null, got ", DescribeJson(*scaling));

  // Older configs spell the key "type", newer ones "rope_type"; transformers accepts either.
  std::string type;
  for (const char* key : {"rope_type", "type"}) {
    if (!Present(*scaling, key)) continue;
    MP_ASSIGN_OR_RETURN(std::string t, JsonGetString(*scaling, key, where));
    MP_REQUIRE(type.empty() || type == t, where, ": \"rope_type\" \"", type, "\" and \"type\" \"",
               t, "\" disagree");
    type = t;
  }
  MP_REQUIRE(!type.empty(), where, ": missing \"rope_type\" (or \"type\")");

  RopeScaling& rs = c->rope_scaling;
  if (type == "default") {
    rs = RopeScaling();
  } else if (type == "linear" || type == "dynamic") {
    rs.type = type == "linear" ? RopeScalingType::kLinear : RopeScalingType::kDynamic;
    MP_ASSIGN_OR_RETURN(rs.factor, JsonGetNumber(*scaling, "factor", where));
  } else if (type == "llama3") {
    rs.type = RopeScalingType::kLlama3;
    MP_ASSIGN_OR_RETURN(rs.factor, JsonGetNumber(*scaling, "factor", where));
    MP_ASSIGN_OR_RETURN(rs.low_freq_factor, JsonGetNumber(*scaling, "low_freq_factor", where));
    MP_ASSIGN_OR_RETURN(rs.high_freq_factor, JsonGetNumber(*scaling, "high_freq_factor", where));
    MP_ASSIGN_OR_RETURN(rs.original_max_position_embeddings,
                        JsonGetInt(*scaling, "original_max_position_embeddings", where));
  } else {
    return InvalidArgumentError(where + ": unsupported type \"" + type +
                                "\" (supported: default, linear, dynamic, llama3)");
  }
  return OkStatus();
}

Status ParseSlidingWindow(const Json& j, const std::string& what, ModelConfig* c) {
  if (c->model_type == "mistral") {
    MP_ASSIGN_OR_RETURN(c->sliding_window, JsonGetIntOr(j, "sliding_window", 0, what));
  } else if (c->model_type == "qwen2") {
    MP_ASSIGN_OR_RETURN(bool use, JsonGetBoolOr(j, "use_sliding_window", false, what));
    if (!use) return OkStatus();
    MP_ASSIGN_OR_RETURN(int64_t window,
                        JsonGetIntOr(j, "sliding_window", kQwen2DefaultSlidingWindow, what));
    MP_ASSIGN_OR_RETURN(int64_t max_window_layers,
                        JsonGetIntOr(j, "max_window_layers", kQwen2DefaultMaxWindowLayers, what));
    // transformers applies the window to layers with index >= max_window_layers.
    if (max_window_layers >= c->num_hidden_layers) return OkStatus();
    MP_REQUIRE(max_window_layers <= 0, what, ": use_sliding_window with max_window_layers ",
               max_window_layers, " < num_hidden_layers ", c->num_hidden_layers,
               " (a window on only some layers) is not supported");
    c->sliding_window = window;
  }
  return OkStatus();
}

const char* Architecture(const std::string& model_type) {
  if (model_type == "mistral") return "MistralForCausalLM";
  if (model_type == "qwen2") return "Qwen2ForCausalLM";
  return "LlamaForCausalLM";
}

Status CheckSize(const char* name, int64_t value, int64_t limit) {
  MP_REQUIRE(value > 0, name, " must be positive, got ", value);
  MP_REQUIRE(value <= limit, name, " ", value, " exceeds the limit of ", limit);
  return OkStatus();
}

Status ValidateRopeScaling(const RopeScaling& rs) {
  if (rs.type == RopeScalingType::kNone) return OkStatus();
  const char* type = RopeScalingTypeName(rs.type);
  MP_REQUIRE(std::isfinite(rs.factor) && rs.factor >= 1.0, "rope_scaling (", type,
             ") factor must be >= 1, got ", rs.factor);
  if (rs.type != RopeScalingType::kLlama3) return OkStatus();
  MP_REQUIRE(rs.original_max_position_embeddings > 0,
             "rope_scaling (llama3) needs original_max_position_embeddings > 0, got ",
             rs.original_max_position_embeddings);
  MP_REQUIRE(std::isfinite(rs.low_freq_factor) && rs.low_freq_factor > 0,
             "rope_scaling (llama3) low_freq_factor must be positive, got ", rs.low_freq_factor);
  MP_REQUIRE(std::isfinite(rs.high_freq_factor) && rs.high_freq_factor > rs.low_freq_factor,
             "rope_scaling (llama3) high_freq_factor ", rs.high_freq_factor,
             " must exceed low_freq_factor ", rs.low_freq_factor);
  return OkStatus();
}

}  // namespace

bool operator==(const ModelConfig& a, const ModelConfig& b) {
  const RopeScaling& x = a.rope_scaling;
  const RopeScaling& y = b.rope_scaling;
  return a.model_type == b.model_type && a.vocab_size == b.vocab_size &&
         a.hidden_size == b.hidden_size && a.intermediate_size == b.intermediate_size &&
         a.num_hidden_layers == b.num_hidden_layers &&
         a.num_attention_heads == b.num_attention_heads &&
         a.num_key_value_heads == b.num_key_value_heads && a.head_dim == b.head_dim &&
         a.rms_norm_eps == b.rms_norm_eps && a.rope_theta == b.rope_theta && x.type == y.type &&
         x.factor == y.factor && x.low_freq_factor == y.low_freq_factor &&
         x.high_freq_factor == y.high_freq_factor &&
         x.original_max_position_embeddings == y.original_max_position_embeddings &&
         a.max_position_embeddings == b.max_position_embeddings &&
         a.tie_word_embeddings == b.tie_word_embeddings && a.qkv_bias == b.qkv_bias &&
         a.o_proj_bias == b.o_proj_bias && a.mlp_bias == b.mlp_bias &&
         a.bos_token_id == b.bos_token_id && a.eos_token_ids == b.eos_token_ids &&
         a.torch_dtype == b.torch_dtype && a.sliding_window == b.sliding_window &&
         a.hidden_act == b.hidden_act;
}

const char* RopeScalingTypeName(RopeScalingType type) {
  switch (type) {
    case RopeScalingType::kNone: return "default";
    case RopeScalingType::kLinear: return "linear";
    case RopeScalingType::kDynamic: return "dynamic";
    case RopeScalingType::kLlama3: return "llama3";
  }
  return "?";
}

StatusOr<ModelConfig> ParseModelConfig(const Json& j, const std::string& what) {
  MP_REQUIRE(j.is_object(), what, ": must be a JSON object, got ", j.type_name());
  ModelConfig c;
  MP_ASSIGN_OR_RETURN(c.model_type, JsonGetString(j, "model_type", what));
  MP_REQUIRE(c.model_type == "llama" || c.model_type == "mistral" || c.model_type == "qwen2", what,
             ": unsupported model_type \"", c.model_type, "\" (supported: llama, mistral, qwen2)");
  MP_ASSIGN_OR_RETURN(c.vocab_size, JsonGetInt(j, "vocab_size", what));
  MP_ASSIGN_OR_RETURN(c.hidden_size, JsonGetInt(j, "hidden_size", what));
  MP_ASSIGN_OR_RETURN(c.intermediate_size, JsonGetInt(j, "intermediate_size", what));
  MP_ASSIGN_OR_RETURN(c.num_hidden_layers, JsonGetInt(j, "num_hidden_layers", what));
  MP_ASSIGN_OR_RETURN(c.num_attention_heads, JsonGetInt(j, "num_attention_heads", what));
  MP_ASSIGN_OR_RETURN(c.num_key_value_heads,
                      JsonGetIntOr(j, "num_key_value_heads", c.num_attention_heads, what));
  if (Present(j, "head_dim")) {
    MP_ASSIGN_OR_RETURN(c.head_dim, JsonGetInt(j, "head_dim", what));
  } else if (c.num_attention_heads > 0) {  // otherwise validation reports the head count
    MP_REQUIRE(c.hidden_size % c.num_attention_heads == 0, what, ": hidden_size ", c.hidden_size,
               " is not divisible by num_attention_heads ", c.num_attention_heads,
               " (and no head_dim is given)");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  MP_ASSIGN_OR_RETURN(c.rms_norm_eps, JsonGetNumberOr(j, "rms_norm_eps", 1e-6, what));
  MP_RETURN_IF_ERROR(ParseRope(j, what, &c));
  MP_ASSIGN_OR_RETURN(c.max_position_embeddings, JsonGetInt(j, "max_position_embeddings", what));
  MP_ASSIGN_OR_RETURN(c.tie_word_embeddings, JsonGetBoolOr(j, "tie_word_embeddings", false, what));

  if (c.model_type == "llama") {
    MP_ASSIGN_OR_RETURN(c.qkv_bias, JsonGetBoolOr(j, "attention_bias", false, what));
    c.o_proj_bias = c.qkv_bias;
    MP_ASSIGN_OR_RETURN(c.mlp_bias, JsonGetBoolOr(j, "mlp_bias", false, what));
  } else if (c.model_type == "qwen2") {
    c.qkv_bias = true;
  }

  MP_RETURN_IF_ERROR(ParseTokenIds(j, what, &c));
  MP_ASSIGN_OR_RETURN(c.torch_dtype, JsonGetStringOr(j, "torch_dtype", "", what));
  if (c.torch_dtype.empty()) {
    MP_ASSIGN_OR_RETURN(c.torch_dtype, JsonGetStringOr(j, "dtype", "", what));
  }
  MP_RETURN_IF_ERROR(ParseSlidingWindow(j, what, &c));
  MP_ASSIGN_OR_RETURN(c.hidden_act, JsonGetStringOr(j, "hidden_act", "silu", what));
  MP_RETURN_IF_ERROR(ValidateModelConfig(c).WithContext(what));
  return c;
}

StatusOr<ModelConfig> LoadModelConfig(const std::string& path) {
  MP_ASSIGN_OR_RETURN(Json j, ParseJsonFile(path));
  return ParseModelConfig(j, path);
}

Json ModelConfigToJson(const ModelConfig& c) {
  Json j = Json::object();
  j["architectures"] = Json::array({Architecture(c.model_type)});
  j["model_type"] = c.model_type;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = c.hidden_act;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["tie_word_embeddings"] = c.tie_word_embeddings;

  const RopeScaling& rs = c.rope_scaling;
  if (rs.type == RopeScalingType::kNone) {
    j["rope_scaling"] = nullptr;
  } else {
    // Both spellings, so old and new transformers versions read it.
    Json s = {{"rope_type", RopeScalingTypeName(rs.type)},
              {"type", RopeScalingTypeName(rs.type)},
              {"factor", rs.factor}};
    if (rs.type == RopeScalingType::kLlama3) {
      s["low_freq_factor"] = rs.low_freq_factor;
      s["high_freq_factor"] = rs.high_freq_factor;
      s["original_max_position_embeddings"] = rs.original_max_position_embeddings;
    }
    j["rope_scaling"] = s;
  }

  if (c.model_type == "llama") {
    j["attention_bias"] = c.qkv_bias;
    j["mlp_bias"] = c.mlp_bias;
  } else if (c.model_type == "mistral") {
    j["sliding_window"] = c.sliding_window > 0 ? Json(c.sliding_window) : Json(nullptr);
  } else if (c.model_type == "qwen2") {
    j["use_sliding_window"] = c.sliding_window > 0;
    j["sliding_window"] = c.sliding_window > 0 ? Json(c.sliding_window) : Json(nullptr);
    j["max_window_layers"] = c.sliding_window > 0 ? 0 : c.num_hidden_layers;
  }

  if (c.bos_token_id.has_value()) j["bos_token_id"] = *c.bos_token_id;
  if (c.eos_token_ids.size() == 1) {
    j["eos_token_id"] = c.eos_token_ids[0];
  } else if (!c.eos_token_ids.empty()) {
    j["eos_token_id"] = c.eos_token_ids;
  }
  if (!c.torch_dtype.empty()) j["torch_dtype"] = c.torch_dtype;
  return j;
}

Status ValidateModelConfig(const ModelConfig& c) {
  const std::string& type = c.model_type;
  MP_REQUIRE(type == "llama" || type == "mistral" || type == "qwen2", "model_type \"", type,
             "\" is not supported (supported: llama, mistral, qwen2)");
  MP_REQUIRE(c.hidden_act == "silu", "hidden_act \"", c.hidden_act,
             "\" is not supported (only silu)");
  MP_RETURN_IF_ERROR(CheckSize("vocab_size", c.vocab_size, kMaxDim));
  MP_RETURN_IF_ERROR(CheckSize("hidden_size", c.hidden_size, kMaxDim));
  MP_RETURN_IF_ERROR(CheckSize("intermediate_size", c.intermediate_size, kMaxDim));
  MP_RETURN_IF_ERROR(CheckSize("num_hidden_layers", c.num_hidden_layers, kMaxLayers));
  MP_RETURN_IF_ERROR(CheckSize("num_attention_heads", c.num_attention_heads, kMaxDim));
  MP_RETURN_IF_ERROR(CheckSize("num_key_value_heads", c.num_key_value_heads, kMaxDim));
  MP_RETURN_IF_ERROR(CheckSize("head_dim", c.head_dim, kMaxDim));
  // 2^34 positions (16G tokens) is far beyond any model, and keeps position arithmetic and
  // KV-cache sizes (positions x layers x heads x head_dim x bytes) clear of int64 overflow.
  MP_RETURN_IF_ERROR(CheckSize("max_position_embeddings", c.max_position_embeddings,
                               int64_t{1} << 34));
  MP_REQUIRE(std::isfinite(c.rope_scaling.factor) && c.rope_scaling.factor <= 1024,
             "rope_scaling factor must be at most 1024, got ", c.rope_scaling.factor);
  MP_REQUIRE(c.num_attention_heads % c.num_key_value_heads == 0, "num_attention_heads ",
             c.num_attention_heads, " is not divisible by num_key_value_heads ",
             c.num_key_value_heads);
  MP_REQUIRE(c.head_dim % 2 == 0, "head_dim ", c.head_dim,
             " must be even (rotary embeddings rotate pairs of dimensions)");
  MP_REQUIRE(std::isfinite(c.rms_norm_eps) && c.rms_norm_eps > 0,
             "rms_norm_eps must be positive, got ", c.rms_norm_eps);
  MP_REQUIRE(std::isfinite(c.rope_theta) && c.rope_theta > 0, "rope_theta must be positive, got ",
             c.rope_theta);
  MP_RETURN_IF_ERROR(ValidateRopeScaling(c.rope_scaling));

  if (type == "llama") {
    MP_REQUIRE(c.qkv_bias == c.o_proj_bias,
               "llama's attention_bias puts a bias on all of q, k, v and o, or on none");
    MP_REQUIRE(c.sliding_window == 0, "llama has no sliding window, got ", c.sliding_window);
  } else if (type == "mistral") {
    MP_REQUIRE(!c.qkv_bias && !c.o_proj_bias && !c.mlp_bias, "mistral has no biases");
  } else {
    MP_REQUIRE(c.qkv_bias && !c.o_proj_bias && !c.mlp_bias,
               "qwen2 has q, k and v biases and no o or mlp biases");
  }
  MP_REQUIRE(c.sliding_window >= 0, "sliding_window must not be negative, got ", c.sliding_window);

  if (c.bos_token_id.has_value()) {
    MP_REQUIRE(*c.bos_token_id >= 0 && *c.bos_token_id < c.vocab_size, "bos_token_id ",
               *c.bos_token_id, " is outside the vocabulary of ", c.vocab_size);
  }
  for (int32_t id : c.eos_token_ids) {
    MP_REQUIRE(id >= 0 && id < c.vocab_size, "eos_token_id ", id, " is outside the vocabulary of ",
               c.vocab_size);
  }
  return OkStatus();
}

}  // namespace millipede
