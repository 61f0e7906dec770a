#include "policy/policy_writer.h"

#include <algorithm>

#include "common/file_util.h"
#include "common/json_util.h"
#include "policy/pattern_table.h"

namespace millipede {
namespace {

// Insertion-ordered, so an entry reads "layer", "prefill", parameters, "decode".
using OrderedJson = nlohmann::ordered_json;

// A pattern's or role's parameter object, fields in the table's order.
template <typename Owner>
OrderedJson ToJson(const std::vector<PolicyParam<Owner>>& params, const Owner& owner) {
  OrderedJson object = OrderedJson::object();
  for (const PolicyParam<Owner>& p : params) object[p.name] = p.read(owner);
  return object;
}

// Whether two heads read the same values for a pattern's parameters.
bool SameParams(const PrefillPatternFacts& facts, const HeadPrefillPolicy& a,
                const HeadPrefillPolicy& b) {
  return std::all_of(
      facts.params.begin(), facts.params.end(),
      [&](const PolicyParam<HeadPrefillPolicy>& p) { return p.read(a) == p.read(b); });
}

// One name when every head has the same, else a list with one per head.
template <typename T, typename NameOf>
OrderedJson PerHeadNames(const std::vector<T>& values, NameOf name_of) {
  const bool uniform =
      std::all_of(values.begin(), values.end(), [&](const T& v) { return v == values.front(); });
  if (uniform) return name_of(values.front());
  OrderedJson list = OrderedJson::array();
  for (const T& v : values) list.push_back(name_of(v));
  return list;
}

// The parameters of the heads of pattern `facts`: one object when every head of the layer
// has the pattern with the same parameters, else a list with null for the other heads; nothing
// (null) when no head has the pattern.
OrderedJson HeadParams(const LayerPolicy& layer, const PrefillPatternFacts& facts) {
  const std::vector<HeadPrefillPolicy>& heads = layer.prefill;
  const auto has = [&](const HeadPrefillPolicy& h) { return h.pattern == facts.pattern; };
  if (std::none_of(heads.begin(), heads.end(), has)) return nullptr;
  const bool uniform = std::all_of(heads.begin(), heads.end(), [&](const HeadPrefillPolicy& h) {
    return has(h) && SameParams(facts, h, heads.front());
  });
  if (uniform) return ToJson(facts.params, heads.front());
  OrderedJson list = OrderedJson::array();
  for (const HeadPrefillPolicy& h : heads)
    list.push_back(has(h) ? ToJson(facts.params, h) : OrderedJson(nullptr));
  return list;
}

OrderedJson LayerEntry(const LayerPolicy& layer, size_t index) {
  OrderedJson entry;
  entry["layer"] = index;
  std::vector<PrefillPattern> patterns;
  for (const HeadPrefillPolicy& h : layer.prefill) patterns.push_back(h.pattern);
  entry["prefill"] = PerHeadNames(patterns, PrefillPatternName);
  for (const PrefillPatternFacts& facts : PrefillPatternTable()) {
    if (facts.params.empty()) continue;
    OrderedJson params = HeadParams(layer, facts);
    if (!params.is_null()) entry[facts.params_key] = std::move(params);
  }
  entry["decode"] = PerHeadNames(layer.decode, DecodeRoleName);
  return entry;
}

}  // namespace

std::string AttentionPolicyToJson(const AttentionPolicy& policy) {
  // Written by hand around compact pieces so that a layer is one line: a 32-layer policy stays a
  // file a person can read and diff.
  std::string out = "{\n  \"version\": 1,\n";
  out += "  \"dense_below_tokens\": " + std::to_string(policy.dense_below_tokens) + ",\n";
  if (policy.fp8_attention) out += "  \"fp8_attention\": true,\n";
  for (const DecodeRoleFacts& facts : DecodeRoleTable()) {
    if (facts.params.empty()) continue;
    out += "  \"" + std::string(facts.params_key) + "\": " + ToJson(facts.params, policy).dump() +
           ",\n";
  }
  out += "  \"layers\": [";
  for (size_t l = 0; l < policy.layers.size(); ++l) {
    out += (l == 0 ? "\n    " : ",\n    ") + LayerEntry(policy.layers[l], l).dump();
  }
  out += policy.layers.empty() ? "]\n}\n" : "\n  ]\n}\n";
  return out;
}

Status WriteAttentionPolicy(const std::string& path, const AttentionPolicy& policy,
                            int64_t num_layers, int64_t num_kv_heads) {
  MP_RETURN_IF_ERROR(ValidateAttentionPolicy(policy, num_layers, num_kv_heads, path));
  return WriteStringToFile(path, AttentionPolicyToJson(policy));
}

}  // namespace millipede
