// Per-layer scales of an FP8 KV cache, from a calibration file, applied as an exact
// reparametrisation of the attention weights.
//
// With scales, layer l's cache holds k / k_scale[l] and v / v_scale[l] instead of k and v: keys
// and values beyond E4M3's range (+-448) are no longer clipped, and small ones may use more of
// its precision. Nothing that reads the cache changes. The scales are folded into the weights
// when they are loaded: q_proj (weight and bias) times k_scale, k_proj times 1 / k_scale, v_proj
// times 1 / v_scale, o_proj's weight times v_scale. RoPE and attention's weighted sum are linear,
// so q.k, softmax(q.k) and o_proj(softmax(q.k) v) are those of the model as given, on every
// backend, attention path and rank alike. Each scale is rounded up to a power of two: the folded
// weights are then exact (only exponents change; ScaleWeightExactly refuses a weight that would
// overflow or lose bits), and a calibrated scale of amax / 448 still keeps |k / k_scale| <= 448.
//
// File (JSON): {"k_scale": [L numbers], "v_scale": [L numbers]}, one per layer of the model, each
// finite and > 0, e.g. the largest |k| (after RoPE) and |v| a layer produces over calibration
// text, divided by 448.
#pragma once

#include <string>
#include <vector>

#include "common/json_util.h"
#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

struct KvScales {
  std::vector<float> k, v;  // per layer, powers of two; both empty: no scales
  bool empty() const { return k.empty() && v.empty(); }
};

// The scales of a parsed file (`what` names it in errors), rounded up to powers of two.
StatusOr<KvScales> ParseKvScales(const Json& json, const std::string& what);
StatusOr<KvScales> ReadKvScalesFile(const std::string& path);
// One scale of each kind per layer of a model of `num_layers`, each a power of two.
Status CheckKvScales(const KvScales& scales, int64_t num_layers);

// The factor `scales` fold into the model weight called `name` (Hugging Face naming, e.g.
// "model.layers.3.self_attn.q_proj.weight"); 1 for every weight they leave as it is.
float KvScaleFactor(const KvScales& scales, const std::string& name);

// `weight` (F32, BF16 or F16) times `factor` (a power of two) as a new host tensor of its dtype
// and shape, exactly: InvalidArgument naming `name` if an element would overflow or lose bits.
StatusOr<HostTensor> ScaleWeightExactly(ConstTensorView weight, float factor,
                                        const std::string& name);

}  // namespace millipede
