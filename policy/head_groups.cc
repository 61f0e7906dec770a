#include "policy/head_groups.h"

#include <algorithm>
#include <functional>
#include <utility>

namespace millipede {
KvHeadGroups LayerHeadGroups(const AttentionPolicy& policy, int64_t layer) {
  const LayerPolicy& lp = policy.layers[static_cast<size_t>(layer)];
  if (!lp.MixedDecode()) return {};
  KvHeadGroups groups;
  for (size_t h = 0; h < lp.decode.size(); ++h) {
    const HeadPrefillPolicy& prefill = lp.prefill[h];
    if (IsDynamicSparse(prefill.pattern)) return {};
    if (lp.decode[h] != DecodeRole::kStreamingHead) {
      groups.full.push_back(static_cast<int32_t>(h));
      continue;
    }
    if (prefill.pattern != PrefillPattern::kAShape ||
        prefill.a_shape.sink_tokens > policy.streaming_head.sink_tokens ||
        prefill.a_shape.window_tokens > policy.streaming_head.window_tokens)
      return {};
    groups.streaming.push_back(static_cast<int32_t>(h));
  }
  if (groups.full.empty() || groups.streaming.empty()) return {};
  return groups;
}

int64_t StreamingStoreRows(int64_t sink, int64_t window, int64_t keep_all_below, int64_t step) {
  return std::max(sink + window, keep_all_below) + window + step;
}

bool SplitsKvHeads(const AttentionPolicy& policy, int64_t capacity, int64_t step) {
  const AShapeParams& s = policy.streaming_head;
  // Windows, sinks or a dense fallback as long as the sequence: nothing to drop (and no sum that
  // could overflow below).
  if (s.window_tokens >= capacity || s.sink_tokens >= capacity ||
      policy.dense_below_tokens >= capacity || step >= capacity)
    return false;
  if (capacity <= 2 * StreamingStoreRows(s.sink_tokens, s.window_tokens,
                                         policy.dense_below_tokens, step))
    return false;
  for (size_t l = 0; l < policy.layers.size(); ++l)
    if (!LayerHeadGroups(policy, static_cast<int64_t>(l)).empty()) return true;
  return false;
}

int64_t KvHeadRows(const AttentionPolicy& policy, int64_t num_kv_heads, int64_t capacity,
                   int64_t step, bool split_allowed) {
  const AShapeParams& s = policy.streaming_head;
  const bool split = split_allowed && SplitsKvHeads(policy, capacity, step);
  int64_t rows = 0;
  for (size_t l = 0; l < policy.layers.size(); ++l) {
    const LayerPolicy& layer = policy.layers[l];
    const KvHeadGroups groups =
        split ? LayerHeadGroups(policy, static_cast<int64_t>(l)) : KvHeadGroups{};
    if (!groups.empty()) {
      rows += static_cast<int64_t>(groups.full.size()) * capacity +
              static_cast<int64_t>(groups.streaming.size()) *
                  StreamingStoreRows(s.sink_tokens, s.window_tokens, policy.dense_below_tokens,
                                     step);
    } else if (!layer.MixedDecode() && layer.LayerDecode() == DecodeRole::kStreamingHead) {
      rows += num_kv_heads * StreamingStoreRows(s.sink_tokens, s.window_tokens, 0, step);
    } else {
      rows += num_kv_heads * capacity;
    }
  }
  return rows;
}

std::vector<int64_t> HostTierCandidates(const AttentionPolicy& policy) {
  // (layers since the filter layer, layer) of each candidate.
  std::vector<std::pair<int64_t, int64_t>> ranked;
  int64_t filter = -1;
  for (size_t l = 0; l < policy.layers.size(); ++l) {
    const LayerPolicy& layer = policy.layers[l];
    if (layer.MixedDecode()) continue;
    const DecodeRole r = layer.LayerDecode();
    const auto at = static_cast<int64_t>(l);
    if (r == DecodeRole::kFilter) filter = at;
    if (r == DecodeRole::kSelected && filter >= 0 && at - filter > 1)
      ranked.emplace_back(at - filter, at);
  }
  std::sort(ranked.begin(), ranked.end(), std::greater<>());
  std::vector<int64_t> out;
  for (const auto& [distance, layer] : ranked) out.push_back(layer);
  return out;
}

int64_t HostTierKvHeadRows(const AttentionPolicy& policy, int64_t num_kv_heads, int64_t capacity,
                           int64_t generated, int64_t step) {
  const auto candidates = static_cast<int64_t>(HostTierCandidates(policy).size());
  const int64_t prompt = std::max<int64_t>(0, capacity - generated);
  int64_t rows = KvHeadRows(policy, num_kv_heads, capacity, step) -
                 candidates * num_kv_heads * prompt;
  if (candidates > 0 && step < prompt) rows += num_kv_heads * prompt;
  return rows;
}

}  // namespace millipede
