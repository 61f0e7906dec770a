// Sums of rows over fixed blocks of positions: the mean pooling of MInference's block-sparse
// index (Algorithm 3). Sums and counts rather than means, so that the partial sums of ranks that
// hold different positions of one block add up (an all-reduce) before dividing.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

struct BlockSumsArgs {
  // [n, num_heads, head_dim] F32, BF16 or F16: queries or keys.
  ConstTensorView x;
  // [n_runs, 3] I64 layout of x's rows (sparse_index.h's key layout): row r of a run holds
  // position pos_begin + (r - row_begin). Every row of x is in exactly one run.
  ConstTensorView runs;
  int64_t block = 64;  // positions per block, > 0
  int64_t group = 1;   // consecutive heads summed together: num_heads % group == 0
  // [num_blocks, num_heads / group, head_dim] F32: sums[b, h] = sum over rows at positions in
  // [b * block, (b + 1) * block) and heads h * group .. (h + 1) * group - 1 of x. Blocks with no
  // row are 0. Positions at or beyond num_blocks * block are an error.
  TensorView sums;
  // [num_blocks] F32: the number of rows (positions, not heads) summed into each block.
  TensorView counts;
};

Status BlockSumsCheckArgs(const BlockSumsArgs& args);
// Accumulates in double; overwrites sums and counts.
Status BlockSumsRef(const BlockSumsArgs& args);

}  // namespace millipede
