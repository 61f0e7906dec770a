// Policy types, validation and capabilities (the JSON parser is attention_policy_json.cc).
#include "policy/attention_policy.h"

#include <algorithm>
#include <map>

namespace millipede {
namespace {

// "layer 5, KV head 2" for error messages.
std::string HeadPlace(size_t layer, size_t head) {
  return "layer " + std::to_string(layer) + ", KV head " + std::to_string(head);
}

constexpr const char* kLayerWideRule =
    "filter, selected and static-eviction apply to every KV head of a layer (only full and "
    "streaming-head may mix)";

bool IsLayerWide(DecodeRole r) {
  return r == DecodeRole::kFilter || r == DecodeRole::kSelected || r == DecodeRole::kStaticEviction;
}

// Token counts and sizes beyond any context are refused, so that no sum of them overflows.
constexpr int64_t kMaxPolicyValue = int64_t{1} << 40;

Status CheckPositive(int64_t value, const std::string& where, const char* name) {
  MP_REQUIRE(value > 0, where, ": ", name, " must be positive, got ", value);
  MP_REQUIRE(value <= kMaxPolicyValue, where, ": ", name, " is ", value,
             ", beyond any context (at most 2^40)");
  return OkStatus();
}

// The parameters a head's pattern uses are positive.
Status CheckHeadParams(const HeadPrefillPolicy& head, const std::string& where) {
  switch (head.pattern) {
    case PrefillPattern::kDense:
      return OkStatus();
    case PrefillPattern::kAShape:
      MP_RETURN_IF_ERROR(CheckPositive(head.a_shape.sink_tokens, where, "a_shape.sink_tokens"));
      return CheckPositive(head.a_shape.window_tokens, where, "a_shape.window_tokens");
    case PrefillPattern::kVerticalSlash:
      MP_RETURN_IF_ERROR(
          CheckPositive(head.vertical_slash.last_queries, where, "vertical_slash.last_queries"));
      MP_RETURN_IF_ERROR(
          CheckPositive(head.vertical_slash.vertical, where, "vertical_slash.vertical"));
      return CheckPositive(head.vertical_slash.slash, where, "vertical_slash.slash");
    case PrefillPattern::kBlockSparse:
      MP_RETURN_IF_ERROR(CheckPositive(head.block_sparse.block, where, "block_sparse.block"));
      return CheckPositive(head.block_sparse.top_blocks, where, "block_sparse.top_blocks");
  }
  return InvalidArgumentError(where + ": unknown prefill pattern " +
                              std::to_string(static_cast<int>(head.pattern)));
}

Status ValidateLayer(const LayerPolicy& layer, size_t l, int64_t num_kv_heads,
                     const std::string& what) {
  const std::string place = what + ": layer " + std::to_string(l);
  MP_REQUIRE(static_cast<int64_t>(layer.prefill.size()) == num_kv_heads, place, " has ",
             layer.prefill.size(), " prefill entries for ", num_kv_heads, " KV heads");
  MP_REQUIRE(static_cast<int64_t>(layer.decode.size()) == num_kv_heads, place, " has ",
             layer.decode.size(), " decode roles for ", num_kv_heads, " KV heads");
  const HeadPrefillPolicy* first_a_shape = nullptr;
  size_t first_a_shape_head = 0;
  for (size_t h = 0; h < layer.prefill.size(); ++h) {
    const HeadPrefillPolicy& head = layer.prefill[h];
    MP_RETURN_IF_ERROR(CheckHeadParams(head, what + ": " + HeadPlace(l, h)));
    if (head.pattern != PrefillPattern::kAShape) continue;
    if (first_a_shape == nullptr) {
      first_a_shape = &head;
      first_a_shape_head = h;
    }
    MP_REQUIRE(head.a_shape.sink_tokens == first_a_shape->a_shape.sink_tokens, place,
               ": a-shape KV heads ", first_a_shape_head, " and ", h,
               " have different sink_tokens (", first_a_shape->a_shape.sink_tokens, " and ",
               head.a_shape.sink_tokens,
               "); the a-shape heads of a layer share one sink count (windows may differ)");
  }
  for (size_t h = 0; h < layer.decode.size(); ++h) {
    const DecodeRole r = layer.decode[h];
    MP_REQUIRE(static_cast<int>(r) < kNumDecodeRoles, what, ": ", HeadPlace(l, h),
               ": unknown decode role ", static_cast<int>(r));
    if (!IsLayerWide(r)) continue;
    for (size_t g = 0; g < layer.decode.size(); ++g)
      MP_REQUIRE(layer.decode[g] == r, what, ": ", HeadPlace(l, g), ": decode role \"",
                 DecodeRoleName(layer.decode[g]), "\" beside \"", DecodeRoleName(r), "\" (KV head ",
                 h, "); ", kLayerWideRule);
  }
  return OkStatus();
}

std::string JoinNames(const std::vector<const char*>& names) {
  std::string s;
  for (const char* n : names) s += (s.empty() ? "" : ", ") + std::string(n);
  return s.empty() ? "none" : s;
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

bool LayerPolicy::MixedDecode() const {
  return std::any_of(decode.begin(), decode.end(),
                     [&](DecodeRole r) { return r != decode.front(); });
}

DecodeRole LayerPolicy::LayerDecode() const {
  return decode.empty() || MixedDecode() ? DecodeRole::kFull : decode.front();
}

bool AttentionPolicy::IsDense() const {
  for (const LayerPolicy& l : layers) {
    for (DecodeRole r : l.decode)
      if (r != DecodeRole::kFull) return false;
    for (const HeadPrefillPolicy& h : l.prefill)
      if (h.pattern != PrefillPattern::kDense) return false;
  }
  return true;
}

std::string AttentionPolicy::Summary() const {
  if (IsDense()) return "dense/full";
  std::map<std::string, int64_t> prefill, decode;
  for (const LayerPolicy& l : layers) {
    for (DecodeRole r : l.decode) ++decode[DecodeRoleName(r)];
    for (const HeadPrefillPolicy& h : l.prefill) ++prefill[PrefillPatternName(h.pattern)];
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
  const size_t heads = static_cast<size_t>(num_kv_heads);
  AttentionPolicy p;
  p.layers.assign(static_cast<size_t>(num_layers),
                  LayerPolicy{std::vector<HeadPrefillPolicy>(heads),
                              std::vector<DecodeRole>(heads, DecodeRole::kFull)});
  return p;
}

Status ValidateAttentionPolicy(const AttentionPolicy& policy, int64_t num_layers,
                               int64_t num_kv_heads, const std::string& what) {
  MP_REQUIRE(num_layers > 0 && num_kv_heads > 0, what, ": the model has no layers or KV heads");
  MP_REQUIRE(static_cast<int64_t>(policy.layers.size()) == num_layers, what, ": ",
             policy.layers.size(), " layers for a model of ", num_layers);
  MP_REQUIRE(policy.dense_below_tokens >= 0, what, ": dense_below_tokens must be >= 0, got ",
             policy.dense_below_tokens);
  MP_REQUIRE(policy.dense_below_tokens <= kMaxPolicyValue, what, ": dense_below_tokens is ",
             policy.dense_below_tokens, ", beyond any context (at most 2^40)");
  MP_RETURN_IF_ERROR(CheckPositive(policy.filter.top_k, what, "filter.top_k"));
  MP_RETURN_IF_ERROR(
      CheckPositive(policy.streaming_head.sink_tokens, what, "streaming_head.sink_tokens"));
  MP_RETURN_IF_ERROR(
      CheckPositive(policy.streaming_head.window_tokens, what, "streaming_head.window_tokens"));
  const StaticEvictionParams& se = policy.static_eviction;
  MP_RETURN_IF_ERROR(CheckPositive(se.keep_tokens, what, "static_eviction.keep_tokens"));
  MP_RETURN_IF_ERROR(CheckPositive(se.recent_tokens, what, "static_eviction.recent_tokens"));
  MP_RETURN_IF_ERROR(CheckPositive(se.observed_queries, what, "static_eviction.observed_queries"));
  bool filter_seen = false;
  for (size_t l = 0; l < policy.layers.size(); ++l) {
    const LayerPolicy& layer = policy.layers[l];
    MP_RETURN_IF_ERROR(ValidateLayer(layer, l, num_kv_heads, what));
    // Selected layers attend to the tokens the latest filter layer before them chose.
    MP_REQUIRE(filter_seen || layer.LayerDecode() != DecodeRole::kSelected, what, ": layer ", l,
               " is \"selected\" but no \"filter\" layer comes before it to choose its tokens");
    filter_seen = filter_seen || layer.LayerDecode() == DecodeRole::kFilter;
  }
  return OkStatus();
}

bool PolicyCapabilities::Runs(PrefillPattern p) const {
  return std::find(prefill.begin(), prefill.end(), p) != prefill.end();
}

bool PolicyCapabilities::Runs(DecodeRole r) const {
  return std::find(decode.begin(), decode.end(), r) != decode.end();
}

PolicyCapabilities IntersectCapabilities(const PolicyCapabilities& a, const PolicyCapabilities& b) {
  PolicyCapabilities both;
  for (PrefillPattern p : a.prefill)
    if (b.Runs(p) && !both.Runs(p)) both.prefill.push_back(p);
  for (DecodeRole r : a.decode)
    if (b.Runs(r) && !both.Runs(r)) both.decode.push_back(r);
  both.mixed_decode_layers = a.mixed_decode_layers && b.mixed_decode_layers;
  return both;
}

Status CheckPolicyRunnable(const AttentionPolicy& policy, const PolicyCapabilities& capabilities) {
  std::vector<const char*> prefill_names, decode_names;
  for (PrefillPattern p : capabilities.prefill) prefill_names.push_back(PrefillPatternName(p));
  for (DecodeRole r : capabilities.decode) decode_names.push_back(DecodeRoleName(r));
  for (size_t l = 0; l < policy.layers.size(); ++l) {
    const LayerPolicy& layer = policy.layers[l];
    for (size_t h = 0; h < layer.prefill.size(); ++h) {
      const PrefillPattern p = layer.prefill[h].pattern;
      if (!capabilities.Runs(p))
        return UnimplementedError(std::string("attention policy: prefill pattern \"") +
                                  PrefillPatternName(p) + "\" (" + HeadPlace(l, h) +
                                  ") is not available yet on these workers; they run " +
                                  JoinNames(prefill_names));
    }
    for (size_t h = 0; h < layer.decode.size(); ++h) {
      const DecodeRole r = layer.decode[h];
      if (!capabilities.Runs(r))
        return UnimplementedError(std::string("attention policy: decode role \"") +
                                  DecodeRoleName(r) + "\" (" + HeadPlace(l, h) +
                                  ") is not available yet on these workers; they run " +
                                  JoinNames(decode_names));
    }
    if (layer.MixedDecode() && !capabilities.mixed_decode_layers)
      return UnimplementedError("attention policy: layer " + std::to_string(l) +
                                " mixes decode roles per KV head, which these workers do not "
                                "run yet (one decode role per layer)");
  }
  return OkStatus();
}

}  // namespace millipede
