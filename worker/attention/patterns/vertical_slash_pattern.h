// MInference's vertical-slash prefill under context parallelism. At every step the layer's
// vertical-slash heads observe the step's last queries (the most any of them asks for), which
// reach every rank (observed_queries.h); each rank scores its own keys by column and by diagonal
// with the global log-sum-exp (KeyScores); diagonal scores are summed over ranks and column
// candidates cut by one global top-k per budget, so every rank holds the same columns and
// diagonals per KV head (MInference forces the first kForcedColumns columns and the
// kForcedDiagonals nearest diagonals, within the head's budget). The index op is
// kernels/sparse_index/vertical_slash_index.h.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "worker/attention/observed_queries.h"
#include "worker/attention/prefill_pattern_variant.h"

namespace millipede {

const PrefillPatternVariant& VerticalSlashPattern();

// The columns MInference always keeps (the first positions) and the diagonals nearest the main
// one, within each head's budget.
inline constexpr int64_t kForcedColumns = 30;
inline constexpr int64_t kForcedDiagonals = 100;

// The positions queries at `q_ranges` need under a vertical-slash selection: the selected columns
// before their last query and each selected diagonal's band over their query blocks
// (vertical_slash_index.h).
std::vector<TokenRange> VerticalSlashNeeds(std::span<const TokenRange> q_ranges,
                                           std::span<const int64_t> columns,
                                           std::span<const int64_t> diagonals);

// One layer's vertical-slash heads (the index state VerticalSlashPattern makes).
class VerticalSlashHeads final : public SparsePatternIndex {
 public:
  // `heads`: every KV head of the layer.
  explicit VerticalSlashHeads(std::span<const HeadPrefillPolicy> heads);
  Status Plan(AttentionEnv& env, const PrefillInput& in, ConstKvRows mine,
              std::span<const TokenRange> mine_ranges) override;
  StatusOr<std::vector<TokenRange>> Needs(AttentionEnv& env, const PrefillInput& in,
                                          const std::vector<int64_t>& tiles,
                                          SparseIndexBuilder& builder) override;
  Status BuildPass(AttentionEnv& env, ConstTensorView tiles, ConstTensorView runs,
                   const SparseIndexOut& out, bool fill) override;

 private:
  // Each head's selected columns (global top-k per budget over the ranks' candidates) from this
  // rank's column scores [kv_heads, keys] at positions `ranges`, and its selected diagonals
  // from the diagonal scores [kv_heads, length] summed over ranks (vertical_slash_selection.cc).
  StatusOr<std::vector<std::vector<int64_t>>> SelectColumns(AttentionEnv& env,
                                                            ConstTensorView scores,
                                                            std::span<const TokenRange> ranges);
  StatusOr<std::vector<std::vector<int64_t>>> SelectDiagonals(AttentionEnv& env,
                                                              ConstTensorView diag);

  std::vector<HeadPrefillPolicy> heads_;
  ObservedQueries observed_;
  // The selection, host [kv_heads, width] padded with -1 (its device copies, the scores and
  // the top-k: the engine's SparsePrefillScratch, valid within the layer's pass).
  std::vector<int64_t> columns_, diagonals_;
  int64_t columns_width_ = 0, diagonals_width_ = 0;
};

}  // namespace millipede
