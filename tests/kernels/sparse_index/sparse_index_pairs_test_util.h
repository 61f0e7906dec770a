// Random sparse indices for the SparseIndexPairs tests: items with sorted, disjoint key ranges
// and columns outside them, in the CSR layout of sparse_index.h (the key rows equal positions).
#pragma once

#include <array>
#include <cstdint>
#include <random>
#include <vector>

#include "common/tensor.h"
#include "kernels/sparse_index/sparse_index_pairs.h"

namespace millipede::testing {

struct PairsItem {
  int64_t q_first = 0, q_count = 0;
  std::vector<std::array<int64_t, 2>> ranges;  // [begin, end) positions
  std::vector<int64_t> columns;
};

struct PairsIndex {
  int64_t num_kv_heads = 0;
  std::vector<std::array<int64_t, 3>> tiles;  // (q_row_begin, q_row_end, pos_begin)
  std::vector<PairsItem> items;               // g * n_tiles + t
  HostTensor tiles_t, range_offsets, ranges, column_offsets, columns;

  // The tensors of the index (built on the first call).
  SparseIndexPairsArgs Args() {
    const int64_t n_tiles = static_cast<int64_t>(tiles.size());
    const int64_t items_n = static_cast<int64_t>(items.size());
    tiles_t = HostTensor(DType::kI64, {n_tiles, 3});
    for (int64_t t = 0; t < n_tiles; ++t)
      for (int j = 0; j < 3; ++j) tiles_t.data<int64_t>()[t * 3 + j] = tiles[t][j];
    int64_t n_ranges = 0, n_columns = 0;
    for (const PairsItem& it : items) {
      n_ranges += static_cast<int64_t>(it.ranges.size());
      n_columns += static_cast<int64_t>(it.columns.size());
    }
    range_offsets = HostTensor(DType::kI64, {items_n + 1});
    column_offsets = HostTensor(DType::kI64, {items_n + 1});
    ranges = HostTensor(DType::kI64, {n_ranges, 3});
    columns = HostTensor(DType::kI64, {n_columns, 2});
    int64_t r = 0, c = 0;
    for (int64_t i = 0; i < items_n; ++i) {
      range_offsets.data<int64_t>()[i] = r;
      column_offsets.data<int64_t>()[i] = c;
      for (const auto& range : items[i].ranges) {
        int64_t* row = ranges.data<int64_t>() + 3 * r++;
        row[0] = range[0];  // rows equal positions
        row[1] = range[1];
        row[2] = range[0];
      }
      for (int64_t col : items[i].columns) {
        int64_t* row = columns.data<int64_t>() + 2 * c++;
        row[0] = col;
        row[1] = col;
      }
    }
    range_offsets.data<int64_t>()[items_n] = r;
    column_offsets.data<int64_t>()[items_n] = c;
    SparseIndexPairsArgs a;
    a.tiles = AsConst(tiles_t.view());
    a.index = {AsConst(range_offsets.view()), AsConst(ranges.view()), AsConst(column_offsets.view()),
               AsConst(columns.view())};
    a.num_kv_heads = num_kv_heads;
    return a;
  }
};

// `heads` x `tiles` items: consecutive 64-position tiles (the last
// may be partial) from a random multiple of 64, each item random ranges and columns before and
// after its tile (the later keys are masked).
inline PairsIndex RandomPairsIndex(uint64_t seed, int64_t heads, int64_t tiles) {
  std::mt19937_64 rng(seed);
  PairsIndex index;
  index.num_kv_heads = heads;
  const int64_t first = static_cast<int64_t>(rng() % 4) * 64;
  int64_t row = 0;
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t count = t + 1 == tiles ? 1 + static_cast<int64_t>(rng() % 64) : 64;
    index.tiles.push_back({row, row + count, first + 64 * t});
    row += count;
  }
  const int64_t span = first + 64 * tiles + 64;
  for (int64_t g = 0; g < heads; ++g)
    for (int64_t t = 0; t < tiles; ++t) {
      PairsItem item{index.tiles[t][2], index.tiles[t][1] - index.tiles[t][0], {}, {}};
      int64_t pos = static_cast<int64_t>(rng() % 8);
      while (pos < span) {
        const int64_t gap = static_cast<int64_t>(rng() % 50);
        const int64_t len = static_cast<int64_t>(rng() % 70);
        if (rng() % 3 == 0) {
          item.columns.push_back(pos);
          pos += 1 + gap;
        } else {
          if (len > 0) item.ranges.push_back({pos, pos + len});
          pos += len + 1 + gap;
        }
      }
      index.items.push_back(item);
    }
  return index;
}

}  // namespace millipede::testing
