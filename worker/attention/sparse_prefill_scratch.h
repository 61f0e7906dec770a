// The device buffers sparse prefill works in during one layer's pass of a step, shared by every
// layer and sequence of the engine. A layer's sparse patterns plan the step (observation and
// selection), its keys are fetched, and its index is built and attended per chunk of query tiles,
// all within the layer's pass and in stream order; nothing in these buffers is read by a later
// pass. So one set serves every layer: it grows to the widest layer's step, and the memory plan
// counts it once (worker/engine/sequence.cc) instead of once per layer.
#pragma once

#include <cstdint>
#include <vector>

#include "worker/attention/kv_fetch.h"
#include "worker/attention/prefill_pattern_variant.h"

namespace millipede {

struct SparsePrefillScratch {
  // The index of one chunk of query tiles over one key buffer (prefill_pattern_variant.h).
  SparseIndexBuilder builder;
  // Rows of other ranks this rank's queries need (several ranks).
  KvFetch fetch;
  // A layer's ring heads (dense, A-shape) packed apart (sparse_prefill.cc): their queries
  // [n * packed, d], keys and values [rows * ring heads, d], output and LSE, the unpacked output
  // of one attention chunk [m * heads, d], and the sparse heads' partial of one chunk.
  BackendTensor pack_index, q_ring, k_ring, v_ring, o_ring, lse_ring, o_full, lse_full;
  BackendTensor o_part, lse_part;
  // Vertical-slash plans (vertical_slash_pattern.h): the observed queries' and the keys'
  // positions, key scores [kv_heads, rows] and diagonal sums [kv_heads, length] (F32), the
  // top-k read back, and the selected columns and diagonals [kv_heads, width] (I64).
  BackendTensor vs_q_pos, vs_k_pos, vs_scores, vs_diag, vs_top_index, vs_top_value;
  BackendTensor vs_columns, vs_diagonals;
  // The key ranges vs_k_pos holds the positions of: every layer of a step has the same keys, so
  // the positions (a million at a million-token context) are uploaded once a step, not once a
  // layer.
  std::vector<TokenRange> vs_k_pos_ranges;
  // Block-sparse plans (block_sparse_pattern.h): query and key runs, and the block sums
  // [blocks, kv_heads, d] with their counts [blocks] (F32).
  BackendTensor bs_runs, bs_q_sums, bs_q_counts, bs_k_sums, bs_k_counts;
  // Anti-diagonal plans (antidiagonal_pattern.h): the kept-block bitmaps [kv_heads, blocks,
  // words] (I32), the query and key runs, and with several ranks every key before the rank's
  // last query block gathered into one buffer, a gather index, and the queries of blocks that
  // several ranks share (sent and gathered, F32).
  BackendTensor ad_kept, ad_runs, ad_k, ad_index, ad_q_send, ad_q_shared;

  // Bytes held now.
  int64_t NumBytes() const;
};

}  // namespace millipede
