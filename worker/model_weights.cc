#include "worker/model_weights.h"

#include <cstdint>
#include <cstring>
#include <map>

#include "common/checkpoint/model_tensors.h"

namespace millipede {

template <typename GetFn>
Status ModelWeights::Assign(const ModelConfig& config, Backend& backend, GetFn get) {
  auto adopt = [&](const std::string& name, ConstTensorView* out) -> Status {
    MP_ASSIGN_OR_RETURN(ConstTensorView host, get(name));
    MP_ASSIGN_OR_RETURN(*out, backend.AdoptWeight(host));
    return OkStatus();
  };
  auto adopt_if = [&](bool present, const std::string& name, ConstTensorView* out) -> Status {
    if (!present) return OkStatus();
    return adopt(name, out);
  };
  MP_RETURN_IF_ERROR(adopt("model.embed_tokens.weight", &embed_tokens));
  MP_RETURN_IF_ERROR(adopt("model.norm.weight", &final_norm));
  if (config.tie_word_embeddings) {
    lm_head = embed_tokens;
  } else {
    MP_RETURN_IF_ERROR(adopt("lm_head.weight", &lm_head));
  }
  layers.resize(static_cast<size_t>(config.num_hidden_layers));
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    LayerWeights& l = layers[static_cast<size_t>(i)];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    MP_RETURN_IF_ERROR(adopt(p + "input_layernorm.weight", &l.input_norm));
    MP_RETURN_IF_ERROR(adopt(p + "post_attention_layernorm.weight", &l.post_attention_norm));
    MP_RETURN_IF_ERROR(adopt(p + "self_attn.q_proj.weight", &l.q_proj));
    MP_RETURN_IF_ERROR(adopt(p + "self_attn.k_proj.weight", &l.k_proj));
    MP_RETURN_IF_ERROR(adopt(p + "self_attn.v_proj.weight", &l.v_proj));
    MP_RETURN_IF_ERROR(adopt(p + "self_attn.o_proj.weight", &l.o_proj));
    MP_RETURN_IF_ERROR(adopt_if(config.qkv_bias, p + "self_attn.q_proj.bias", &l.q_bias));
    MP_RETURN_IF_ERROR(adopt_if(config.qkv_bias, p + "self_attn.k_proj.bias", &l.k_bias));
    MP_RETURN_IF_ERROR(adopt_if(config.qkv_bias, p + "self_attn.v_proj.bias", &l.v_bias));
    MP_RETURN_IF_ERROR(adopt_if(config.o_proj_bias, p + "self_attn.o_proj.bias", &l.o_bias));
    MP_RETURN_IF_ERROR(adopt(p + "mlp.gate_proj.weight", &l.gate_proj));
    MP_RETURN_IF_ERROR(adopt(p + "mlp.up_proj.weight", &l.up_proj));
    MP_RETURN_IF_ERROR(adopt(p + "mlp.down_proj.weight", &l.down_proj));
    MP_RETURN_IF_ERROR(adopt_if(config.mlp_bias, p + "mlp.gate_proj.bias", &l.gate_bias));
    MP_RETURN_IF_ERROR(adopt_if(config.mlp_bias, p + "mlp.up_proj.bias", &l.up_bias));
    MP_RETURN_IF_ERROR(adopt_if(config.mlp_bias, p + "mlp.down_proj.bias", &l.down_bias));
  }
  dtype = layers.empty() ? embed_tokens.dtype : layers[0].q_proj.dtype;
  return OkStatus();
}

StatusOr<std::unique_ptr<ModelWeights>> ModelWeights::Load(const std::string& model_dir,
                                                           const ModelConfig& config,
                                                           Backend& backend) {
  auto w = std::unique_ptr<ModelWeights>(new ModelWeights());
  MP_ASSIGN_OR_RETURN(w->checkpoint_, Checkpoint::Open(model_dir));
  MP_RETURN_IF_ERROR(CheckCheckpointMatchesConfig(w->checkpoint_, config));
  const Checkpoint& ckpt = w->checkpoint_;
  std::vector<NamedHostTensor>& copies = w->generated_;
  MP_RETURN_IF_ERROR(w->Assign(config, backend,
                               [&](const std::string& name) -> StatusOr<ConstTensorView> {
    MP_ASSIGN_OR_RETURN(ConstTensorView view, ckpt.Get(name));
    // The format does not align tensors; the kernels read whole elements, so a misaligned tensor
    // is copied into aligned memory instead of being used in place.
    if (reinterpret_cast<uintptr_t>(view.data) % DTypeSize(view.dtype) == 0) return view;
    copies.push_back({name, HostTensor(view.dtype, view.shape)});
    std::memcpy(copies.back().tensor.data<void>(), view.data, view.NumBytes());
    return AsConst(copies.back().tensor.view());
  }));
  return w;
}

StatusOr<std::unique_ptr<ModelWeights>> ModelWeights::Random(const ModelConfig& config,
                                                             const RandomWeightsOptions& options,
                                                             Backend& backend) {
  auto w = std::unique_ptr<ModelWeights>(new ModelWeights());
  MP_ASSIGN_OR_RETURN(w->generated_, GenerateRandomWeights(config, options));
  std::map<std::string, const HostTensor*> by_name;
  for (const NamedHostTensor& t : w->generated_) by_name[t.name] = &t.tensor;
  MP_RETURN_IF_ERROR(w->Assign(config, backend,
                               [&](const std::string& name) -> StatusOr<ConstTensorView> {
                                 auto it = by_name.find(name);
                                 if (it == by_name.end())
                                   return InternalError("random weights lack " + name);
                                 return it->second->view();
                               }));
  // A device backend holds its own copies; the host tensors are then no longer needed.
  if (backend.kind() != BackendKind::kCpu) w->generated_.clear();
  return w;
}

}  // namespace millipede
