#include <algorithm>
#include <vector>

#include "kernels/sparse_index/block_mask_index.h"
#include "kernels/sparse_index/sparse_index_ref.h"

namespace millipede {
namespace {

using sparse_index_ref::IndexBuilder;
using sparse_index_ref::KeyLayout;
using sparse_index_ref::Tile;

Status BuildItem(const BlockMaskIndexArgs& args, const Tile& tile, const KeyLayout& layout,
                 int64_t g, int64_t t, IndexBuilder* index) {
  if (args.heads[g] == 0) {  // a head of another pattern
    index->EndItem();
    return OkStatus();
  }
  const int64_t qb = tile.pos_first / args.block, n_qb = args.kept.dim(1);
  const int64_t words = args.kept.dim(2);
  MP_REQUIRE(tile.pos_last / args.block == qb, "block_mask_index: tile ", t, " (positions ",
             tile.pos_first, " to ", tile.pos_last, ") crosses a multiple of block ", args.block);
  MP_REQUIRE(qb >= args.qb_begin && qb < args.qb_begin + n_qb, "block_mask_index: tile ", t,
             " is in query block ", qb, ", outside the bitmaps' blocks [", args.qb_begin, ", ",
             args.qb_begin + n_qb, ")");
  const uint32_t* bits = reinterpret_cast<const uint32_t*>(args.kept.as<const int32_t>()) +
                         (g * n_qb + qb - args.qb_begin) * words;
  std::vector<int64_t> kept;
  for (int64_t kb = 0; kb <= qb; ++kb)
    if ((bits[kb / 32] >> (kb % 32)) & 1u) kept.push_back(kb);
  int64_t missing = 0;
  MP_REQUIRE(sparse_index_ref::PlaceBlocks(kept, args.block, tile.pos_last, layout,
                                           args.skip_absent, &index->ranges, &missing),
             "block_mask_index: KV head ", g, ", tile ", t, ": key position ", missing,
             " is not in the key layout");
  index->EndItem();
  return OkStatus();
}

}  // namespace

Status BlockMaskIndexCheckArgs(const BlockMaskIndexArgs& args) {
  MP_RETURN_IF_ERROR(SparseTilesCheck(args.tiles, "block_mask_index"));
  MP_RETURN_IF_ERROR(SparseRunsCheck(args.runs, "block_mask_index"));
  MP_REQUIRE(args.block > 0, "block_mask_index: block = ", args.block, " must be positive");
  MP_REQUIRE(args.qb_begin >= 0, "block_mask_index: qb_begin = ", args.qb_begin, " is negative");
  MP_REQUIRE(args.kept.rank() == 3, "block_mask_index kept: rank ", args.kept.rank(),
             ", expected 3");
  MP_RETURN_IF_ERROR(CheckTensor(args.kept, "block_mask_index kept", DType::kI32, args.kept.shape));
  const int64_t num_kv_heads = args.kept.dim(0), n_qb = args.kept.dim(1);
  MP_REQUIRE(n_qb == 0 || (args.qb_begin + n_qb - 1) / 32 < args.kept.dim(2),
             "block_mask_index: query block ", args.qb_begin + n_qb - 1, " needs ",
             (args.qb_begin + n_qb - 1) / 32 + 1, " bitmap words, the bitmaps have ",
             args.kept.dim(2));
  MP_REQUIRE(args.heads != nullptr || num_kv_heads == 0, "block_mask_index: heads is missing");
  return SparseIndexOutCheck(args.out, num_kv_heads * args.tiles.dim(0), "block_mask_index");
}

Status BlockMaskIndexRef(const BlockMaskIndexArgs& args) {
  MP_RETURN_IF_ERROR(BlockMaskIndexCheckArgs(args));
  MP_ASSIGN_OR_RETURN(const std::vector<Tile> tiles,
                      sparse_index_ref::ReadTiles(args.tiles, "block_mask_index"));
  MP_ASSIGN_OR_RETURN(const KeyLayout layout, KeyLayout::Read(args.runs, "block_mask_index"));
  IndexBuilder index;
  for (int64_t g = 0; g < args.kept.dim(0); ++g)
    for (size_t t = 0; t < tiles.size(); ++t)
      MP_RETURN_IF_ERROR(BuildItem(args, tiles[t], layout, g, static_cast<int64_t>(t), &index));
  return sparse_index_ref::WriteIndex(index, args.out, "block_mask_index");
}

}  // namespace millipede
