#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "kernels/sparse_index/sparse_index_ref.h"
#include "kernels/sparse_index/vertical_slash_index.h"

namespace millipede {
namespace {

using sparse_index_ref::IndexBuilder;
using sparse_index_ref::KeyLayout;
using sparse_index_ref::Tile;

// One head's selections: values >= 0, strictly ascending, then only -1.
StatusOr<std::vector<int64_t>> ReadSelection(ConstTensorView t, int64_t g, const char* what) {
  const int64_t n = t.dim(1);
  const int64_t* row = t.as<const int64_t>() + g * n;
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i) {
    if (row[i] == -1) continue;
    MP_REQUIRE(row[i] >= 0, "vertical_slash_index: KV head ", g, " ", what, "[", i, "] = ", row[i],
               " is negative (only -1 marks an unused slot)");
    MP_REQUIRE(i == 0 || (row[i - 1] != -1 && row[i - 1] < row[i]),
               "vertical_slash_index: KV head ", g, " ", what, "[", i, "] = ", row[i], " follows ",
               row[i - 1], " (selections must be strictly ascending, then -1)");
    out.push_back(row[i]);
  }
  return out;
}

// The merged bands of diagonals `diagonals` (ascending) for a tile whose last position is `e`,
// inside the query block [a, b]: ranges [begin, end) in ascending position. Descending diagonals
// give ascending band starts.
std::vector<std::array<int64_t, 2>> MergedBands(const std::vector<int64_t>& diagonals, int64_t a,
                                                int64_t b, int64_t e) {
  std::vector<std::array<int64_t, 2>> bands;
  for (auto it = diagonals.rbegin(); it != diagonals.rend(); ++it) {
    const int64_t d = *it;
    if (b - d < 0) continue;
    const int64_t begin = std::max<int64_t>(0, a - d), end = std::min(b - d, e) + 1;
    if (!bands.empty() && begin <= bands.back()[1]) {
      bands.back()[1] = std::max(bands.back()[1], end);
    } else {
      bands.push_back({begin, end});
    }
  }
  return bands;
}

bool Covered(const std::vector<std::array<int64_t, 2>>& bands, int64_t pos) {
  auto it = std::upper_bound(bands.begin(), bands.end(), pos,
                             [](int64_t p, const std::array<int64_t, 2>& r) { return p < r[1]; });
  return it != bands.end() && (*it)[0] <= pos;
}

Status BuildItem(const VerticalSlashIndexArgs& args, const std::vector<int64_t>& columns,
                 const std::vector<int64_t>& diagonals, const Tile& tile, const KeyLayout& layout,
                 int64_t g, int64_t t, IndexBuilder* index) {
  const int64_t block = tile.pos_first / kSparseTileRows * kSparseTileRows;
  const auto bands = MergedBands(diagonals, block, block + kSparseTileRows - 1, tile.pos_last);
  int64_t missing = 0;
  for (const auto& band : bands)
    MP_REQUIRE(layout.Place(band[0], band[1], args.skip_absent, &index->ranges, &missing),
               "vertical_slash_index: KV head ", g, ", tile ", t, ": key position ", missing,
               " is not in the key layout");
  for (int64_t c : columns) {
    if (c > tile.pos_last) break;
    if (Covered(bands, c)) continue;
    const int64_t row = layout.Row(c);
    if (row < 0 && args.skip_absent) continue;
    MP_REQUIRE(row >= 0, "vertical_slash_index: KV head ", g, ", tile ", t, ": key position ", c,
               " is not in the key layout");
    index->columns.push_back({row, c});
  }
  index->EndItem();
  return OkStatus();
}

}  // namespace

Status VerticalSlashIndexCheckArgs(const VerticalSlashIndexArgs& args) {
  MP_RETURN_IF_ERROR(SparseTilesCheck(args.tiles, "vertical_slash_index"));
  MP_RETURN_IF_ERROR(SparseRunsCheck(args.runs, "vertical_slash_index"));
  MP_REQUIRE(args.columns.rank() == 2 && args.diagonals.rank() == 2,
             "vertical_slash_index: columns and diagonals must be [num_kv_heads, n]; got ",
             args.columns.shape.ToString(), " and ", args.diagonals.shape.ToString());
  const int64_t num_kv_heads = args.columns.dim(0);
  MP_RETURN_IF_ERROR(
      CheckTensor(args.columns, "vertical_slash_index columns", DType::kI64, args.columns.shape));
  MP_RETURN_IF_ERROR(CheckTensor(args.diagonals, "vertical_slash_index diagonals", DType::kI64,
                                 Shape{num_kv_heads, args.diagonals.dim(1)}));
  return SparseIndexOutCheck(args.out, num_kv_heads * args.tiles.dim(0), "vertical_slash_index");
}

Status VerticalSlashIndexRef(const VerticalSlashIndexArgs& args) {
  MP_RETURN_IF_ERROR(VerticalSlashIndexCheckArgs(args));
  MP_ASSIGN_OR_RETURN(const std::vector<Tile> tiles,
                      sparse_index_ref::ReadTiles(args.tiles, "vertical_slash_index"));
  MP_ASSIGN_OR_RETURN(const KeyLayout layout, KeyLayout::Read(args.runs, "vertical_slash_index"));
  IndexBuilder index;
  for (int64_t g = 0; g < args.columns.dim(0); ++g) {
    MP_ASSIGN_OR_RETURN(const std::vector<int64_t> columns,
                        ReadSelection(args.columns, g, "columns"));
    MP_ASSIGN_OR_RETURN(const std::vector<int64_t> diagonals,
                        ReadSelection(args.diagonals, g, "diagonals"));
    for (size_t t = 0; t < tiles.size(); ++t)
      MP_RETURN_IF_ERROR(BuildItem(args, columns, diagonals, tiles[t], layout, g,
                                   static_cast<int64_t>(t), &index));
  }
  return sparse_index_ref::WriteIndex(index, args.out, "vertical_slash_index");
}

}  // namespace millipede
