// Helpers of the sparse benchmarks (CUDA-free): comma lists of sizes, and the work of a sparse
// attention call over an index: visible (query, key) pairs, and the tiles of 128 keys x 128
// packed query rows the Hopper kernel executes (partial chunks padded).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "common/flags.h"
#include "common/status.h"
#include "kernels/sparse_index/sparse_index.h"

namespace millipede {

inline constexpr int64_t kBenchKeyChunk = 64;    // keys per chunk of the Hopper kernel
inline constexpr int64_t kBenchBlockRows = 128;  // packed query rows per thread block

// Positive integers from "a,b,c"; `flag` names the option in errors.
inline StatusOr<std::vector<int64_t>> ParsePositiveList(const std::string& list,
                                                        const std::string& flag) {
  std::vector<int64_t> values;
  for (size_t begin = 0; begin <= list.size();) {
    const size_t end = std::min(list.find(',', begin), list.size());
    MP_ASSIGN_OR_RETURN(const int64_t value, ParseInt64(list.substr(begin, end - begin), flag));
    MP_REQUIRE(value > 0, flag, ": ", value, " is not positive");
    values.push_back(value);
    begin = end + 1;
  }
  return values;
}

// Pairs (query q in [a, b], key in [lo, hi]) with key <= q, for hi <= b.
inline double VisiblePairs(int64_t lo, int64_t hi, int64_t a, int64_t b) {
  double pairs = 0;
  const int64_t q0 = std::max(a, lo);
  if (q0 <= hi) {  // queries inside the band see a growing prefix of it
    const double n = static_cast<double>(hi - q0 + 1);
    pairs += n * static_cast<double>(q0 - lo + 1) + n * (n - 1) / 2;
  }
  const int64_t q1 = std::max(a, hi + 1);  // queries after it see all of it
  if (q1 <= b) pairs += static_cast<double>(b - q1 + 1) * static_cast<double>(hi - lo + 1);
  return pairs;
}

// Executed tiles of one item whose keys fill `chunks` chunks of kBenchKeyChunk, for `group`
// query heads per KV head (a tile's rows are its kSparseTileRows positions x group heads).
inline int64_t ExecutedTiles(int64_t chunks, int64_t group) {
  const int64_t row_blocks = (kSparseTileRows * group + kBenchBlockRows - 1) / kBenchBlockRows;
  return (chunks + 1) / 2 * row_blocks;
}

struct SparseWork {
  double visible_pairs = 0;    // (query position, key) pairs per KV head, summed
  int64_t executed_tiles = 0;  // ExecutedTiles summed over the items
};

// The work of an index read back to the host whose key rows are positions (sparse_index.h
// layouts; tiles of whole 64-position blocks, tile t at positions [64 t, min(n, 64 t + 64))).
inline SparseWork IndexWork(const std::vector<int64_t>& range_offsets,
                            const std::vector<int64_t>& ranges,
                            const std::vector<int64_t>& column_offsets,
                            const std::vector<int64_t>& columns, int64_t n_tiles, int64_t n,
                            int64_t group) {
  SparseWork work;
  const int64_t items = static_cast<int64_t>(range_offsets.size()) - 1;
  for (int64_t i = 0; i < items; ++i) {
    const int64_t a = (i % n_tiles) * kSparseTileRows;
    const int64_t b = std::min(n, a + kSparseTileRows) - 1;
    int64_t chunks = 0;
    for (int64_t r = range_offsets[i]; r < range_offsets[i + 1]; ++r) {
      const int64_t length = ranges[3 * r + 1] - ranges[3 * r], lo = ranges[3 * r + 2];
      work.visible_pairs += VisiblePairs(lo, lo + length - 1, a, b);
      chunks += (length + kBenchKeyChunk - 1) / kBenchKeyChunk;
    }
    for (int64_t c = column_offsets[i]; c < column_offsets[i + 1]; ++c)
      work.visible_pairs += static_cast<double>(b - std::max(a, columns[2 * c + 1]) + 1);
    const int64_t n_columns = column_offsets[i + 1] - column_offsets[i];
    chunks += (n_columns + kBenchKeyChunk - 1) / kBenchKeyChunk;
    work.executed_tiles += ExecutedTiles(chunks, group);
  }
  return work;
}

}  // namespace millipede
