// Prefill of MInference's dynamic sparse heads (vertical-slash, block-sparse) under context
// parallelism. Every rank computes its own queries' sparse attention over an index that is the
// same as a one-process run's:
//  - vertical-slash: the step's last queries reach every rank (observed_queries.h); each rank
//    scores its own keys by column and by diagonal with the global log-sum-exp; diagonal scores
//    are summed over ranks and column candidates cut by one global top-k, so every rank holds the
//    same columns and diagonals per KV head (MInference forces the first 30 columns and the 100
//    nearest diagonals, within the head's budget);
//  - block-sparse: block sums of queries and keys, added over ranks, give the pooled scores;
// then each rank fetches only the keys its queries need from the ranks that hold them (kv_fetch.h)
// and runs the sparse attention op over its own rows and over the fetched ones, merging the two
// partials by log-sum-exp. Prompts shorter than dense_below_tokens run dense (ring).
//
// The layer's dense and A-shape heads keep exact ring attention: their queries and keys are
// packed apart (ring_prefill.h's RunOn) and only their K/V travels the ring; their result is
// merged into the sparse heads' output (the sparse index leaves them empty).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "policy/attention_policy.h"
#include "worker/attention/kv_fetch.h"
#include "worker/attention/observed_queries.h"
#include "worker/attention/ring_prefill.h"

namespace millipede {

// The columns MInference always keeps (the first positions) and the diagonals nearest the main
// one, within each head's budget.
inline constexpr int64_t kForcedColumns = 30;
inline constexpr int64_t kForcedDiagonals = 100;

// Query tiles (sparse_index.h) of queries at `ranges` (rows in order): runs cut at multiples of
// `grid` positions. Flattened (q_row_begin, q_row_end, pos_begin) triples.
std::vector<int64_t> SparseQueryTiles(std::span<const TokenRange> ranges, int64_t grid);

// The key layout (sparse_index.h) of rows holding `ranges` in order: flattened (pos_begin,
// pos_end, row_begin) triples.
std::vector<int64_t> SparseKeyRuns(std::span<const TokenRange> ranges);

// The positions queries at `q_ranges` need under a vertical-slash selection: the selected columns
// before their last query and each selected diagonal's band over their query blocks
// (vertical_slash_index.h).
std::vector<TokenRange> VerticalSlashNeeds(std::span<const TokenRange> q_ranges,
                                           std::span<const int64_t> columns,
                                           std::span<const int64_t> diagonals);

class SparsePrefill final : public PrefillStrategy {
 public:
  // `heads`: the layer's KV heads (one block size for its block-sparse heads, dividing or a
  // multiple of kSparseTileRows; the a-shape heads share one sink count).
  SparsePrefill(std::vector<HeadPrefillPolicy> heads, int64_t dense_below);
  const char* name() const override { return "sparse"; }
  Status Run(AttentionEnv& env, const PrefillInput& in) override;

 private:
  struct Buffer {
    ConstKvRows rows;
    std::vector<int64_t> runs;
  };
  // The vertical-slash heads' columns and diagonals (host [kv_heads, max] padded with -1).
  Status SelectVerticalSlash(AttentionEnv& env, const PrefillInput& in, ConstKvRows mine,
                             std::span<const TokenRange> mine_ranges);
  StatusOr<std::vector<std::vector<int64_t>>> SelectColumns(AttentionEnv& env,
                                                            ConstTensorView scores,
                                                            std::span<const TokenRange> ranges);
  StatusOr<std::vector<std::vector<int64_t>>> SelectDiagonals(AttentionEnv& env,
                                                              ConstTensorView diag);
  // The block-sparse heads' block sums, added over ranks.
  Status PoolBlocks(AttentionEnv& env, const PrefillInput& in, ConstKvRows mine,
                    std::span<const TokenRange> mine_ranges);
  // Positions this rank's queries need (both kinds).
  StatusOr<std::vector<TokenRange>> Needs(AttentionEnv& env, const PrefillInput& in,
                                          const std::vector<int64_t>& tiles);
  // Builds one kind's index of `tiles` over a buffer's layout (count pass, then fill).
  StatusOr<SparseIndexView> BuildIndex(AttentionEnv& env, bool vertical_slash,
                                       ConstTensorView tiles, ConstTensorView runs);
  // The dense and A-shape heads by ring attention, merged into the output.
  Status RunRingHeads(AttentionEnv& env, const PrefillInput& in, ConstKvRows mine);
  // Attends the tiles' queries (rows q_row0...) over one buffer and merges into the output.
  Status AttendChunk(AttentionEnv& env, const PrefillInput& in, int64_t q_row0, int64_t rows,
                     const std::vector<int64_t>& tiles, const Buffer& buffer);

  std::vector<HeadPrefillPolicy> heads_;
  int64_t dense_below_ = 0;
  bool has_vs_ = false, has_bs_ = false;
  int64_t grid_ = kSparseTileRows;
  RingPrefill dense_;
  std::vector<int64_t> ring_heads_;    // KV heads that are dense or A-shape
  std::unique_ptr<RingPrefill> ring_;  // over those heads, packed
  BackendTensor pack_index_, q_ring_, k_ring_, v_ring_, o_ring_, lse_ring_, o_full_, lse_full_;
  ObservedQueries observed_;
  KvFetch fetch_;
  // Vertical-slash selection, host [kv_heads, width] padded with -1.
  std::vector<int64_t> columns_, diagonals_;
  int64_t columns_width_ = 0, diagonals_width_ = 0;
  std::vector<int64_t> top_blocks_;  // [kv_heads]: 0 for vertical-slash heads
  int64_t block_ = 64;
  BackendTensor q_pos_, k_pos_, scores_, diag_, top_index_, top_value_;
  BackendTensor q_sums_, q_counts_, k_sums_, k_counts_;
  struct Pooled {
    ConstTensorView q_sums, q_counts, k_sums, k_counts;
  } pooled_;  // views of the four above, shaped
  BackendTensor dev_columns_, dev_diagonals_, dev_tiles_, dev_runs_;
  BackendTensor range_offsets_, ranges_, column_offsets_, columns_out_;
  BackendTensor o_part_, lse_part_;
};

}  // namespace millipede
