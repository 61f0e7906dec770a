// MInference's block-sparse prefill under context parallelism: at every step the block sums of
// queries and keys (block_sums.h), added over ranks, give every rank the same pooled scores, and
// each query block keeps its best key blocks (kernels/sparse_index/block_sparse_index.h). The
// layer's block-sparse heads share one block size, which divides or is a multiple of
// kSparseTileRows (the query tiles are cut at their gcd).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "worker/attention/prefill_pattern_variant.h"

namespace millipede {

const PrefillPatternVariant& BlockSparsePattern();

// One layer's block-sparse heads (the index state BlockSparsePattern makes).
class BlockSparseHeads final : public SparsePatternIndex {
 public:
  // `heads`: every KV head of the layer (its block-sparse heads share one block size).
  explicit BlockSparseHeads(std::span<const HeadPrefillPolicy> heads);
  int64_t grid() const override;
  // The block sums of this step's queries and of this rank's keys, added over ranks.
  Status Plan(AttentionEnv& env, const PrefillInput& in, ConstKvRows mine,
              std::span<const TokenRange> mine_ranges) override;
  // The kept blocks' positions: the index built over a layout where rows are positions.
  StatusOr<std::vector<TokenRange>> Needs(AttentionEnv& env, const PrefillInput& in,
                                          const std::vector<int64_t>& tiles,
                                          SparseIndexBuilder& builder) override;
  Status BuildPass(AttentionEnv& env, ConstTensorView tiles, ConstTensorView runs,
                   const SparseIndexOut& out, bool fill) override;

 private:
  std::vector<int64_t> top_blocks_;  // [kv_heads]: 0 for heads of other patterns
  int64_t block_ = 64;
  // Views of the four sums and counts, shaped, after Plan (in the engine's
  // SparsePrefillScratch: valid within the layer's pass).
  struct Pooled {
    ConstTensorView q_sums, q_counts, k_sums, k_counts;
  } pooled_;
};

}  // namespace millipede
