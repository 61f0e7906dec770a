#include "common/policy/attention_policy.h"

#include <map>
#include <set>

#include "common/checkpoint/strict_json.h"
#include "common/file_util.h"
#include "common/json_util.h"

namespace millipede {
namespace {

Status CheckKeys(const Json& obj, const std::set<std::string>& allowed, const std::string& where) {
  MP_REQUIRE(obj.is_object(), where, " must be a JSON object, got ", DescribeJson(obj));
  for (const auto& [key, value] : obj.items()) {
    if (allowed.count(key) == 0) {
      std::string names;
      for (const std::string& a : allowed) names += (names.empty() ? "" : ", ") + a;
      return InvalidArgumentError(where + ": unknown field \"" + key + "\" (known: " + names +
                                  ")");
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

Status ReadParams(const Json& root, const char* key, const std::vector<const char*>& fields,
                  const std::vector<int64_t*>& targets, const std::string& what) {
  if (!root.contains(key)) return OkStatus();
  const std::string where = what + ": " + key;
  std::set<std::string> allowed(fields.begin(), fields.end());
  MP_RETURN_IF_ERROR(CheckKeys(root.at(key), allowed, where));
  for (size_t i = 0; i < fields.size(); ++i)
    MP_RETURN_IF_ERROR(ReadPositive(root.at(key), fields[i], where, targets[i]));
  return OkStatus();
}

// "prefill": a name for every head or a list with one name per KV head.
StatusOr<std::vector<PrefillPattern>> ReadPrefill(const Json& v, int64_t num_kv_heads,
                                                  const std::string& where) {
  std::vector<PrefillPattern> out;
  if (v.is_string()) {
    MP_ASSIGN_OR_RETURN(PrefillPattern p, ParsePrefillPattern(v.get<std::string>()));
    out.assign(static_cast<size_t>(num_kv_heads), p);
    return out;
  }
  MP_REQUIRE(v.is_array(), where,
             ".prefill must be a pattern name or a list of one per KV head, got ",
             DescribeJson(v));
  MP_REQUIRE(static_cast<int64_t>(v.size()) == num_kv_heads, where, ".prefill lists ", v.size(),
             " patterns but the model has ", num_kv_heads, " KV heads");
  for (size_t h = 0; h < v.size(); ++h) {
    MP_REQUIRE(v[h].is_string(), where, ".prefill[", h, "] must be a pattern name, got ",
               DescribeJson(v[h]));
    StatusOr<PrefillPattern> p = ParsePrefillPattern(v[h].get<std::string>());
    if (!p.ok()) return p.status().WithContext(where + ".prefill[" + std::to_string(h) + "]");
    out.push_back(*p);
  }
  return out;
}

}  // namespace

const char* PrefillPatternName(PrefillPattern p) {
  switch (p) {
    case PrefillPattern::kDense: return "dense";
    case PrefillPattern::kAShape: return "a-shape";
    case PrefillPattern::kVerticalSlash: return "vertical-slash";
    case PrefillPattern::kBlockSparse: return "block-sparse";
  }
  return "?";
}

const char* DecodeRoleName(DecodeRole r) {
  switch (r) {
    case DecodeRole::kFull: return "full";
    case DecodeRole::kFilter: return "filter";
    case DecodeRole::kSelected: return "selected";
    case DecodeRole::kStreamingHead: return "streaming-head";
    case DecodeRole::kStaticEviction: return "static-eviction";
  }
  return "?";
}

StatusOr<PrefillPattern> ParsePrefillPattern(std::string_view name) {
  if (name == "dense") return PrefillPattern::kDense;
  if (name == "a-shape" || name == "streaming") return PrefillPattern::kAShape;
  if (name == "vertical-slash") return PrefillPattern::kVerticalSlash;
  if (name == "block-sparse") return PrefillPattern::kBlockSparse;
  return InvalidArgumentError("unknown prefill pattern \"" + std::string(name) +
                              "\" (dense, a-shape, streaming, vertical-slash, block-sparse)");
}

StatusOr<DecodeRole> ParseDecodeRole(std::string_view name) {
  if (name == "full") return DecodeRole::kFull;
  if (name == "filter") return DecodeRole::kFilter;
  if (name == "selected") return DecodeRole::kSelected;
  if (name == "streaming-head") return DecodeRole::kStreamingHead;
  if (name == "static-eviction" || name == "h2o") return DecodeRole::kStaticEviction;
  return InvalidArgumentError("unknown decode role \"" + std::string(name) +
                              "\" (full, filter, selected, streaming-head, static-eviction)");
}

bool AttentionPolicy::IsDense() const {
  for (const LayerPolicy& l : layers) {
    if (l.decode != DecodeRole::kFull) return false;
    for (PrefillPattern p : l.prefill)
      if (p != PrefillPattern::kDense) return false;
  }
  return true;
}

std::string AttentionPolicy::Summary() const {
  if (IsDense()) return "dense/full";
  std::map<std::string, int64_t> prefill, decode;
  for (const LayerPolicy& l : layers) {
    ++decode[DecodeRoleName(l.decode)];
    for (PrefillPattern p : l.prefill) ++prefill[PrefillPatternName(p)];
  }
  std::string s = "prefill";
  for (const auto& [name, count] : prefill) s += " " + name + " " + std::to_string(count) + ",";
  s.back() = ';';
  s += " decode";
  for (const auto& [name, count] : decode) s += " " + name + " " + std::to_string(count) + ",";
  s.pop_back();
  return s;
}

AttentionPolicy DensePolicy(int64_t num_layers, int64_t num_kv_heads) {
  AttentionPolicy p;
  p.layers.assign(static_cast<size_t>(num_layers),
                  LayerPolicy{std::vector<PrefillPattern>(static_cast<size_t>(num_kv_heads),
                                                          PrefillPattern::kDense),
                              DecodeRole::kFull});
  return p;
}

StatusOr<AttentionPolicy> ParseAttentionPolicy(std::string_view text, int64_t num_layers,
                                               int64_t num_kv_heads, const std::string& what) {
  MP_REQUIRE(num_layers > 0 && num_kv_heads > 0, what, ": the model has no layers or heads");
  MP_ASSIGN_OR_RETURN(Json root, ParseJsonRejectingDuplicateKeys(text, what, "field"));
  MP_RETURN_IF_ERROR(CheckKeys(root,
                               {"version", "default", "dense_below_tokens", "a_shape",
                                "vertical_slash", "block_sparse", "filter", "streaming_head",
                                "static_eviction", "layers"},
                               what));
  MP_ASSIGN_OR_RETURN(int64_t version, JsonGetInt(root, "version", what));
  MP_REQUIRE(version == 1, what, ": version ", version, " is not supported (expected 1)");
  AttentionPolicy policy = DensePolicy(num_layers, num_kv_heads);
  MP_ASSIGN_OR_RETURN(policy.dense_below_tokens,
                      JsonGetIntOr(root, "dense_below_tokens", 0, what));
  MP_REQUIRE(policy.dense_below_tokens >= 0, what, ": dense_below_tokens must be >= 0, got ",
             policy.dense_below_tokens);
  MP_RETURN_IF_ERROR(ReadParams(root, "a_shape", {"sink_tokens", "window_tokens"},
                                {&policy.a_shape.sink_tokens, &policy.a_shape.window_tokens},
                                what));
  MP_RETURN_IF_ERROR(ReadParams(
      root, "vertical_slash", {"last_queries", "vertical", "slash"},
      {&policy.vertical_slash.last_queries, &policy.vertical_slash.vertical,
       &policy.vertical_slash.slash},
      what));
  MP_RETURN_IF_ERROR(ReadParams(root, "block_sparse", {"block", "top_blocks"},
                                {&policy.block_sparse.block, &policy.block_sparse.top_blocks},
                                what));
  MP_RETURN_IF_ERROR(ReadParams(root, "filter", {"top_k"}, {&policy.filter.top_k}, what));
  MP_RETURN_IF_ERROR(ReadParams(
      root, "streaming_head", {"sink_tokens", "window_tokens"},
      {&policy.streaming_head.sink_tokens, &policy.streaming_head.window_tokens}, what));

  MP_RETURN_IF_ERROR(ReadParams(
      root, "static_eviction", {"keep_tokens", "recent_tokens", "observed_queries"},
      {&policy.static_eviction.keep_tokens, &policy.static_eviction.recent_tokens,
       &policy.static_eviction.observed_queries},
      what));
  LayerPolicy fallback = policy.layers[0];
  if (root.contains("default")) {
    const Json& d = root.at("default");
    const std::string where = what + ": default";
    MP_RETURN_IF_ERROR(CheckKeys(d, {"prefill", "decode"}, where));
    if (d.contains("prefill")) {
      MP_ASSIGN_OR_RETURN(fallback.prefill, ReadPrefill(d.at("prefill"), num_kv_heads, where));
    }
    if (d.contains("decode")) {
      MP_ASSIGN_OR_RETURN(std::string role, JsonGetString(d, "decode", where));
      MP_ASSIGN_OR_RETURN(fallback.decode, ParseDecodeRole(role));
    }
  }
  policy.layers.assign(static_cast<size_t>(num_layers), fallback);
  if (root.contains("layers")) {
    const Json& layers = root.at("layers");
    MP_REQUIRE(layers.is_array(), what, ": layers must be a list, got ", DescribeJson(layers));
    std::set<int64_t> seen;
    for (size_t i = 0; i < layers.size(); ++i) {
      const std::string where = what + ": layers[" + std::to_string(i) + "]";
      const Json& l = layers[i];
      MP_RETURN_IF_ERROR(CheckKeys(l, {"layer", "prefill", "decode"}, where));
      MP_ASSIGN_OR_RETURN(int64_t index, JsonGetInt(l, "layer", where));
      MP_REQUIRE(index >= 0 && index < num_layers, where, ": layer ", index,
                 " outside the model's [0, ", num_layers, ")");
      MP_REQUIRE(seen.insert(index).second, where, ": layer ", index, " is listed twice");
      LayerPolicy& target = policy.layers[static_cast<size_t>(index)];
      if (l.contains("prefill")) {
        MP_ASSIGN_OR_RETURN(target.prefill, ReadPrefill(l.at("prefill"), num_kv_heads, where));
      }
      if (l.contains("decode")) {
        MP_ASSIGN_OR_RETURN(std::string role, JsonGetString(l, "decode", where));
        StatusOr<DecodeRole> r = ParseDecodeRole(role);
        if (!r.ok()) return r.status().WithContext(where);
        target.decode = *r;
      }
    }
  }
  return policy;
}

Status CheckPolicyRunnable(const AttentionPolicy& policy, bool cpu) {
  const std::string available = cpu ? "dense, a-shape" : "dense (a-shape: CPU backend only)";
  for (size_t l = 0; l < policy.layers.size(); ++l) {
    const LayerPolicy& layer = policy.layers[l];
    for (size_t h = 0; h < layer.prefill.size(); ++h) {
      const PrefillPattern p = layer.prefill[h];
      if (p != PrefillPattern::kDense && !(cpu && p == PrefillPattern::kAShape))
        return UnimplementedError(
            std::string("attention policy: prefill pattern \"") + PrefillPatternName(p) +
            "\" (layer " + std::to_string(l) + ", KV head " + std::to_string(h) +
            ") is not available yet in this engine; available: " + available);
    }
    if (layer.decode != DecodeRole::kFull &&
        !(cpu && (layer.decode == DecodeRole::kStreamingHead ||
                  layer.decode == DecodeRole::kStaticEviction)))
      return UnimplementedError(
          std::string("attention policy: decode role \"") + DecodeRoleName(layer.decode) +
          "\" (layer " + std::to_string(l) + ") is not available yet in this engine; available: " +
          (cpu ? "full, streaming-head, static-eviction"
               : "full (streaming-head, static-eviction: CPU backend only)"));
  }
  return OkStatus();
}

StatusOr<AttentionPolicy> LoadAttentionPolicy(const std::string& path, int64_t num_layers,
                                              int64_t num_kv_heads) {
  MP_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return ParseAttentionPolicy(text, num_layers, num_kv_heads, path);
}

}  // namespace millipede
