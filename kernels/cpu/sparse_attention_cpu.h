// The CPU backend's sparse attention: SparseAttentionArgs (kernels/attention/sparse_attention.h),
// blocked and threaded like AttentionCpu, whose block pieces it shares.
#pragma once

#include "common/status.h"
#include "kernels/attention/sparse_attention.h"

namespace millipede {

// Computes what SparseAttentionRef computes, in fp32. Per item (KV head, query tile) the tile's
// rows of every q head of the group are packed together; the item's keys (ranges, then columns;
// keys after the tile's last position dropped) are gathered into chunks of kAttentionCpuKeyTile
// keys, widened to F32, scored with sgemm (Q K^T), masked only where a chunk holds keys after
// the tile's first position, merged by online softmax (AttentionCpuSoftmaxTile) and added with
// sgemm (P V). Items run in parallel, those with the most work first. Same argument and index
// checks (SparseAttentionCheckArgs, SparseAttentionCheckData) and errors as the reference; rows
// in no tile are left untouched.
Status SparseAttentionCpu(const SparseAttentionArgs& args);

}  // namespace millipede
