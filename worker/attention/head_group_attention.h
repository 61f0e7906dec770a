// Attention of a layer whose KV heads keep their rows in two stores (HeadGroupKvStore):
// DuoAttention's retrieval heads over every row, its streaming heads over the sinks and a recent
// window. Each group's query heads are packed apart ([n, the group's query heads, head_dim],
// CopyHeads), attend to their own store's rows and are unpacked into the layer's output, so the
// result is the one-store layer's (StreamingHeadsDecode, RingPrefill with windows) head for head.
//
// Prefill: each group by ring attention over every rank's rows of that group (the streaming
// heads' blocks are the rows their store kept, plus the step's); the a-shape windows and the
// dense fallback below dense_below_tokens are those of the policy. Decode: the full heads over
// every row, the streaming heads over the rows their store kept (exactly the sinks and window the
// token sees, or, while the store keeps every row, those rows with the windows applied); under
// context parallelism each rank's partial is merged by the engine. The decode tokens of several
// sequences whose layers split their heads alike decode together: each group's queries of every
// token packed, one BatchDecodeAttention call per group over each token's store of that group.
// The streaming group's call applies the windows to every token on one rank, where a store's rows
// are positions 0 .. n - 1 until it drops rows and then the sinks followed by a run that ends at
// the token (so the windows hide exactly what the store would have dropped); under context
// parallelism it batches once every token's store drops rows, and runs token by token before.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "worker/attention/attention_strategy.h"
#include "worker/attention/decode/full_decode.h"
#include "worker/attention/decode/streaming_heads_decode.h"
#include "worker/attention/ring_prefill.h"
#include "worker/kv/head_group_kv_store.h"

namespace millipede {

// The query heads of some KV heads (`group` query heads each), packed KV head by KV head.
class HeadPack {
 public:
  HeadPack(const std::vector<int32_t>& kv_heads, int64_t group);
  int64_t packed() const { return static_cast<int64_t>(q_heads_.size()); }
  // q [n, heads, head_dim] -> packed [n, packed(), head_dim].
  Status Pack(Backend& b, ConstTensorView q, TensorView packed) const;
  // o [n, packed(), head_dim] and lse [n, packed()] into the layer's out_o [n, heads, head_dim]
  // and out_lse [n, heads] (their other heads untouched).
  Status Unpack(Backend& b, ConstTensorView o, ConstTensorView lse, TensorView out_o,
                TensorView out_lse) const;

 private:
  std::vector<int32_t> q_heads_, slots_;
};

// A step's packed queries, outputs and LSE, shared by the layers of a sequence (they attend one
// after another): q and o [n, packed, head_dim], lse [n, packed] F32.
struct HeadPackScratch {
  BackendTensor q, o, lse;
  // What they take for steps of `rows` query rows and `packed` heads of `head_dim`.
  static int64_t BytesFor(int64_t rows, int64_t packed, int64_t head_dim) {
    return 4 * rows * packed * (2 * head_dim + 1);
  }
};

// The KV heads' windows within one group, in the group's order.
HeadWindows GroupWindows(const HeadWindows& layer, const std::vector<int32_t>& kv_heads);

class HeadGroupPrefill final : public PrefillStrategy {
 public:
  // `windows`: the layer's a-shape windows per KV head (the streaming heads' within `streaming`);
  // they apply from `windowed_from` positions on, as RingPrefill's.
  HeadGroupPrefill(const KvHeadGroups& groups, int64_t group, const HeadWindows& windows,
                   const KvRetention& streaming, int64_t windowed_from,
                   std::shared_ptr<HeadPackScratch> scratch, bool fp8 = false);
  const char* name() const override { return "head-groups"; }
  Status Run(AttentionEnv& env, const PrefillInput& in) override;

 private:
  KvRetention streaming_;
  HeadPack packs_[2];
  RingPrefill rings_[2];
  std::shared_ptr<HeadPackScratch> scratch_;
};

class HeadGroupDecode final : public DecodeStrategy {
 public:
  // `streaming`: what the streaming heads keep (StreamingHeadRetention), whose sinks and window
  // they see.
  HeadGroupDecode(const KvHeadGroups& groups, int64_t group, const KvRetention& streaming,
                  std::shared_ptr<HeadPackScratch> scratch);
  const char* name() const override { return "head-groups"; }
  Status Partial(AttentionEnv& env, const DecodeInput& in, TensorView o, TensorView lse) override;
  // Another sequence's head-group decode of the same groups, windows and sinks.
  bool BatchesWith(const DecodeStrategy& other) const override;
  Status BatchPartials(AttentionEnv& env, std::span<DecodeStrategy* const> strategies,
                       std::span<const DecodeInput> inputs, ConstTensorView q, TensorView o,
                       TensorView lse) override;

 private:
  // One group's partials of the run's tokens: q [n, p, head_dim], o [n, p, head_dim], lse [n, p]
  // (p the group's query heads).
  Status GroupPartials(AttentionEnv& env, int group, std::span<DecodeStrategy* const> strategies,
                       std::span<const DecodeInput> inputs, ConstTensorView q, TensorView o,
                       TensorView lse);
  std::vector<int32_t> kv_heads_[2];  // the full and the streaming KV heads
  HeadPack groups_[2];                // each group's query heads
  int64_t sink_, window_;             // the streaming heads'
  HeadPack pack_;          // every query head: the full heads' first, then the streaming heads'
  int64_t full_heads_;     // query heads of the full KV heads
  FullDecode full_;
  StreamingHeadsDecode streaming_;
  int64_t keep_all_below_;
  std::shared_ptr<HeadPackScratch> scratch_;
};

}  // namespace millipede
