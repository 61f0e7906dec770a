#include "worker/attention/layer_attention.h"

#include <algorithm>

#include "worker/attention/attention_registry.h"
#include "worker/attention/decode/streaming_heads_decode.h"
#include "worker/attention/head_group_attention.h"
#include "worker/attention/ring_prefill.h"
#include "worker/attention/sparse_prefill.h"

namespace millipede {
namespace {

// The registered variant of every KV head of layer `index`, by head.
StatusOr<std::vector<const PrefillPatternVariant*>> HeadVariants(const LayerPolicy& layer,
                                                                 int64_t index) {
  std::vector<const PrefillPatternVariant*> variants;
  for (size_t h = 0; h < layer.prefill.size(); ++h) {
    const PrefillPatternVariant* v = FindPrefillPattern(layer.prefill[h].pattern);
    if (v == nullptr)
      return UnimplementedError(std::string("prefill pattern ") +
                                PrefillPatternName(layer.prefill[h].pattern) + " (layer " +
                                std::to_string(index) + ", KV head " + std::to_string(h) +
                                ") is not available in this engine yet");
    variants.push_back(v);
  }
  return variants;
}

// The layer's ring windows per KV head (none when every head is dense): the masks of its ring
// heads (validation gives the windowed heads of a layer one sink count).
HeadWindows LayerWindows(const LayerPolicy& layer) {
  HeadWindows windows;
  for (size_t h = 0; h < layer.prefill.size(); ++h) {
    const PrefillPatternVariant* v = FindPrefillPattern(layer.prefill[h].pattern);
    const RingHeadMask mask = v == nullptr ? RingHeadMask{} : v->RingMask(layer.prefill[h]);
    if (mask.window == 0) continue;
    if (windows.window.empty()) windows.window.assign(layer.prefill.size(), 0);
    windows.window[h] = mask.window;
    windows.sink = mask.sink;
  }
  return windows;
}

// A layer with heads of sparse patterns: each such pattern's index (in registry order), and the
// ring heads beside them on a ring of their own.
StatusOr<std::unique_ptr<PrefillStrategy>> BuildSparsePrefill(
    const AttentionPolicy& policy, const LayerPolicy& layer, int64_t index,
    const std::vector<const PrefillPatternVariant*>& variants) {
  std::vector<std::unique_ptr<SparsePatternIndex>> patterns;
  for (const PrefillPatternVariant* v : RegisteredPrefillPatterns()) {
    if (v->kernel() != PrefillKernel::kSparse ||
        std::find(variants.begin(), variants.end(), v) == variants.end())
      continue;
    MP_RETURN_IF_ERROR(v->CheckLayer(layer.prefill, index));
    patterns.push_back(v->MakeIndex(layer.prefill));
  }
  std::vector<int64_t> ring_heads;
  HeadWindows windows;  // one per ring head
  for (size_t h = 0; h < variants.size(); ++h) {
    if (variants[h]->kernel() != PrefillKernel::kRing) continue;
    const RingHeadMask mask = variants[h]->RingMask(layer.prefill[h]);
    ring_heads.push_back(static_cast<int64_t>(h));
    windows.window.push_back(mask.window);
    if (mask.window > 0) windows.sink = mask.sink;
  }
  return std::unique_ptr<PrefillStrategy>(
      new SparsePrefill(std::move(ring_heads), std::move(windows), std::move(patterns),
                        policy.dense_below_tokens, policy.fp8_attention));
}

StatusOr<std::unique_ptr<PrefillStrategy>> BuildPrefill(const AttentionPolicy& policy,
                                                        const LayerPolicy& layer, int64_t index) {
  MP_ASSIGN_OR_RETURN(const std::vector<const PrefillPatternVariant*> variants,
                      HeadVariants(layer, index));
  for (const PrefillPatternVariant* v : variants)
    if (v->kernel() == PrefillKernel::kSparse)
      return BuildSparsePrefill(policy, layer, index, variants);
  return std::unique_ptr<PrefillStrategy>(
      new RingPrefill(LayerWindows(layer), policy.dense_below_tokens, policy.fp8_attention));
}

}  // namespace

KvRetention LayerKvRetention(const AttentionPolicy& policy, int64_t layer) {
  const LayerPolicy& lp = policy.layers[static_cast<size_t>(layer)];
  if (lp.MixedDecode()) return {};
  const DecodeRoleRegistration* role = FindDecodeRole(lp.LayerDecode());
  return role != nullptr && role->retention != nullptr ? role->retention(policy) : KvRetention{};
}

KvRetention StreamingHeadRetention(const AttentionPolicy& policy) {
  return {policy.streaming_head.sink_tokens, policy.streaming_head.window_tokens,
          policy.dense_below_tokens};
}

namespace {

// `selection`: the latest filter layer's token selection (a filter layer starts a new one).
StatusOr<LayerAttention> BuildLayer(const AttentionPolicy& policy, const ModelConfig& config,
                                    int64_t index, int64_t ranks, bool head_groups,
                                    std::shared_ptr<TokenSelection>& selection,
                                    std::shared_ptr<HeadPackScratch>& packs) {
  const LayerPolicy& layer = policy.layers[static_cast<size_t>(index)];
  LayerAttention la;
  la.retention = LayerKvRetention(policy, index);
  if (head_groups) la.head_groups = LayerHeadGroups(policy, index);
  if (!la.head_groups.empty()) {
    const int64_t group = config.num_attention_heads / config.num_key_value_heads;
    la.streaming = StreamingHeadRetention(policy);
    if (packs == nullptr) packs = std::make_shared<HeadPackScratch>();
    la.prefill =
        std::make_unique<HeadGroupPrefill>(la.head_groups, group, LayerWindows(layer), la.streaming,
                                           policy.dense_below_tokens, packs, policy.fp8_attention);
    la.decode = std::make_unique<HeadGroupDecode>(la.head_groups, group, la.streaming, packs);
    return la;
  }
  MP_ASSIGN_OR_RETURN(la.prefill, BuildPrefill(policy, layer, index));
  if (layer.MixedDecode()) {
    // Validation allows only full and streaming-head heads side by side.
    std::vector<int64_t> windows;
    for (DecodeRole r : layer.decode)
      windows.push_back(r == DecodeRole::kStreamingHead ? policy.streaming_head.window_tokens : 0);
    la.decode = std::make_unique<StreamingHeadsDecode>(
        std::move(windows), policy.streaming_head.sink_tokens, /*batchable=*/ranks == 1);
    return la;
  }
  const DecodeRoleRegistration* role = FindDecodeRole(layer.LayerDecode());
  if (role == nullptr)
    return UnimplementedError(std::string("decode role ") + DecodeRoleName(layer.LayerDecode()) +
                              " (layer " + std::to_string(index) +
                              ") is not available in this engine yet");
  MP_ASSIGN_OR_RETURN(DecodeRoleStrategy built, role->build({policy, index, &selection}));
  la.decode = std::move(built.decode);
  la.selection = std::move(built.selection);
  return la;
}

}  // namespace

StatusOr<std::vector<LayerAttention>> BuildLayerAttention(const AttentionPolicy& policy,
                                                          const ModelConfig& config,
                                                          int64_t ranks, bool head_groups) {
  MP_REQUIRE(static_cast<int64_t>(policy.layers.size()) == config.num_hidden_layers,
             "attention policy: ", policy.layers.size(), " layers for a model of ",
             config.num_hidden_layers);
  std::vector<LayerAttention> layers;
  std::shared_ptr<TokenSelection> selection;
  std::shared_ptr<HeadPackScratch> packs;  // one for the layers with head groups
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    MP_REQUIRE(static_cast<int64_t>(policy.layers[static_cast<size_t>(l)].prefill.size()) ==
                   config.num_key_value_heads,
               "attention policy: layer ", l, " has ",
               policy.layers[static_cast<size_t>(l)].prefill.size(), " prefill patterns for ",
               config.num_key_value_heads, " KV heads");
    MP_ASSIGN_OR_RETURN(LayerAttention la,
                        BuildLayer(policy, config, l, ranks, head_groups, selection, packs));
    layers.push_back(std::move(la));
  }
  return layers;
}

}  // namespace millipede
