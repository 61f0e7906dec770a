// The policy file parser (format in attention_policy.h).
#include <set>
#include <utility>

#include "checkpoint/strict_json.h"
#include "common/file_util.h"
#include "common/json_util.h"
#include "policy/attention_policy.h"
#include "policy/pattern_table.h"

namespace millipede {
namespace {

Status CheckKeys(const Json& obj, const std::set<std::string>& allowed, const std::string& where) {
  MP_REQUIRE(obj.is_object(), where, " must be a JSON object, got ", DescribeJson(obj));
  for (const auto& [key, value] : obj.items()) {
    if (allowed.count(key) == 0) {
      std::string names;
      for (const std::string& a : allowed) names += (names.empty() ? "" : ", ") + a;
      return InvalidArgumentError(where + ": unknown field \"" + key + "\" (known: " + names + ")");
    }
  }
  return OkStatus();
}

// A positive integer field (absent: `*out` unchanged).
Status ReadPositive(const Json& obj, const char* key, const std::string& where, int64_t* out) {
  MP_ASSIGN_OR_RETURN(int64_t v, JsonGetIntOr(obj, key, *out, where));
  MP_REQUIRE(v > 0, where, ".", key, " must be positive, got ", v);
  *out = v;
  return OkStatus();
}

// The fields `obj` names among `params`, into `*owner` (the others unchanged).
template <typename Owner>
Status ReadParamObject(const Json& obj, const std::vector<PolicyParam<Owner>>& params,
                       const std::string& where, Owner* owner) {
  std::set<std::string> allowed;
  for (const PolicyParam<Owner>& p : params) allowed.insert(p.name);
  MP_RETURN_IF_ERROR(CheckKeys(obj, allowed, where));
  for (const PolicyParam<Owner>& p : params)
    MP_RETURN_IF_ERROR(ReadPositive(obj, p.name, where, &p.ref(*owner)));
  return OkStatus();
}

// A top-level parameter object, when present.
template <typename Owner>
Status ReadTopLevelParams(const Json& root, const char* key,
                          const std::vector<PolicyParam<Owner>>& params, const std::string& what,
                          Owner* owner) {
  if (key == nullptr || !root.contains(key)) return OkStatus();
  return ReadParamObject(root.at(key), params, what + ": " + key, owner);
}

// `fixed` and every prefill pattern's parameter object (and, with `roles`, every decode role's):
// the fields a policy object may have.
std::set<std::string> KnownKeys(std::set<std::string> fixed, bool roles) {
  for (const PrefillPatternFacts& f : PrefillPatternTable())
    if (f.params_key != nullptr) fixed.insert(f.params_key);
  if (roles)
    for (const DecodeRoleFacts& f : DecodeRoleTable())
      if (f.params_key != nullptr) fixed.insert(f.params_key);
  return fixed;
}

// A name for every head or a list with one name per KV head, each parsed by `parse`.
template <typename T, typename Parse>
StatusOr<std::vector<T>> ReadPerHeadNames(const Json& v, size_t num_kv_heads, const char* key,
                                          const char* noun, const std::string& where, Parse parse) {
  if (v.is_string()) {
    StatusOr<T> one = parse(v.get<std::string>());
    if (!one.ok()) return one.status().WithContext(where);
    return std::vector<T>(num_kv_heads, *one);
  }
  MP_REQUIRE(v.is_array(), where, ".", key, " must be a ", noun,
             " name or a list of one per KV head, got ", DescribeJson(v));
  MP_REQUIRE(v.size() == num_kv_heads, where, ".", key, " lists ", v.size(), " ", noun,
             "s but the model has ", num_kv_heads, " KV heads");
  std::vector<T> out;
  for (size_t h = 0; h < v.size(); ++h) {
    const std::string at = where + "." + key + "[" + std::to_string(h) + "]";
    MP_REQUIRE(v[h].is_string(), at, " must be a ", noun, " name, got ", DescribeJson(v[h]));
    StatusOr<T> one = parse(v[h].get<std::string>());
    if (!one.ok()) return one.status().WithContext(at);
    out.push_back(*one);
  }
  return out;
}

// A layer entry's parameters of one pattern: one object for every head, or a list with one per
// KV head (null: unchanged) whose objects may only be given for heads of the pattern.
Status ReadHeadParams(const Json& entry, const PrefillPatternFacts& facts, const std::string& where,
                      std::vector<HeadPrefillPolicy>* heads) {
  const char* key = facts.params_key;
  if (key == nullptr || !entry.contains(key)) return OkStatus();
  const Json& v = entry.at(key);
  const std::string at = where + "." + key;
  if (v.is_object()) {
    for (HeadPrefillPolicy& head : *heads)
      MP_RETURN_IF_ERROR(ReadParamObject(v, facts.params, at, &head));
    return OkStatus();
  }
  MP_REQUIRE(v.is_array(), at,
             " must be an object or a list of one per KV head (null: unchanged), got ",
             DescribeJson(v));
  MP_REQUIRE(v.size() == heads->size(), at, " lists ", v.size(), " entries but the model has ",
             heads->size(), " KV heads");
  for (size_t h = 0; h < v.size(); ++h) {
    if (v[h].is_null()) continue;
    HeadPrefillPolicy& head = (*heads)[h];
    const std::string head_at = at + "[" + std::to_string(h) + "]";
    MP_REQUIRE(head.pattern == facts.pattern, head_at, " is given, but KV head ", h, " is ",
               PrefillPatternName(head.pattern), ", not ", facts.name);
    MP_RETURN_IF_ERROR(ReadParamObject(v[h], facts.params, head_at, &head));
  }
  return OkStatus();
}

// A layer entry (or "default") over `*layer`: the fields it names replace what was there.
Status ReadLayerEntry(const Json& entry, const std::string& where, LayerPolicy* layer) {
  const size_t num_kv_heads = layer->prefill.size();
  if (entry.contains("prefill")) {
    MP_ASSIGN_OR_RETURN(
        std::vector<PrefillPattern> patterns,
        ReadPerHeadNames<PrefillPattern>(entry.at("prefill"), num_kv_heads, "prefill", "pattern",
                                         where, ParsePrefillPattern));
    for (size_t h = 0; h < num_kv_heads; ++h) layer->prefill[h].pattern = patterns[h];
  }
  for (const PrefillPatternFacts& facts : PrefillPatternTable())
    MP_RETURN_IF_ERROR(ReadHeadParams(entry, facts, where, &layer->prefill));
  if (entry.contains("decode")) {
    MP_ASSIGN_OR_RETURN(layer->decode,
                        ReadPerHeadNames<DecodeRole>(entry.at("decode"), num_kv_heads, "decode",
                                                     "role", where, ParseDecodeRole));
  }
  return OkStatus();
}

// The "layers" list over `*policy`, whose layers hold the default.
Status ReadLayers(const Json& layers, const std::string& what, AttentionPolicy* policy) {
  MP_REQUIRE(layers.is_array(), what, ": layers must be a list, got ", DescribeJson(layers));
  const int64_t num_layers = static_cast<int64_t>(policy->layers.size());
  std::set<int64_t> seen;
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string where = what + ": layers[" + std::to_string(i) + "]";
    const Json& l = layers[i];
    MP_RETURN_IF_ERROR(CheckKeys(l, KnownKeys({"layer", "prefill", "decode"}, false), where));
    MP_ASSIGN_OR_RETURN(int64_t index, JsonGetInt(l, "layer", where));
    MP_REQUIRE(index >= 0 && index < num_layers, where, ": layer ", index,
               " outside the model's [0, ", num_layers, ")");
    MP_REQUIRE(seen.insert(index).second, where, ": layer ", index, " is listed twice");
    MP_RETURN_IF_ERROR(ReadLayerEntry(l, where, &policy->layers[static_cast<size_t>(index)]));
  }
  return OkStatus();
}

}  // namespace

