// The static-eviction baseline (H2O-style): at the end of a prefill step the last
// `observed_queries` queries score every key by the softmax probability they give it —
// normalised over every rank's keys — and each KV head keeps its global top `keep_tokens` keys,
// agreed between the ranks (GlobalTopK); decode sees those plus the `recent_tokens` latest
// positions. Exact under context parallelism: the same keys are kept whatever the number of ranks.
//
// Built from backend ops only (attention, the merge rule, KeyScores, TopK, GatherRows), so it
// runs on any backend. The kept rows stay in the layer's store (which keeps every row): an index
// lays them out slot by slot ([slots, kv_heads] flat rows, KV head g's kept rows in position
// order in its first slots), which the batched decode kernel reads in place (on a backend whose
// kernel reads no index, the kept keys and values are gathered once into copies of that layout).
// A decode step attends to each head's kept keys older than the window (a per-head count,
// uploaded when it changes) and to the window's rows, merging the two by log-sum-exp: two parts,
// so the tokens of many sequences decode in one batched call. The prefill's scores go back to
// the scratch pool after each step: what a sequence holds through decode is the index and the
// counts.
//
// The selection is the sequence's state: one strategy object per layer of one sequence.
#pragma once

#include <cstdint>
#include <vector>

#include "policy/attention_policy.h"
#include "worker/attention/attention_strategy.h"
#include "worker/attention/decode/decode_role.h"
#include "worker/attention/observed_queries.h"

namespace millipede {

class StaticEvictionDecode final : public DecodeStrategy {
 public:
  explicit StaticEvictionDecode(const StaticEvictionParams& params) : params_(params) {}
  ~StaticEvictionDecode() override;
  const char* name() const override { return "static-eviction"; }
  Status Partial(AttentionEnv& env, const DecodeInput& in, TensorView o, TensorView lse) override;
  Status AfterPrefill(AttentionEnv& env, const PrefillInput& in) override;
  bool batchable() const override { return true; }
  // The kept rows older than the window (each KV head over its count) and the window's rows.
  Status BatchParts(AttentionEnv& env, const DecodeInput& in,
                    std::vector<DecodePart>* parts) override;

 private:
  // The token's parts: kept (empty when no head has a kept row older than the window) and window.
  struct Parts {
    DecodePart kept;
    ConstKvRows window;
  };
  StatusOr<Parts> PartsOf(AttentionEnv& env, const DecodeInput& in);
  // Each KV head's kept rows of this rank (increasing), from the scores [kv_heads, rows].
  StatusOr<std::vector<std::vector<int64_t>>> Select(AttentionEnv& env, ConstTensorView scores,
                                                     const std::vector<int64_t>& positions);
  // The kept rows' index, slot by slot, in gather_index_ (and, where the backend's batched kernel
  // reads no index, their K and V gathered into heavy_k_ / heavy_v_).
  Status KeepRows(AttentionEnv& env, ConstKvRows rows,
                  const std::vector<std::vector<int64_t>>& kept);
  // One rank whose batched kernel reads indices: each KV head's best rows of `scores` [kv_heads,
  // rows] chosen on the device (TopK in column order), their index built there (SelectionIndex),
  // and the choice copied to the host behind the compute for the decode steps' counts
  // (`positions`: each row's position).
  Status ChooseOnDevice(AttentionEnv& env, ConstTensorView scores, std::vector<int64_t> positions);
  // The scores, positions and top-k of a prefill step, which serve that step only.
  void ReleasePrefillScratch();
  // The kept positions (heavy_positions_) from ChooseOnDevice's copy, once it is complete.
  Status TakeChosen(AttentionEnv& env);
  // Each KV head's kept rows older than the window from `recent_from` on, in counts_ (uploaded
  // only when they change): [kv_heads] I32; false when no head has one.
  StatusOr<bool> CountKept(AttentionEnv& env, int64_t recent_from);
  StaticEvictionParams params_;
  ObservedQueries observed_;
  BackendTensor q_pos_, k_pos_, scores_, top_index_, top_value_, gather_index_;
  BackendTensor tmp_o_, tmp_lse_;  // a decode step's window partial
  // Kept rows, slot by slot: [slots, kv_heads, head_dim]; KV head g's in its first slots. Empty
  // when indexed_ (the kernel reads them in place through gather_index_).
  BackendTensor heavy_k_, heavy_v_;
  bool indexed_ = false;
  // ChooseOnDevice's choice [kv_heads, slots] I32, its copy on the host, the copy and the backend
  // that runs it (null: none pending), and the rows' positions.
  BackendTensor chosen_, chosen_counts_, host_chosen_;
  CopyEvent chosen_copy_;
  Backend* pending_backend_ = nullptr;
  std::vector<int64_t> chosen_positions_;
  std::vector<DecodePart> parts_;  // Partial's, kept for their storage
  int64_t slots_ = 0;
  std::vector<std::vector<int64_t>> heavy_positions_;  // [kv_heads] kept positions, increasing
  BackendTensor counts_;                               // [kv_heads] I32 (CountKept)
  std::vector<int32_t> counted_;                       // what counts_ holds
};

// The static-eviction role's builder: a StaticEvictionDecode with the policy's parameters.
StatusOr<DecodeRoleStrategy> BuildStaticEvictionDecode(const DecodeRoleContext& context);

}  // namespace millipede
