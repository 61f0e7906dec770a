// OmniKV's decode roles. A filter layer attends to every row (split-KV, as full decode) and,
// once the ranks' partials are merged, scores this rank's context rows by the probability the
// token's query gives them under the global log-sum-exp (max over the query heads of each KV
// head: OmniKV's last-token selector, the TokenScores op) and keeps each KV head's global top
// `filter.top_k`, agreed between the ranks on the device (each rank offers its local best k as
// keys, all-gathered, and every rank cuts alike: TopKKeys, TopKCut); each rank keeps its own
// share, the TokenSelection of its group. A selected layer attends to the chosen context rows —
// gathered from its device store, or loaded from the host tier by the group's packed load — and
// to every generated row, merged by log-sum-exp; only (o, lse) partials and the filter layers'
// keys cross ranks. With a budget at least the context, every context row is chosen and both
// roles equal full attention.
//
// Built from backend ops and the communicator's all-gather only (attention, the merge rule,
// TokenScores, TopK, TopKKeys, TopKCut, GatherRows and the copy queue's gathers), so they run on
// any backend.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "kernels/selection/top_k_keys.h"
#include "policy/attention_policy.h"
#include "worker/attention/attention_strategy.h"
#include "worker/attention/decode/decode_role.h"
#include "worker/attention/decode/token_selection.h"

namespace millipede {

class FilterDecode final : public DecodeStrategy {
 public:
  FilterDecode(const FilterParams& params, std::shared_ptr<TokenSelection> selection)
      : params_(params), selection_(std::move(selection)) {}
  const char* name() const override { return "filter"; }
  Status Partial(AttentionEnv& env, const DecodeInput& in, TensorView o, TensorView lse) override;
  Status AfterMerge(AttentionEnv& env, const DecodeInput& in, ConstTensorView lse) override;
  // Filter layers of the same budget choose together: the tokens whose context holds at least
  // the budget are scored by one BatchTokenScores and cut by one TopK (on several ranks each
  // rank's offers then cross in one all-gather for all of them); each token's choice equals its
  // own AfterMerge's. The others choose alone.
  bool AfterMergeBatchesWith(const DecodeStrategy& other) const override;
  Status AfterMergeBatch(AttentionEnv& env, std::span<DecodeStrategy* const> strategies,
                         std::span<const DecodeInput> inputs, ConstTensorView q,
                         ConstTensorView lse, std::span<const int32_t> rows) override;
  // One part: every row (AfterMerge scores them per token).
  bool batchable() const override { return true; }
  Status BatchParts(AttentionEnv& env, const DecodeInput& in,
                    std::vector<DecodePart>* parts) override;
  // On one rank over a device store: the selection's shapes stay fixed through decode.
  bool recordable() const override { return true; }

 private:
  // One rank: each KV head's best min(top_k, n) rows straight into the selection (TopK in column
  // order), without the host.
  Status ChooseOnDevice(AttentionEnv& env, ConstTensorView scores);
  // Several ranks, without the host: each rank's best top_k of each KV head as keys (TopK,
  // TopKKeys), all-gathered (top_k keys per head and rank, not all scores), and each rank's
  // share of the agreed cut (TopKCut) straight into the selection.
  Status ChooseAcrossRanks(AttentionEnv& env, std::span<const TokenRange> held,
                           ConstTensorView scores);
  // AfterMergeBatch over several ranks, once TopK gave `index` and `value` [tokens * kv_heads, k]
  // of together_'s tokens: their keys (TopKKeys, each over its own positions) in one all-gather,
  // then each token's share of its cut (TopKCut over its rows of every rank's block) into its
  // selection.
  Status CutAcrossRanks(AttentionEnv& env, std::span<DecodeStrategy* const> strategies,
                        std::span<const DecodeInput> inputs, ConstTensorView index,
                        ConstTensorView value);
  // This rank's context rows in `in.store` (a prefix of its rows): the rows the token scores.
  StatusOr<int64_t> ContextRows(const DecodeInput& in) const;
  FilterParams params_;
  std::shared_ptr<TokenSelection> selection_;
  // The positions of this rank's context rows (several ranks; kept to reuse its storage).
  std::vector<TopKPositionRange> ranges_;
  BackendTensor scores_, top_index_, top_value_, keys_, all_keys_;
  // AfterMergeBatch's tokens that choose together, their keys and query rows (kept for storage).
  std::vector<size_t> together_;
  std::vector<ConstTensorView> batch_keys_;
  std::vector<int32_t> batch_rows_;
};

class SelectedDecode final : public DecodeStrategy {
 public:
  explicit SelectedDecode(std::shared_ptr<TokenSelection> selection)
      : selection_(std::move(selection)) {}
  const char* name() const override { return "selected"; }
  Status Partial(AttentionEnv& env, const DecodeInput& in, TensorView o, TensorView lse) override;
  // Two parts: the chosen context rows (read in place through the selection's index from a device
  // store, or the host tier's load), each KV head over its own count, and the generated rows.
  bool batchable() const override { return true; }
  Status BatchParts(AttentionEnv& env, const DecodeInput& in,
                    std::vector<DecodePart>* parts) override;
  // Over a device store (the engine records no step with a host-tier store).
  bool recordable() const override { return true; }

 private:
  // The chosen rows (empty when none is chosen) and the generated rows of an unrecorded step.
  struct Rows {
    ConstKvRows chosen, generated;
  };
  StatusOr<Rows> ChosenAndGenerated(AttentionEnv& env, const DecodeInput& in);
  // BatchParts with the chosen rows gathered (the host tier's load, or a device store's rows on a
  // backend whose batched kernel reads no index).
  Status GatheredParts(AttentionEnv& env, const DecodeInput& in, std::vector<DecodePart>* parts);
  std::shared_ptr<TokenSelection> selection_;
  BackendTensor tmp_o_, tmp_lse_;  // the generated rows' partial
};

// The filter role's builder: a FilterDecode that starts a new token selection (the context's).
StatusOr<DecodeRoleStrategy> BuildFilterDecode(const DecodeRoleContext& context);
// The selected role's builder: a SelectedDecode over the latest filter layer's selection
// (InvalidArgument when no filter layer comes before).
StatusOr<DecodeRoleStrategy> BuildSelectedDecode(const DecodeRoleContext& context);

}  // namespace millipede
