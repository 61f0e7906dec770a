#include "checkpoint/model_tensors.h"

#include <set>
#include <string_view>

namespace millipede {
namespace {

constexpr std::string_view kRotaryBufferSuffix = "rotary_emb.inv_freq";
constexpr const char* kLmHead = "lm_head.weight";

}  // namespace

std::vector<ExpectedTensor> ExpectedModelTensors(const ModelConfig& c) {
  const int64_t hidden = c.hidden_size;
  const int64_t q_rows = c.num_attention_heads * c.head_dim;
  const int64_t kv_rows = c.num_key_value_heads * c.head_dim;
  const int64_t inter = c.intermediate_size;
  std::vector<ExpectedTensor> out;
  out.push_back({"model.embed_tokens.weight", {c.vocab_size, hidden}});
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    out.push_back({p + "input_layernorm.weight", {hidden}});
    out.push_back({p + "self_attn.q_proj.weight", {q_rows, hidden}});
    if (c.qkv_bias) out.push_back({p + "self_attn.q_proj.bias", {q_rows}});
    out.push_back({p + "self_attn.k_proj.weight", {kv_rows, hidden}});
    if (c.qkv_bias) out.push_back({p + "self_attn.k_proj.bias", {kv_rows}});
    out.push_back({p + "self_attn.v_proj.weight", {kv_rows, hidden}});
    if (c.qkv_bias) out.push_back({p + "self_attn.v_proj.bias", {kv_rows}});
    out.push_back({p + "self_attn.o_proj.weight", {hidden, q_rows}});
    if (c.o_proj_bias) out.push_back({p + "self_attn.o_proj.bias", {hidden}});
    out.push_back({p + "post_attention_layernorm.weight", {hidden}});
    out.push_back({p + "mlp.gate_proj.weight", {inter, hidden}});
    if (c.mlp_bias) out.push_back({p + "mlp.gate_proj.bias", {inter}});
    out.push_back({p + "mlp.up_proj.weight", {inter, hidden}});
    if (c.mlp_bias) out.push_back({p + "mlp.up_proj.bias", {inter}});
    out.push_back({p + "mlp.down_proj.weight", {hidden, inter}});
    if (c.mlp_bias) out.push_back({p + "mlp.down_proj.bias", {hidden}});
  }
  out.push_back({"model.norm.weight", {hidden}});
  if (!c.tie_word_embeddings) out.push_back({kLmHead, {c.vocab_size, hidden}});
  return out;
}

Status CheckCheckpointMatchesConfig(const Checkpoint& ckpt, const ModelConfig& c) {
  const std::string& dir = ckpt.dir();
  std::vector<ExpectedTensor> expected = ExpectedModelTensors(c);
  if (c.tie_word_embeddings && ckpt.Has(kLmHead)) {
    // A tied copy is tolerated but must still look like the embedding.
    expected.push_back({kLmHead, {c.vocab_size, c.hidden_size}});
  }
  std::set<std::string_view> wanted;
  for (const ExpectedTensor& e : expected) {
    const TensorInfo* info = ckpt.Find(e.name);
    MP_REQUIRE(info != nullptr, dir, ": checkpoint lacks tensor \"", e.name, "\" (shape ",
               e.shape.ToString(), ") that the ", c.model_type, " config requires");
    MP_REQUIRE(info->shape == e.shape, dir, ": tensor \"", e.name, "\" has shape ",
               info->shape.ToString(), ", expected ", e.shape.ToString());
    MP_REQUIRE(IsFloatDType(info->dtype), dir, ": tensor \"", e.name, "\" has dtype ",
               DTypeName(info->dtype), "; weights must be F32, F16, BF16 or F64");
    wanted.insert(e.name);
  }
  std::vector<std::string> extra;
  for (const std::string& name : ckpt.TensorNames()) {
    if (wanted.count(name) > 0) continue;
    if (std::string_view(name).ends_with(kRotaryBufferSuffix)) continue;
    extra.push_back(name);
  }
  if (!extra.empty()) {
    std::string more =
        extra.size() > 1 ? " (and " + std::to_string(extra.size() - 1) + " more)" : "";
    return InvalidArgumentError(dir + ": unexpected tensor \"" + extra.front() + "\"" + more +
                                " that the " + c.model_type + " config does not use");
  }
  return OkStatus();
}

}  // namespace millipede
