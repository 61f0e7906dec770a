#include "policy/policy_writer.h"

#include <algorithm>

#include "common/file_util.h"
#include "common/json_util.h"

namespace millipede {
namespace {

// Insertion-ordered, so an entry reads "layer", "prefill", parameters, "decode".
using OrderedJson = nlohmann::ordered_json;

OrderedJson ToJson(const AShapeParams& p) {
  return {{"sink_tokens", p.sink_tokens}, {"window_tokens", p.window_tokens}};
}
OrderedJson ToJson(const VerticalSlashParams& p) {
  return {{"last_queries", p.last_queries}, {"vertical", p.vertical}, {"slash", p.slash}};
}
OrderedJson ToJson(const BlockSparseParams& p) {
  return {{"block", p.block}, {"top_blocks", p.top_blocks}};
}
OrderedJson ToJson(const FilterParams& p) { return {{"top_k", p.top_k}}; }
OrderedJson ToJson(const StaticEvictionParams& p) {
  return {{"keep_tokens", p.keep_tokens},
          {"recent_tokens", p.recent_tokens},
          {"observed_queries", p.observed_queries}};
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

// The parameters of the heads whose pattern is `pattern`: one object when every head of the layer
// has the pattern with the same parameters, else a list with null for the other heads; nothing
// (null) when no head has the pattern.
template <typename P>
OrderedJson HeadParams(const LayerPolicy& layer, PrefillPattern pattern,
                       P HeadPrefillPolicy::*member) {
  const std::vector<HeadPrefillPolicy>& heads = layer.prefill;
  const auto has = [&](const HeadPrefillPolicy& h) { return h.pattern == pattern; };
  if (std::none_of(heads.begin(), heads.end(), has)) return nullptr;
  const bool uniform = std::all_of(heads.begin(), heads.end(), [&](const HeadPrefillPolicy& h) {
    return has(h) && h.*member == heads.front().*member;
  });
  if (uniform) return ToJson(heads.front().*member);
  OrderedJson list = OrderedJson::array();
  for (const HeadPrefillPolicy& h : heads) list.push_back(has(h) ? ToJson(h.*member) : nullptr);
  return list;
}

OrderedJson LayerEntry(const LayerPolicy& layer, size_t index) {
  OrderedJson entry;
  entry["layer"] = index;
  std::vector<PrefillPattern> patterns;
  for (const HeadPrefillPolicy& h : layer.prefill) patterns.push_back(h.pattern);
  entry["prefill"] = PerHeadNames(patterns, PrefillPatternName);
  OrderedJson v =
      HeadParams(layer, PrefillPattern::kVerticalSlash, &HeadPrefillPolicy::vertical_slash);
  if (!v.is_null()) entry["vertical_slash"] = std::move(v);
  OrderedJson b = HeadParams(layer, PrefillPattern::kBlockSparse, &HeadPrefillPolicy::block_sparse);
  if (!b.is_null()) entry["block_sparse"] = std::move(b);
  OrderedJson a = HeadParams(layer, PrefillPattern::kAShape, &HeadPrefillPolicy::a_shape);
  if (!a.is_null()) entry["a_shape"] = std::move(a);
  entry["decode"] = PerHeadNames(layer.decode, DecodeRoleName);
  return entry;
}

}  // namespace

std::string AttentionPolicyToJson(const AttentionPolicy& policy) {
  // Written by hand around compact pieces so that a layer is one line: a 32-layer policy stays a
  // file a person can read and diff.
  std::string out = "{\n  \"version\": 1,\n";
  out += "  \"dense_below_tokens\": " + std::to_string(policy.dense_below_tokens) + ",\n";
  out += "  \"filter\": " + ToJson(policy.filter).dump() + ",\n";
  out += "  \"streaming_head\": " + ToJson(policy.streaming_head).dump() + ",\n";
  out += "  \"static_eviction\": " + ToJson(policy.static_eviction).dump() + ",\n";
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
