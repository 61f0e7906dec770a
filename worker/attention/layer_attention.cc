#include "worker/attention/layer_attention.h"

#include "worker/attention/full_decode.h"
#include "worker/attention/head_group_attention.h"
#include "worker/attention/omnikv_decode.h"
#include "worker/attention/ring_prefill.h"
#include "worker/attention/sparse_prefill.h"
#include "worker/attention/static_eviction.h"
#include "worker/attention/streaming_heads_decode.h"

namespace millipede {
namespace {

// A layer with vertical-slash or block-sparse heads (one block size; dense and A-shape heads
// beside them ride a ring of their own).
StatusOr<std::unique_ptr<PrefillStrategy>> BuildSparsePrefill(const AttentionPolicy& policy,
                                                              const LayerPolicy& layer,
                                                              int64_t index) {
  int64_t block = 0;
  for (size_t h = 0; h < layer.prefill.size(); ++h) {
    const HeadPrefillPolicy& head = layer.prefill[h];
    const std::string where =
        " (layer " + std::to_string(index) + ", KV head " + std::to_string(h) + ")";
    if (head.pattern != PrefillPattern::kBlockSparse) continue;
    const int64_t b = head.block_sparse.block;
    if (block != 0 && b != block)
      return UnimplementedError("block-sparse heads of one layer with different block sizes" +
                                where + " are not available in this engine yet");
    if (b % kSparseTileRows != 0 && kSparseTileRows % b != 0)
      return InvalidArgumentError("block-sparse block " + std::to_string(b) + where +
                                  " must divide or be a multiple of " +
                                  std::to_string(kSparseTileRows));
    block = b;
  }
  return std::unique_ptr<PrefillStrategy>(
      new SparsePrefill(layer.prefill, policy.dense_below_tokens));
}

// The layer's a-shape windows per KV head (none when no head is a-shape).
HeadWindows LayerWindows(const LayerPolicy& layer) {
  HeadWindows windows;
  for (size_t h = 0; h < layer.prefill.size(); ++h) {
    const HeadPrefillPolicy& head = layer.prefill[h];
    if (head.pattern != PrefillPattern::kAShape) continue;
    if (windows.window.empty()) windows.window.assign(layer.prefill.size(), 0);
    windows.window[h] = head.a_shape.window_tokens;
    // Validation gives the a-shape heads of a layer one sink count.
    windows.sink = head.a_shape.sink_tokens;
  }
  return windows;
}

StatusOr<std::unique_ptr<PrefillStrategy>> BuildPrefill(const AttentionPolicy& policy,
                                                        const LayerPolicy& layer, int64_t index) {
  for (const HeadPrefillPolicy& head : layer.prefill)
    if (IsDynamicSparse(head.pattern)) return BuildSparsePrefill(policy, layer, index);
  return std::unique_ptr<PrefillStrategy>(
      new RingPrefill(LayerWindows(layer), policy.dense_below_tokens));
}

}  // namespace

KvRetention LayerKvRetention(const AttentionPolicy& policy, int64_t layer) {
  const LayerPolicy& lp = policy.layers[static_cast<size_t>(layer)];
  if (!lp.MixedDecode() && lp.LayerDecode() == DecodeRole::kStreamingHead)
    return {policy.streaming_head.sink_tokens, policy.streaming_head.window_tokens};
  return {};
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
    la.prefill = std::make_unique<HeadGroupPrefill>(la.head_groups, group, LayerWindows(layer),
                                                    la.streaming, policy.dense_below_tokens,
                                                    packs);
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
  switch (layer.LayerDecode()) {
    case DecodeRole::kFull:
      la.decode = std::make_unique<FullDecode>();
      break;
    case DecodeRole::kStreamingHead:
      // The store keeps the sinks and the window; decode attends to all it keeps.
      la.decode = std::make_unique<FullDecode>("streaming-head");
      break;
    case DecodeRole::kStaticEviction:
      la.decode = std::make_unique<StaticEvictionDecode>(policy.static_eviction);
      break;
    case DecodeRole::kFilter:
      selection = std::make_shared<TokenSelection>(index);
      la.selection = selection;
      la.decode = std::make_unique<FilterDecode>(policy.filter, selection);
      break;
    case DecodeRole::kSelected:
      MP_REQUIRE(selection != nullptr, "attention policy: layer ", index,
                 " is \"selected\" but no \"filter\" layer comes before it");
      la.selection = selection;
      la.decode = std::make_unique<SelectedDecode>(selection);
      break;
    default:
      return UnimplementedError(std::string("decode role ") +
                                DecodeRoleName(layer.LayerDecode()) +
                                " (layer " + std::to_string(index) +
                                ") is not available in this engine yet");
  }
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
