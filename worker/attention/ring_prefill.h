// Prefill by ring attention: every rank's K/V block of the layer travels around the ring of
// ranks, each rank attending its own queries to the block in hand while the next transfer runs
// (double buffering), partial (o, lse) merged by log-sum-exp (AttentionState). Exact dense
// attention for dense heads; A-shape heads (sink tokens + a local window per KV head, masked by
// global position so blocks and chunks compose exactly) ride the same pass, and blocks no head
// can see are skipped. Deep into a long prompt a short step exchanges queries and partials
// instead (pass-Q, prefill_exchange.h): the same pairs, on the same ranks, far fewer bytes.
#pragma once

#include <span>
#include <vector>

#include "worker/attention/attention_strategy.h"

namespace millipede {

// Per KV head the window (0: the head is dense) and the layer's sink count.
struct HeadWindows {
  std::vector<int64_t> window;  // [num_kv_heads], empty: every head dense
  int64_t sink = 0;
  const int64_t* data() const { return window.empty() ? nullptr : window.data(); }
  bool AllWindowed() const;
  int64_t MaxWindow() const;
  // The query-key pairs that `heads` KV heads (the first `heads` of `window`) attend for queries
  // at `queries` (attended_pairs.h).
  int64_t Pairs(std::span<const TokenRange> queries, int64_t heads) const;
};

class RingPrefill final : public PrefillStrategy {
 public:
  // `windows` apply when the sequence holds at least `windowed_from` positions after the step
  // (shorter prompts are dense under any policy). `fp8`: the policy's fp8_attention, taken by
  // the calls without windows (Backend::AttentionFp8; a call with a windowed head stays exact).
  RingPrefill(HeadWindows windows, int64_t windowed_from, bool fp8 = false)
      : windows_(std::move(windows)), windowed_from_(windowed_from), fp8_(fp8) {}
  const char* name() const override { return windows_.window.empty() ? "dense" : "a-shape"; }
  Status Run(AttentionEnv& env, const PrefillInput& in) override;
  // Run over this rank's block `mine` instead of the store's rows: a layer's dense and A-shape
  // heads packed apart from its sparse heads (mine [rows, kv heads of the pack, head_dim], in.q
  // and in.o_acc [n, their query heads * head_dim], in.lse_acc [n, their query heads], windows
  // per packed KV head).
  Status RunOn(AttentionEnv& env, const PrefillInput& in, ConstKvRows mine);

 private:
  // Attends the queries to one block (rows with positions `ranges`) and merges into the output.
  Status AttendBlock(AttentionEnv& env, const PrefillInput& in, ConstKvRows block,
                     std::span<const TokenRange> ranges, const HeadWindows& windows) const;
  // Pass-KV: the blocks travel round the ring.
  Status RunPassKv(AttentionEnv& env, const PrefillInput& in, ConstKvRows mine,
                   const HeadWindows& windows);
  // Pass-Q: every rank's queries (`queries`: how many each rank has) come to this rank's block
  // in rounds of `round_rows` rows per rank, and their partials go back to be merged
  // (pass_q_prefill.cc).
  Status RunPassQ(AttentionEnv& env, const PrefillInput& in, ConstKvRows mine,
                  const HeadWindows& windows, std::span<const int64_t> queries,
                  int64_t round_rows);
  HeadWindows windows_;
  int64_t windowed_from_ = 0;
  bool fp8_ = false;
};

}  // namespace millipede
