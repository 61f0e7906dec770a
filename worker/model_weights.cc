#include "worker/model_weights.h"

#include <cstdint>
#include <cstring>
#include <map>

#include "checkpoint/model_tensors.h"

namespace millipede {

std::vector<std::vector<std::string>> FusedWeightGroups(const ModelConfig& config,
                                                        int64_t layer) {
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  std::vector<std::vector<std::string>> groups = {
      {p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight"},
      {p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"}};
  if (config.qkv_bias)
    groups.push_back(
        {p + "self_attn.q_proj.bias", p + "self_attn.k_proj.bias", p + "self_attn.v_proj.bias"});
  if (config.mlp_bias) groups.push_back({p + "mlp.gate_proj.bias", p + "mlp.up_proj.bias"});
  return groups;
}

ConstTensorView AdjacentRows(std::initializer_list<ConstTensorView> parts) {
  if (parts.size() == 0) return {};
  const ConstTensorView& first = *parts.begin();
  ConstTensorView whole = first;
  const char* next = static_cast<const char*>(first.data);
  for (const ConstTensorView& part : parts) {
    if (part.data == nullptr || part.data != next || part.dtype != first.dtype ||
        part.rank() != first.rank() || part.rank() < 1)
      return {};
    for (int d = 1; d < part.rank(); ++d)
      if (part.dim(d) != first.dim(d)) return {};
    if (&part != &first) whole.shape.dims[0] += part.dim(0);
    next += part.NumBytes();
  }
  return whole;
}

template <typename GetFn>
Status ModelWeights::Assign(const ModelConfig& config, Backend& backend, const KvScales& kv_scales,
                            GetFn get) {
  MP_RETURN_IF_ERROR(CheckKvScales(kv_scales, config.num_hidden_layers));
  // Adopts the weights `names` together, in order, into `outs`.
  auto adopt = [&](const std::vector<std::string>& names,
                   std::initializer_list<ConstTensorView*> outs) -> Status {
    MP_ASSERT(names.size() == outs.size(), "one output per weight");
    std::vector<ConstTensorView> hosts;
    std::vector<NamedHostTensor> scaled;  // copies of the weights kv_scales fold into
    for (const std::string& name : names) {
      MP_ASSIGN_OR_RETURN(ConstTensorView host, get(name));
      const float factor = KvScaleFactor(kv_scales, name);
      if (factor != 1.0f) {
        MP_ASSIGN_OR_RETURN(HostTensor copy, ScaleWeightExactly(host, factor, name));
        host = AsConst(copy.view());
        scaled.push_back({name + " (KV-scaled)", std::move(copy)});
      }
      hosts.push_back(host);
    }
    MP_ASSIGN_OR_RETURN(std::vector<ConstTensorView> adopted, backend.AdoptWeights(hosts));
    MP_ASSERT(adopted.size() == hosts.size(), "the backend adopted every weight");
    // The CPU backend reads host weights in place; a device backend has copied them.
    if (backend.kind() == BackendKind::kCpu)
      for (NamedHostTensor& t : scaled) generated_.push_back(std::move(t));
    size_t i = 0;
    for (ConstTensorView* out : outs) *out = adopted[i++];
    return OkStatus();
  };
  MP_RETURN_IF_ERROR(adopt({"model.embed_tokens.weight"}, {&embed_tokens}));
  MP_RETURN_IF_ERROR(adopt({"model.norm.weight"}, {&final_norm}));
  if (config.tie_word_embeddings) {
    lm_head = embed_tokens;
  } else {
    MP_RETURN_IF_ERROR(adopt({"lm_head.weight"}, {&lm_head}));
  }
  layers.resize(static_cast<size_t>(config.num_hidden_layers));
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    LayerWeights& l = layers[static_cast<size_t>(i)];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    // The groups of FusedWeightGroups, in its order.
    const std::vector<std::vector<std::string>> groups = FusedWeightGroups(config, i);
    size_t g = 0;
    MP_RETURN_IF_ERROR(adopt(groups[g++], {&l.q_proj, &l.k_proj, &l.v_proj}));
    MP_RETURN_IF_ERROR(adopt(groups[g++], {&l.gate_proj, &l.up_proj}));
    if (config.qkv_bias) MP_RETURN_IF_ERROR(adopt(groups[g++], {&l.q_bias, &l.k_bias, &l.v_bias}));
    if (config.mlp_bias) MP_RETURN_IF_ERROR(adopt(groups[g++], {&l.gate_bias, &l.up_bias}));
    MP_ASSERT(g == groups.size(), "every fused group adopted");
    MP_RETURN_IF_ERROR(adopt({p + "input_layernorm.weight"}, {&l.input_norm}));
    MP_RETURN_IF_ERROR(adopt({p + "post_attention_layernorm.weight"}, {&l.post_attention_norm}));
    MP_RETURN_IF_ERROR(adopt({p + "self_attn.o_proj.weight"}, {&l.o_proj}));
    if (config.o_proj_bias)
      MP_RETURN_IF_ERROR(adopt({p + "self_attn.o_proj.bias"}, {&l.o_bias}));
    MP_RETURN_IF_ERROR(adopt({p + "mlp.down_proj.weight"}, {&l.down_proj}));
    if (config.mlp_bias) MP_RETURN_IF_ERROR(adopt({p + "mlp.down_proj.bias"}, {&l.down_bias}));
    l.qkv_proj = AdjacentRows({l.q_proj, l.k_proj, l.v_proj});
    l.gate_up_proj = AdjacentRows({l.gate_proj, l.up_proj});
    if (config.qkv_bias) l.qkv_bias = AdjacentRows({l.q_bias, l.k_bias, l.v_bias});
    if (config.mlp_bias) l.gate_up_bias = AdjacentRows({l.gate_bias, l.up_bias});
  }
  dtype = layers.empty() ? embed_tokens.dtype : layers[0].q_proj.dtype;
  return OkStatus();
}

StatusOr<std::unique_ptr<ModelWeights>> ModelWeights::Load(const std::string& model_dir,
                                                           const ModelConfig& config,
                                                           Backend& backend,
                                                           const KvScales& kv_scales) {
  auto w = std::unique_ptr<ModelWeights>(new ModelWeights());
  MP_ASSIGN_OR_RETURN(w->checkpoint_, Checkpoint::Open(model_dir));
  MP_RETURN_IF_ERROR(CheckCheckpointMatchesConfig(w->checkpoint_, config));
  const Checkpoint& ckpt = w->checkpoint_;
  std::vector<NamedHostTensor>& copies = w->generated_;
  MP_RETURN_IF_ERROR(w->Assign(
      config, backend, kv_scales, [&](const std::string& name) -> StatusOr<ConstTensorView> {
        MP_ASSIGN_OR_RETURN(ConstTensorView view, ckpt.Get(name));
        // The format does not align tensors; the kernels read whole elements, so a misaligned
        // tensor is copied into aligned memory instead of being used in place.
        if (reinterpret_cast<uintptr_t>(view.data) % DTypeSize(view.dtype) == 0) return view;
        copies.push_back({name, HostTensor(view.dtype, view.shape)});
        std::memcpy(copies.back().tensor.data<void>(), view.data, view.NumBytes());
        return AsConst(copies.back().tensor.view());
      }));
  return w;
}

StatusOr<std::unique_ptr<ModelWeights>> ModelWeights::Random(const ModelConfig& config,
                                                             const RandomWeightsOptions& options,
                                                             Backend& backend,
                                                             const KvScales& kv_scales) {
  MP_ASSIGN_OR_RETURN(std::vector<NamedHostTensor> tensors, GenerateRandomWeights(config, options));
  return FromHost(config, std::move(tensors), backend, kv_scales);
}

StatusOr<std::unique_ptr<ModelWeights>> ModelWeights::FromHost(const ModelConfig& config,
                                                               std::vector<NamedHostTensor> tensors,
                                                               Backend& backend,
                                                               const KvScales& kv_scales) {
  auto w = std::unique_ptr<ModelWeights>(new ModelWeights());
  w->generated_ = std::move(tensors);
  std::map<std::string, ConstTensorView> by_name;
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < w->generated_.size(); ++i) {
    by_name[w->generated_[i].name] = AsConst(w->generated_[i].tensor.view());
    index[w->generated_[i].name] = i;
  }
  if (backend.kind() == BackendKind::kCpu) {
    // The CPU backend uses host memory in place: each fused group is moved into one tensor, its
    // members back to back, as a device backend places them when it copies them, so that the
    // fused projections run here too. (The bits are those given; only the place changes.)
    for (int64_t layer = 0; layer < config.num_hidden_layers; ++layer) {
      for (const std::vector<std::string>& group : FusedWeightGroups(config, layer)) {
        for (const std::string& name : group)
          MP_REQUIRE(index.count(name) != 0, "the model's weights lack ", name);
        // The group's dtype by value: the first member is emptied once it has been packed.
        const HostTensor& first = w->generated_[index.at(group[0])].tensor;
        const DType dtype = first.dtype();
        Shape shape = first.shape();
        shape.dims[0] = 0;
        for (const std::string& name : group)
          shape.dims[0] += w->generated_[index.at(name)].tensor.shape().dims[0];
        NamedHostTensor packed{group[0] + " (with the rest of its group)",
                               HostTensor(dtype, shape)};
        char* next = packed.tensor.data<char>();
        for (const std::string& name : group) {
          HostTensor& member = w->generated_[index.at(name)].tensor;
          MP_REQUIRE(member.dtype() == dtype, name, " is ", DTypeName(member.dtype()), ", ",
                     group[0], " ", DTypeName(dtype));
          std::memcpy(next, member.data<char>(), member.NumBytes());
          by_name[name] = ConstTensorView{next, member.dtype(), member.shape()};
          next += member.NumBytes();
          member = HostTensor();
        }
        w->generated_.push_back(std::move(packed));
      }
    }
  }
  MP_RETURN_IF_ERROR(w->Assign(config, backend, kv_scales,
                               [&](const std::string& name) -> StatusOr<ConstTensorView> {
                                 auto it = by_name.find(name);
                                 if (it == by_name.end())
                                   return InvalidArgumentError("the model's weights lack " + name);
                                 return it->second;
                               }));
  // A device backend holds its own copies; the host tensors are then no longer needed.
  if (backend.kind() != BackendKind::kCpu) w->generated_.clear();
  return w;
}

}  // namespace millipede
