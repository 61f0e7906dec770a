// Policy types, validation and capabilities (the JSON parser is attention_policy_json.cc).
#include "policy/attention_policy.h"

#include <algorithm>
#include <map>

#include "policy/pattern_table.h"

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
  const DecodeRoleFacts* facts = FindRoleFacts(r);
  return facts != nullptr && facts->layer_wide;
}

// Token counts and sizes beyond any context are refused, so that no sum of them overflows.
constexpr int64_t kMaxPolicyValue = int64_t{1} << 40;

Status CheckPositive(int64_t value, const std::string& where, const std::string& name) {
  MP_REQUIRE(value > 0, where, ": ", name, " must be positive, got ", value);
  MP_REQUIRE(value <= kMaxPolicyValue, where, ": ", name, " is ", value,
             ", beyond any context (at most 2^40)");
  return OkStatus();
}

// The parameters a head's pattern uses are positive.
Status CheckHeadParams(const HeadPrefillPolicy& head, const std::string& where) {
  const PrefillPatternFacts* facts = FindPatternFacts(head.pattern);
  if (facts == nullptr)
    return InvalidArgumentError(where + ": unknown prefill pattern " +
                                std::to_string(static_cast<int>(head.pattern)));
  for (const PolicyParam<HeadPrefillPolicy>& p : facts->params)
    MP_RETURN_IF_ERROR(
        CheckPositive(p.read(head), where, std::string(facts->params_key) + "." + p.name));
  return OkStatus();
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
  const PrefillPatternFacts* facts = FindPatternFacts(p);
  return facts == nullptr ? "?" : facts->name;
}

bool IsDynamicSparse(PrefillPattern p) {
  const PrefillPatternFacts* facts = FindPatternFacts(p);
  return facts != nullptr && facts->dynamic_sparse;
}

const char* DecodeRoleName(DecodeRole r) {
  const DecodeRoleFacts* facts = FindRoleFacts(r);
  return facts == nullptr ? "?" : facts->name;
}

namespace {

// The entry of `table` named `name` (or its alias); an error listing every accepted name.
template <typename Facts>
StatusOr<const Facts*> FindByName(std::span<const Facts> table, std::string_view name,
                                  const char* noun) {
  std::string names;
  for (const Facts& f : table) {
    if (name == f.name || (f.alias != nullptr && name == f.alias)) return &f;
    names += (names.empty() ? "" : ", ") + std::string(f.name);
    if (f.alias != nullptr) names += ", " + std::string(f.alias);
  }
  return InvalidArgumentError("unknown " + std::string(noun) + " \"" + std::string(name) + "\" (" +
                              names + ")");
}

}  // namespace

StatusOr<PrefillPattern> ParsePrefillPattern(std::string_view name) {
  MP_ASSIGN_OR_RETURN(const PrefillPatternFacts* facts,
                      FindByName(PrefillPatternTable(), name, "prefill pattern"));
  return facts->pattern;
}

StatusOr<DecodeRole> ParseDecodeRole(std::string_view name) {
  MP_ASSIGN_OR_RETURN(const DecodeRoleFacts* facts,
                      FindByName(DecodeRoleTable(), name, "decode role"));
  return facts->role;
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

const char* DecodeStrategyName(const AttentionPolicy& policy) {
  bool has[kNumDecodeRoles] = {};
  for (const LayerPolicy& l : policy.layers)
    for (DecodeRole r : l.decode) has[static_cast<int>(r)] = true;
  if (has[static_cast<int>(DecodeRole::kFilter)] || has[static_cast<int>(DecodeRole::kSelected)])
    return kDecodeStrategies[0];
  if (has[static_cast<int>(DecodeRole::kStaticEviction)]) return kDecodeStrategies[1];
  if (has[static_cast<int>(DecodeRole::kStreamingHead)]) return kDecodeStrategies[2];
  return kDecodeStrategies[3];
}

std::string AttentionPolicy::Summary() const {
  const char* fp8 = fp8_attention ? " (fp8 attention)" : "";
  if (IsDense()) return std::string("dense/full") + fp8;
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
  return s + fp8;
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
  // Every role's model-wide parameters, used by a layer or not.
  for (const DecodeRoleFacts& role : DecodeRoleTable())
    for (const PolicyParam<AttentionPolicy>& p : role.params)
      MP_RETURN_IF_ERROR(
          CheckPositive(p.read(policy), what, std::string(role.params_key) + "." + p.name));
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
  both.fp8_attention = a.fp8_attention && b.fp8_attention;
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
  if (policy.fp8_attention && !capabilities.fp8_attention)
    return UnimplementedError(
        "attention policy: fp8_attention is not available on these workers (FP8 attention runs "
        "on the CPU and on compute capability 9.0 GPUs for head_dim 64 and 128)");
  return OkStatus();
}

}  // namespace millipede