StatusOr<AttentionPolicy> ParseAttentionPolicy(std::string_view text, int64_t num_layers,
                                               int64_t num_kv_heads, const std::string& what) {
  MP_REQUIRE(num_layers > 0 && num_kv_heads > 0, what, ": the model has no layers or KV heads");
  MP_ASSIGN_OR_RETURN(Json root, ParseJsonRejectingDuplicateKeys(text, what, "field"));
  MP_RETURN_IF_ERROR(CheckKeys(
      root,
      KnownKeys({"version", "default", "dense_below_tokens", "fp8_attention", "layers"}, true),
      what));
  MP_ASSIGN_OR_RETURN(int64_t version, JsonGetInt(root, "version", what));
  MP_REQUIRE(version == 1, what, ": version ", version, " is not supported (expected 1)");
  AttentionPolicy policy = DensePolicy(num_layers, num_kv_heads);
  MP_ASSIGN_OR_RETURN(policy.dense_below_tokens, JsonGetIntOr(root, "dense_below_tokens", 0, what));
  MP_REQUIRE(policy.dense_below_tokens >= 0, what, ": dense_below_tokens must be >= 0, got ",
             policy.dense_below_tokens);
  MP_ASSIGN_OR_RETURN(policy.fp8_attention, JsonGetBoolOr(root, "fp8_attention", false, what));
  // Every head's starting parameters.
  HeadPrefillPolicy head;
  for (const PrefillPatternFacts& facts : PrefillPatternTable())
    MP_RETURN_IF_ERROR(ReadTopLevelParams(root, facts.params_key, facts.params, what, &head));
  for (const DecodeRoleFacts& facts : DecodeRoleTable())
    MP_RETURN_IF_ERROR(ReadTopLevelParams(root, facts.params_key, facts.params, what, &policy));
  LayerPolicy fallback = policy.layers[0];
  fallback.prefill.assign(static_cast<size_t>(num_kv_heads), head);
  if (root.contains("default")) {
    const Json& d = root.at("default");
    const std::string where = what + ": default";
    MP_RETURN_IF_ERROR(CheckKeys(d, KnownKeys({"prefill", "decode"}, false), where));
    MP_RETURN_IF_ERROR(ReadLayerEntry(d, where, &fallback));
  }
  policy.layers.assign(static_cast<size_t>(num_layers), fallback);
  if (root.contains("layers")) MP_RETURN_IF_ERROR(ReadLayers(root.at("layers"), what, &policy));
  MP_RETURN_IF_ERROR(ValidateAttentionPolicy(policy, num_layers, num_kv_heads, what));
  return policy;
}

StatusOr<AttentionPolicy> LoadAttentionPolicy(const std::string& path, int64_t num_layers,
                                              int64_t num_kv_heads) {
  MP_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return ParseAttentionPolicy(text, num_layers, num_kv_heads, path);
}

}  // namespace millipede
