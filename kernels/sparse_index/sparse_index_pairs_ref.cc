#include "kernels/sparse_index/sparse_index_pairs.h"

namespace millipede {

Status SparseIndexPairsCheckArgs(const SparseIndexPairsArgs& args) {
  constexpr const char* kWhat = "sparse index pairs";
  MP_RETURN_IF_ERROR(SparseTilesCheck(args.tiles, kWhat));
  MP_REQUIRE(args.num_kv_heads >= 0, kWhat, ": num_kv_heads ", args.num_kv_heads, " < 0");
  MP_RETURN_IF_ERROR(SparseIndexCheck(args.index, args.num_kv_heads * args.tiles.dim(0), kWhat));
  return CheckTensor(args.pairs, "sparse index pairs: pairs", DType::kI64, Shape{1});
}

Status SparseIndexPairsRef(const SparseIndexPairsArgs& args) {
  MP_RETURN_IF_ERROR(SparseIndexPairsCheckArgs(args));
  const int64_t n_tiles = args.tiles.dim(0), items = args.num_kv_heads * n_tiles;
  const int64_t* tiles = args.tiles.as<const int64_t>();
  const int64_t* range_offsets = args.index.range_offsets.as<const int64_t>();
  const int64_t* column_offsets = args.index.column_offsets.as<const int64_t>();
  const int64_t* ranges = args.index.ranges.as<const int64_t>();
  const int64_t* columns = args.index.columns.as<const int64_t>();
  const int64_t n_ranges = args.index.ranges.dim(0), n_columns = args.index.columns.dim(0);
  for (int64_t i = 0; i < items; ++i)
    if (range_offsets[i] < 0 || range_offsets[i] > range_offsets[i + 1] ||
        range_offsets[i + 1] > n_ranges || column_offsets[i] < 0 ||
        column_offsets[i] > column_offsets[i + 1] || column_offsets[i + 1] > n_columns)
      return OutOfRangeError(detail::StrCat("sparse index pairs: the offsets of item ", i,
                                            " are decreasing or past the index"));
  int64_t pairs = 0;
  for (int64_t i = 0; i < items; ++i) {
    const int64_t* tile = tiles + (i % n_tiles) * 3;
    const int64_t q_first = tile[2], q_count = tile[1] - tile[0];
    for (int64_t r = range_offsets[i]; r < range_offsets[i + 1]; ++r) {
      const int64_t* range = ranges + r * 3;
      pairs += SparseRangePairs(range[2], range[2] + range[1] - range[0], q_first, q_count);
    }
    for (int64_t c = column_offsets[i]; c < column_offsets[i + 1]; ++c)
      pairs += SparseRangePairs(columns[c * 2 + 1], columns[c * 2 + 1] + 1, q_first, q_count);
  }
  args.pairs.as<int64_t>()[0] += pairs;
  return OkStatus();
}

}  // namespace millipede
