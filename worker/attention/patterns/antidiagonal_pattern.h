// XAttention's adaptive block-sparse prefill (kernels/sparse_index/antidiagonal_select.h) under
// context parallelism. At every step each rank scores the query blocks its queries touch
// against every key before them, and the kept blocks of a tile's query block are its index
// (kernels/sparse_index/block_mask_index.h). So that every rank selects what one process would
// (exactly on the CPU; on a GPU up to the rounding of products run at each rank's own shapes):
// the keys other ranks hold are fetched (K only) for the scoring, and a query block whose queries
// several ranks hold is scored by each of them over all of its queries, gathered from the ranks
// that hold them. Only the kept blocks' K/V are then fetched for attention. The layer's
// antidiagonal heads share one block size (dividing or a multiple of kSparseTileRows) and stride.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "worker/attention/prefill_pattern_variant.h"

namespace millipede {

const PrefillPatternVariant& AntidiagonalPattern();

// One layer's antidiagonal heads (the index state AntidiagonalPattern makes).
class AntidiagonalHeads final : public SparsePatternIndex {
 public:
  // `heads`: every KV head of the layer.
  explicit AntidiagonalHeads(std::span<const HeadPrefillPolicy> heads);
  int64_t grid() const override;
  // The kept-block bitmaps of the step's query blocks this rank's queries touch.
  Status Plan(AttentionEnv& env, const PrefillInput& in, ConstKvRows mine,
              std::span<const TokenRange> mine_ranges) override;
  // The kept blocks' positions: the index built over a layout where rows are positions.
  StatusOr<std::vector<TokenRange>> Needs(AttentionEnv& env, const PrefillInput& in,
                                          const std::vector<int64_t>& tiles,
                                          SparseIndexBuilder& builder) override;
  Status BuildPass(AttentionEnv& env, ConstTensorView tiles, ConstTensorView runs,
                   const SparseIndexOut& out, bool fill) override;

 private:
  // Every key in [0, key_end) in one buffer: this rank's rows, and with several ranks the
  // others' keys fetched and gathered after them. Its key layout in `runs`.
  StatusOr<ConstTensorView> AllKeys(AttentionEnv& env, const PrefillInput& in, ConstKvRows mine,
                                    std::span<const TokenRange> mine_ranges, int64_t key_end,
                                    std::vector<int64_t>* runs);
  // One AntidiagonalSelect call over queries `q` [rows, heads, d] at `q_runs` into the bitmaps.
  Status Select(AttentionEnv& env, const PrefillInput& in, ConstTensorView q,
                const std::vector<int64_t>& q_runs, ConstTensorView k,
                const std::vector<int64_t>& k_runs);

  std::vector<int64_t> permille_;  // [kv_heads]: 0 for heads of other patterns
  int64_t block_ = 128, stride_ = 8;
  int64_t qb_begin_ = 0;  // the query block of the bitmaps' row 0 (after Plan)
  TensorView kept_;       // [kv_heads, n_qb, words] I32, in the engine's scratch (after Plan)
};

}  // namespace millipede
