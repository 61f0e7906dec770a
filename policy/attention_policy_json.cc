// The policy file parser (format in attention_policy.h).
#include <set>
#include <utility>

#include "checkpoint/strict_json.h"
#include "common/file_util.h"
#include "common/json_util.h"
#include "policy/attention_policy.h"

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

// Each parameter set's fields by name.
template <typename P>
using ParamFields = std::vector<std::pair<const char*, int64_t P::*>>;

const ParamFields<AShapeParams> kAShapeFields = {{"sink_tokens", &AShapeParams::sink_tokens},
                                                 {"window_tokens", &AShapeParams::window_tokens}};
const ParamFields<VerticalSlashParams> kVerticalSlashFields = {
    {"last_queries", &VerticalSlashParams::last_queries},
    {"vertical", &VerticalSlashParams::vertical},
    {"slash", &VerticalSlashParams::slash}};
const ParamFields<BlockSparseParams> kBlockSparseFields = {
    {"block", &BlockSparseParams::block}, {"top_blocks", &BlockSparseParams::top_blocks}};
const ParamFields<FilterParams> kFilterFields = {{"top_k", &FilterParams::top_k}};
const ParamFields<StaticEvictionParams> kStaticEvictionFields = {
    {"keep_tokens", &StaticEvictionParams::keep_tokens},
    {"recent_tokens", &StaticEvictionParams::recent_tokens},
    {"observed_queries", &StaticEvictionParams::observed_queries}};

// The fields `obj` names, into `*params` (the others unchanged).
template <typename P>
Status ReadParamObject(const Json& obj, const ParamFields<P>& fields, const std::string& where,
                       P* params) {
  std::set<std::string> allowed;
  for (const auto& [name, member] : fields) allowed.insert(name);
  MP_RETURN_IF_ERROR(CheckKeys(obj, allowed, where));
  for (const auto& [name, member] : fields)
    MP_RETURN_IF_ERROR(ReadPositive(obj, name, where, &(params->*member)));
  return OkStatus();
}

// A top-level parameter object, when present.
template <typename P>
Status ReadTopLevelParams(const Json& root, const char* key, const ParamFields<P>& fields,
                          const std::string& what, P* params) {
  if (!root.contains(key)) return OkStatus();
  return ReadParamObject(root.at(key), fields, what + ": " + key, params);
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
// KV head (null: unchanged) whose objects may only be given for heads of `pattern`.
template <typename P>
Status ReadHeadParams(const Json& entry, const char* key, const ParamFields<P>& fields,
                      P HeadPrefillPolicy::*member, PrefillPattern pattern,
                      const std::string& where, std::vector<HeadPrefillPolicy>* heads) {
  if (!entry.contains(key)) return OkStatus();
  const Json& v = entry.at(key);
  const std::string at = where + "." + key;
  if (v.is_object()) {
    for (HeadPrefillPolicy& head : *heads)
      MP_RETURN_IF_ERROR(ReadParamObject(v, fields, at, &(head.*member)));
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
    MP_REQUIRE(head.pattern == pattern, head_at, " is given, but KV head ", h, " is ",
               PrefillPatternName(head.pattern), ", not ", PrefillPatternName(pattern));
    MP_RETURN_IF_ERROR(ReadParamObject(v[h], fields, head_at, &(head.*member)));
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
  std::vector<HeadPrefillPolicy>* heads = &layer->prefill;
  MP_RETURN_IF_ERROR(ReadHeadParams(entry, "a_shape", kAShapeFields, &HeadPrefillPolicy::a_shape,
                                    PrefillPattern::kAShape, where, heads));
  MP_RETURN_IF_ERROR(ReadHeadParams(entry, "vertical_slash", kVerticalSlashFields,
                                    &HeadPrefillPolicy::vertical_slash,
                                    PrefillPattern::kVerticalSlash, where, heads));
  MP_RETURN_IF_ERROR(ReadHeadParams(entry, "block_sparse", kBlockSparseFields,
                                    &HeadPrefillPolicy::block_sparse, PrefillPattern::kBlockSparse,
                                    where, heads));
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
    MP_RETURN_IF_ERROR(CheckKeys(
        l, {"layer", "prefill", "decode", "a_shape", "vertical_slash", "block_sparse"}, where));
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
  MP_RETURN_IF_ERROR(
      CheckKeys(root,
                {"version", "default", "dense_below_tokens", "a_shape", "vertical_slash",
                 "block_sparse", "filter", "streaming_head", "static_eviction", "layers"},
                what));
  MP_ASSIGN_OR_RETURN(int64_t version, JsonGetInt(root, "version", what));
  MP_REQUIRE(version == 1, what, ": version ", version, " is not supported (expected 1)");
  AttentionPolicy policy = DensePolicy(num_layers, num_kv_heads);
  MP_ASSIGN_OR_RETURN(policy.dense_below_tokens, JsonGetIntOr(root, "dense_below_tokens", 0, what));
  MP_REQUIRE(policy.dense_below_tokens >= 0, what, ": dense_below_tokens must be >= 0, got ",
             policy.dense_below_tokens);
  // Every head's starting parameters.
  HeadPrefillPolicy head;
  MP_RETURN_IF_ERROR(ReadTopLevelParams(root, "a_shape", kAShapeFields, what, &head.a_shape));
  MP_RETURN_IF_ERROR(
      ReadTopLevelParams(root, "vertical_slash", kVerticalSlashFields, what, &head.vertical_slash));
  MP_RETURN_IF_ERROR(
      ReadTopLevelParams(root, "block_sparse", kBlockSparseFields, what, &head.block_sparse));
  MP_RETURN_IF_ERROR(ReadTopLevelParams(root, "filter", kFilterFields, what, &policy.filter));
  MP_RETURN_IF_ERROR(
      ReadTopLevelParams(root, "streaming_head", kAShapeFields, what, &policy.streaming_head));
  MP_RETURN_IF_ERROR(ReadTopLevelParams(root, "static_eviction", kStaticEvictionFields, what,
                                        &policy.static_eviction));
  LayerPolicy fallback = policy.layers[0];
  fallback.prefill.assign(static_cast<size_t>(num_kv_heads), head);
  if (root.contains("default")) {
    const Json& d = root.at("default");
    const std::string where = what + ": default";
    MP_RETURN_IF_ERROR(
        CheckKeys(d, {"prefill", "decode", "a_shape", "vertical_slash", "block_sparse"}, where));
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
