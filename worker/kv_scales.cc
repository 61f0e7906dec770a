#include "worker/kv_scales.h"

#include <cmath>
#include <cstdlib>

namespace millipede {
namespace {

// The smallest power of two >= x (x finite and > 0), or 0 when that is not a normal float.
float PowerOfTwoAtLeast(double x) {
  int exponent = 0;
  const double mantissa = std::frexp(x, &exponent);  // x = mantissa * 2^exponent, [0.5, 1)
  const float p = std::ldexp(1.0f, mantissa == 0.5 ? exponent - 1 : exponent);
  return std::isnormal(p) ? p : 0.0f;
}

StatusOr<std::vector<float>> ParseScaleList(const Json& json, const char* key,
                                            const std::string& what) {
  auto it = json.find(key);
  MP_REQUIRE(it != json.end() && it->is_array(), what, ": \"", key,
             "\" must be an array of numbers, one per layer");
  MP_REQUIRE(!it->empty(), what, ": \"", key, "\" is empty");
  std::vector<float> out;
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& v = (*it)[i];
    MP_REQUIRE(v.is_number(), what, ": ", key, "[", i, "] is ", DescribeJson(v),
               ", expected a number");
    const double x = v.get<double>();
    MP_REQUIRE(std::isfinite(x) && x > 0, what, ": ", key, "[", i, "] = ", x,
               ", expected a finite number > 0");
    const float p = PowerOfTwoAtLeast(x);
    MP_REQUIRE(p > 0, what, ": ", key, "[", i, "] = ", x, " is outside the float range");
    out.push_back(p);
  }
  return out;
}

}  // namespace

StatusOr<KvScales> ParseKvScales(const Json& json, const std::string& what) {
  MP_REQUIRE(json.is_object(), what, ": expected an object with \"k_scale\" and \"v_scale\"");
  for (const auto& [key, value] : json.items())
    MP_REQUIRE(key == "k_scale" || key == "v_scale", what, ": unknown key \"", key,
               "\" (expected \"k_scale\" and \"v_scale\")");
  KvScales scales;
  MP_ASSIGN_OR_RETURN(scales.k, ParseScaleList(json, "k_scale", what));
  MP_ASSIGN_OR_RETURN(scales.v, ParseScaleList(json, "v_scale", what));
  MP_REQUIRE(scales.k.size() == scales.v.size(), what, ": ", scales.k.size(), " k_scale and ",
             scales.v.size(), " v_scale values, expected one of each per layer");
  return scales;
}

StatusOr<KvScales> ReadKvScalesFile(const std::string& path) {
  MP_ASSIGN_OR_RETURN(const Json json, ParseJsonFile(path));
  return ParseKvScales(json, path);
}

Status CheckKvScales(const KvScales& scales, int64_t num_layers) {
  if (scales.empty()) return OkStatus();
  MP_REQUIRE(static_cast<int64_t>(scales.k.size()) == num_layers &&
                 static_cast<int64_t>(scales.v.size()) == num_layers,
             "KV scales: ", scales.k.size(), " k_scale and ", scales.v.size(),
             " v_scale values for a model of ", num_layers, " layers");
  for (const auto& [name, list] : {std::pair{"k_scale", &scales.k}, {"v_scale", &scales.v}})
    for (size_t i = 0; i < list->size(); ++i) {
      const float s = (*list)[i];
      int exponent = 0;
      MP_REQUIRE(std::isnormal(s) && s > 0 && std::frexp(s, &exponent) == 0.5f, "KV scales: ", name,
                 "[", i, "] = ", s, " is not a power of two (ParseKvScales rounds them)");
    }
  return OkStatus();
}

float KvScaleFactor(const KvScales& scales, const std::string& name) {
  if (scales.empty()) return 1.0f;
  static constexpr char kPrefix[] = "model.layers.";
  if (name.rfind(kPrefix, 0) != 0) return 1.0f;
  const char* const digits = name.c_str() + sizeof(kPrefix) - 1;
  char* end = nullptr;
  const long layer = std::strtol(digits, &end, 10);
  if (end == digits || layer < 0 || static_cast<size_t>(layer) >= scales.k.size()) return 1.0f;
  const std::string rest(end);
  const float k = scales.k[static_cast<size_t>(layer)];
  const float v = scales.v[static_cast<size_t>(layer)];
  if (rest == ".self_attn.q_proj.weight" || rest == ".self_attn.q_proj.bias") return k;
  if (rest == ".self_attn.k_proj.weight" || rest == ".self_attn.k_proj.bias") return 1.0f / k;
  if (rest == ".self_attn.v_proj.weight" || rest == ".self_attn.v_proj.bias") return 1.0f / v;
  if (rest == ".self_attn.o_proj.weight") return v;
  return 1.0f;
}

StatusOr<HostTensor> ScaleWeightExactly(ConstTensorView weight, float factor,
                                        const std::string& name) {
  MP_REQUIRE(IsFloatDType(weight.dtype) && weight.dtype != DType::kF64, "KV scales: ", name,
             " is ", DTypeName(weight.dtype), ", expected F32, BF16 or F16");
  HostTensor out(weight.dtype, weight.shape);
  const size_t n = static_cast<size_t>(weight.NumElements());
  for (size_t i = 0; i < n; ++i) {
    const float x = LoadAsFloat(weight.data, weight.dtype, i);
    const float y = x * factor;
    StoreFromFloat(out.data<void>(), weight.dtype, i, y);
    const float stored = LoadAsFloat(out.data<void>(), weight.dtype, i);
    // Exact when the stored value scales back to x (NaN weights stay NaN).
    MP_REQUIRE((stored == y && stored / factor == x) || (std::isnan(x) && std::isnan(stored)),
               "KV scales: ", name, " times ", factor, " is not exact in ",
               DTypeName(weight.dtype), " (element ", i, ": ", x, "); choose a scale nearer 1");
  }
  return out;
}

}  // namespace millipede
