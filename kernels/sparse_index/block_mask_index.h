// The index (sparse_index.h) of key blocks chosen beforehand and given as bitmaps, one per KV head
// and query block: the index op of patterns that select whole blocks in a step of their own
// (antidiagonal_select.h).
//
// Item (g, t), for KV head g and tile t in query block qb = pos_begin / block, attends the key
// blocks kb <= qb whose bit is set in row (g, qb - qb_begin) of `kept` (bit kb % 32 of word
// kb / 32), at positions [kb * block, min((kb + 1) * block, b + 1)) where b is the tile's last
// position: adjacent kept blocks make one range, placed in the key buffer by the key layout
// (sparse_index.h). Bits of blocks after qb are ignored. A head with heads[g] == 0 has empty items;
// there are no single columns (column_offsets all 0).
// Tiles must not cross a multiple of `block` in position (the caller cuts tiles at multiples of
// gcd(block, kSparseTileRows)).
#pragma once

#include <cstdint>

#include "kernels/sparse_index/sparse_index.h"

namespace millipede {

struct BlockMaskIndexArgs {
  ConstTensorView tiles;  // [n_tiles, 3] I64 query tiles
  ConstTensorView runs;   // [n_runs, 3] I64 key layout
  // [num_kv_heads, n_qb, words] I32 bitmaps (read as unsigned words): row (g, i) is query block
  // qb_begin + i.
  ConstTensorView kept;
  int64_t qb_begin = 0;
  int64_t block = 64;  // > 0
  // [num_kv_heads] I64 host memory: nonzero for the heads the bitmaps serve.
  const int64_t* heads = nullptr;
  bool skip_absent = false;  // as in vertical_slash_index.h
  SparseIndexOut out;        // items = num_kv_heads * n_tiles
  // As in block_sparse_index.h: the fill pass that directly follows its count pass with the same
  // inputs may reuse the count pass's offsets on CUDA. The CPU reference ignores it.
  bool inputs_unchanged_since_count = false;
};

Status BlockMaskIndexCheckArgs(const BlockMaskIndexArgs& args);
// A tile crossing a block boundary, a tile whose query block has no bitmap row, or (without
// skip_absent) a needed position missing from the key layout is an InvalidArgument error.
Status BlockMaskIndexRef(const BlockMaskIndexArgs& args);

}  // namespace millipede
