// What a sequence's KV stores keep under an attention policy, as the engine allocates them: in a
// layer that mixes full and streaming-head decode (DuoAttention) the KV heads split into a group
// that keeps every row and one that keeps only the sinks and a recent window, when the sequence
// is long enough to gain from it. The engine's stores follow these rules; the coordinator's
// admission counts a job's KV with them.
#pragma once

#include <cstdint>
#include <vector>

#include "policy/attention_policy.h"

namespace millipede {

// A layer's KV heads by what they keep, each list increasing, together every head once.
struct KvHeadGroups {
  std::vector<int32_t> full;       // every row
  std::vector<int32_t> streaming;  // the sinks and the window of the policy's streaming_head
  bool empty() const { return full.empty() && streaming.empty(); }
};

// The KV heads of layer `layer` by decode role when the layer may keep a store per group: it
// mixes full and streaming-head decode, has no vertical-slash or block-sparse prefill head, and
// each streaming head prefills a-shape within the streaming sinks and window (so later steps
// need no row its store drops). Empty otherwise.
KvHeadGroups LayerHeadGroups(const AttentionPolicy& policy, int64_t layer);

// Rows a streaming store holds for steps of up to `step` rows on a rank: the sinks and the
// window (every row while the sequence is shorter than `keep_all_below`), a step's rows and a
// spare window. For a split layer's streaming heads keep_all_below is dense_below_tokens; for a
// layer whose every head streams, 0.
int64_t StreamingStoreRows(int64_t sink, int64_t window, int64_t keep_all_below, int64_t step);

// Whether a sequence of `capacity` positions on a rank, in steps of up to `step` rows, keeps a
// store per group in the layers LayerHeadGroups allows: when the streaming heads' store is less
// than half the capacity (and no window, sink, dense fallback or step covers the sequence).
bool SplitsKvHeads(const AttentionPolicy& policy, int64_t capacity, int64_t step);

// The KV rows of one KV head of one layer, summed over every head and layer, that such a sequence
// keeps on a rank (split where SplitsKvHeads says, with `split_allowed`): every row of its
// full-decode heads (filter, selected and static-eviction layers included: their tier is the
// workers' choice), the constant-size store of all-streaming layers and of split layers'
// streaming heads. A dense policy gives capacity x layers x KV heads.
int64_t KvHeadRows(const AttentionPolicy& policy, int64_t num_kv_heads, int64_t capacity,
                   int64_t step, bool split_allowed = true);

// The selected layers (OmniKV) whose prompt rows a worker may keep in its host tier: all but the
// one right after each filter layer, which stays on the device (its rows gathered while the
// group's host rows load), those with the most compute after their filter layer first (their
// loads hide best), later layers first on a tie. A worker sends the first few of them there, as
// many as its device needs.
std::vector<int64_t> HostTierCandidates(const AttentionPolicy& policy);
// KvHeadRows with every host-tier candidate's prompt rows in host memory: those layers keep only
// their `generated` rows (a rank's share of the generated tokens) on the device, and one layer's
// prompt rows (`capacity` - `generated`) count once more for the window a prefill step after
// held rows reads them through, when steps of `step` rows do not cover the prompt.
int64_t HostTierKvHeadRows(const AttentionPolicy& policy, int64_t num_kv_heads, int64_t capacity,
                           int64_t generated, int64_t step);

}  // namespace millipede
