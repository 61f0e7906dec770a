#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/sparse_index/block_sparse_index.h"
#include "kernels/sparse_index/sparse_index_ref.h"

namespace millipede {
namespace {

using sparse_index_ref::IndexBuilder;
using sparse_index_ref::KeyLayout;
using sparse_index_ref::Tile;

// The kept key blocks of one item, ascending: the diagonal block and the top_blocks[g] - 1 best
// scoring non-empty earlier blocks (ties: the lower block; a NaN score is never kept).
std::vector<int64_t> KeptBlocks(const BlockSparseIndexArgs& args, int64_t g, int64_t qb) {
  const int64_t num_kv_heads = args.q_sums.dim(1), head_dim = args.q_sums.dim(2);
  const float* q_sums = args.q_sums.as<const float>() + (qb * num_kv_heads + g) * head_dim;
  const float* k_sums = args.k_sums.as<const float>();
  const float* k_counts = args.k_counts.as<const float>();
  const double q_scale =
      1.0 / (static_cast<double>(args.q_counts.as<const float>()[qb]) * args.group);
  std::vector<int64_t> candidates;
  std::vector<double> score(static_cast<size_t>(qb));
  for (int64_t kb = 0; kb < qb; ++kb) {
    if (k_counts[kb] <= 0.0f) continue;
    const float* k = k_sums + (kb * num_kv_heads + g) * head_dim;
    double dot = 0.0;
    for (int64_t c = 0; c < head_dim; ++c) dot += static_cast<double>(q_sums[c]) * k[c];
    score[kb] = dot * q_scale / k_counts[kb];
    if (!std::isnan(score[kb])) candidates.push_back(kb);
  }
  const size_t n = std::min<size_t>(candidates.size(), static_cast<size_t>(args.top_blocks[g] - 1));
  std::partial_sort(
      candidates.begin(), candidates.begin() + n, candidates.end(),
      [&](int64_t a, int64_t b) { return score[a] != score[b] ? score[a] > score[b] : a < b; });
  candidates.resize(n);
  candidates.push_back(qb);
  std::sort(candidates.begin(), candidates.end());
  return candidates;
}

Status BuildItem(const BlockSparseIndexArgs& args, const Tile& tile, const KeyLayout& layout,
                 int64_t g, int64_t t, IndexBuilder* index) {
  if (args.top_blocks[g] == 0) {  // not a block-sparse head
    index->EndItem();
    return OkStatus();
  }
  const int64_t qb = tile.pos_first / args.block, num_blocks = args.q_counts.dim(0);
  MP_REQUIRE(tile.pos_last / args.block == qb, "block_sparse_index: tile ", t, " (positions ",
             tile.pos_first, " to ", tile.pos_last, ") crosses a multiple of block ", args.block);
  MP_REQUIRE(qb < num_blocks, "block_sparse_index: tile ", t, " is in block ", qb, ", beyond ",
             num_blocks, " blocks");
  MP_REQUIRE(args.q_counts.as<const float>()[qb] > 0.0f, "block_sparse_index: tile ", t,
             " is in query block ", qb, ", whose query count is 0");
  int64_t missing = 0;
  MP_REQUIRE(sparse_index_ref::PlaceBlocks(KeptBlocks(args, g, qb), args.block, tile.pos_last,
                                           layout, args.skip_absent, &index->ranges, &missing),
             "block_sparse_index: KV head ", g, ", tile ", t, ": key position ", missing,
             " is not in the key layout");
  index->EndItem();
  return OkStatus();
}

}  // namespace

Status BlockSparseIndexCheckArgs(const BlockSparseIndexArgs& args) {
  MP_RETURN_IF_ERROR(SparseTilesCheck(args.tiles, "block_sparse_index"));
  MP_RETURN_IF_ERROR(SparseRunsCheck(args.runs, "block_sparse_index"));
  MP_REQUIRE(args.block > 0 && args.group > 0, "block_sparse_index: block (", args.block,
             ") and group (", args.group, ") must be positive");
  MP_REQUIRE(args.q_sums.rank() == 3, "block_sparse_index q_sums: rank ", args.q_sums.rank(),
             ", expected 3");
  const Shape sums_shape = args.q_sums.shape;
  const int64_t num_blocks = sums_shape[0], num_kv_heads = sums_shape[1];
  MP_RETURN_IF_ERROR(
      CheckTensor(args.q_sums, "block_sparse_index q_sums", DType::kF32, sums_shape));
  MP_RETURN_IF_ERROR(
      CheckTensor(args.k_sums, "block_sparse_index k_sums", DType::kF32, sums_shape));
  MP_RETURN_IF_ERROR(
      CheckTensor(args.q_counts, "block_sparse_index q_counts", DType::kF32, Shape{num_blocks}));
  MP_RETURN_IF_ERROR(
      CheckTensor(args.k_counts, "block_sparse_index k_counts", DType::kF32, Shape{num_blocks}));
  MP_REQUIRE(args.top_blocks != nullptr || num_kv_heads == 0,
             "block_sparse_index: top_blocks is missing");
  for (int64_t g = 0; g < num_kv_heads; ++g)
    MP_REQUIRE(args.top_blocks[g] >= 0, "block_sparse_index: top_blocks[", g,
               "] = ", args.top_blocks[g], " is negative");
  return SparseIndexOutCheck(args.out, num_kv_heads * args.tiles.dim(0), "block_sparse_index");
}

Status BlockSparseIndexRef(const BlockSparseIndexArgs& args) {
  MP_RETURN_IF_ERROR(BlockSparseIndexCheckArgs(args));
  MP_ASSIGN_OR_RETURN(const std::vector<Tile> tiles,
                      sparse_index_ref::ReadTiles(args.tiles, "block_sparse_index"));
  MP_ASSIGN_OR_RETURN(const KeyLayout layout, KeyLayout::Read(args.runs, "block_sparse_index"));
  IndexBuilder index;
  for (int64_t g = 0; g < args.q_sums.dim(1); ++g)
    for (size_t t = 0; t < tiles.size(); ++t)
      MP_RETURN_IF_ERROR(BuildItem(args, tiles[t], layout, g, static_cast<int64_t>(t), &index));
  return sparse_index_ref::WriteIndex(index, args.out, "block_sparse_index");
}

}  // namespace millipede
