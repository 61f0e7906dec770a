#include "worker/attention/sparse_prefill_scratch.h"

namespace millipede {

int64_t SparsePrefillScratch::NumBytes() const {
  int64_t bytes = builder.NumBytes() + fetch.NumBytes();
  for (const BackendTensor* t :
       {&pack_index, &q_ring,    &k_ring,       &v_ring,       &o_ring,      &lse_ring,
        &o_full,     &lse_full,  &o_part,       &lse_part,     &vs_q_pos,    &vs_k_pos,
        &vs_scores,  &vs_diag,   &vs_top_index, &vs_top_value, &vs_columns,  &vs_diagonals,
        &bs_runs,    &bs_q_sums, &bs_q_counts,  &bs_k_sums,    &bs_k_counts, &ad_kept,
        &ad_runs,    &ad_k,      &ad_index,     &ad_q_send,    &ad_q_shared})
    bytes += static_cast<int64_t>(t->NumBytes());
  return bytes;
}

}  // namespace millipede
