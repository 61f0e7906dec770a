// Helpers of the sparse attention tests (reference, CPU and CUDA): query tiles, key layouts,
// indexes built from per-item lists of positions, random vertical-slash-like items, and a
// brute-force attention over the explicit mask those items describe.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "common/tensor.h"
#include "kernels/attention/sparse_attention.h"
#include "tests/kernels/kernel_test_util.h"

namespace millipede::testing {

using SparseRow3 = std::array<int64_t, 3>;

// The keys of one item, in positions: ranges [begin, end) and single columns.
struct SparseItem {
  std::vector<std::array<int64_t, 2>> ranges;
  std::vector<int64_t> columns;
};

// Query rows [0, n_q) at positions pos_begin, pos_begin + 1, ... cut into tiles of at most
// `rows` rows that never cross a multiple of kSparseTileRows in position.
inline std::vector<SparseRow3> SparseTilesOf(int64_t n_q, int64_t pos_begin,
                                             int64_t rows = kSparseTileRows) {
  std::vector<SparseRow3> tiles;
  for (int64_t r = 0; r < n_q;) {
    const int64_t pos = pos_begin + r;
    const int64_t next_block = (pos / kSparseTileRows + 1) * kSparseTileRows;
    const int64_t end = std::min({n_q, r + rows, r + next_block - pos});
    tiles.push_back({r, end, pos});
    r = end;
  }
  return tiles;
}

// Where each key position sits in the key buffer: runs (pos_begin, pos_end, row_begin).
struct SparseLayout {
  std::vector<SparseRow3> runs;

  // Positions [0, n) in rows [0, n).
  static SparseLayout Identity(int64_t n) { return {{{0, n, 0}}}; }
  int64_t Rows() const {
    int64_t rows = 0;
    for (const SparseRow3& r : runs) rows = std::max(rows, r[2] + r[1] - r[0]);
    return rows;
  }
  // The position of key row j, or -1 when no run holds it.
  int64_t PositionOf(int64_t j) const {
    for (const SparseRow3& r : runs)
      if (j >= r[2] && j < r[2] + r[1] - r[0]) return r[0] + j - r[2];
    return -1;
  }
  int64_t RowOf(int64_t pos) const {
    for (const SparseRow3& r : runs)
      if (pos >= r[0] && pos < r[1]) return r[2] + pos - r[0];
    ADD_FAILURE() << "position " << pos << " is in no run";
    return -1;
  }
};

inline HostTensor I64Tensor(const std::vector<int64_t>& values, const Shape& shape) {
  HostTensor t(DType::kI64, shape);
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.NumElements());
  std::copy(values.begin(), values.end(), t.data<int64_t>());
  return t;
}

// Tiles and index in host memory, built from items g * n_tiles + t.
struct SparseCase {
  HostTensor tiles, range_offsets, ranges, column_offsets, columns;
  int64_t n_ranges = 0, n_columns = 0;

  SparseIndexView index() const {
    return {range_offsets.view(), ranges.view(), column_offsets.view(), columns.view()};
  }
};

// A range of positions becomes one range of rows per run it crosses.
inline SparseCase BuildSparseCase(const std::vector<SparseRow3>& tiles,
                                  const std::vector<SparseItem>& items,
                                  const SparseLayout& layout) {
  std::vector<int64_t> tile_values, roff{0}, rows, coff{0}, cols;
  for (const SparseRow3& t : tiles) tile_values.insert(tile_values.end(), t.begin(), t.end());
  for (const SparseItem& item : items) {
    for (const auto& [begin, end] : item.ranges)
      for (const SparseRow3& run : layout.runs) {
        const int64_t b = std::max(begin, run[0]), e = std::min(end, run[1]);
        if (b < e) rows.insert(rows.end(), {run[2] + b - run[0], run[2] + e - run[0], b});
      }
    roff.push_back(static_cast<int64_t>(rows.size() / 3));
    for (int64_t c : item.columns) cols.insert(cols.end(), {layout.RowOf(c), c});
    coff.push_back(static_cast<int64_t>(cols.size() / 2));
  }
  SparseCase c;
  const int64_t n_tiles = static_cast<int64_t>(tiles.size()),
                n = static_cast<int64_t>(items.size());
  c.n_ranges = static_cast<int64_t>(rows.size() / 3);
  c.n_columns = static_cast<int64_t>(cols.size() / 2);
  c.tiles = I64Tensor(tile_values, {n_tiles, 3});
  c.range_offsets = I64Tensor(roff, {n + 1});
  c.ranges = I64Tensor(rows, {c.n_ranges, 3});
  c.column_offsets = I64Tensor(coff, {n + 1});
  c.columns = I64Tensor(cols, {c.n_columns, 2});
  return c;
}

// A vertical-slash-like item for a tile ending at position `last`: a band before the diagonal,
// a few bands further back, a sink range, and scattered columns, all below `n_pos`. Some keys
// lie after `last` so that the causal mask matters inside ranges and among columns. `scale`
// multiplies the diagonal band's and one far band's length, the number of short far bands (as
// single diagonals give) and of columns.
inline SparseItem RandomSparseItem(std::mt19937_64& rng, int64_t last, int64_t n_pos,
                                   int64_t scale = 1) {
  std::vector<char> in(static_cast<size_t>(n_pos), 0);
  auto mark = [&](int64_t b, int64_t e) {
    for (int64_t p = std::max<int64_t>(0, b); p < std::min(e, n_pos); ++p) in[p] = 1;
  };
  std::uniform_int_distribution<int64_t> len(1, 40), long_len(1, 40 * scale);
  mark(last - long_len(rng), last + 1 + len(rng) / 4);
  std::uniform_int_distribution<int64_t> any(0, n_pos - 1);
  for (int64_t i = 0; i < 3 * scale; ++i) {
    const int64_t b = any(rng);
    mark(b, b + len(rng));
  }
  const int64_t far = any(rng);
  mark(far, far + long_len(rng));
  mark(0, len(rng) / 8);
  SparseItem item;
  for (int64_t p = 0; p < n_pos;) {
    if (!in[p]) {
      ++p;
      continue;
    }
    int64_t e = p;
    while (e < n_pos && in[e]) ++e;
    item.ranges.push_back({p, e});
    p = e;
  }
  for (int64_t i = 0; i < 24 * scale; ++i) {
    const int64_t p = any(rng);
    if (!in[p]) in[p] = 2;
  }
  for (int64_t p = 0; p < n_pos; ++p)
    if (in[p] == 2) item.columns.push_back(p);
  return item;
}

inline bool SparseItemHas(const SparseItem& item, int64_t pos) {
  for (const auto& [b, e] : item.ranges)
    if (pos >= b && pos < e) return true;
  return std::find(item.columns.begin(), item.columns.end(), pos) != item.columns.end();
}

// AllClose, where rows in no tile are NaN (untouched) in both or neither.
inline ::testing::AssertionResult SparseAllClose(const HostTensor& actual,
                                                 const HostTensor& expected, double rtol,
                                                 double atol) {
  std::vector<float> a = ToFloats(actual), e = ToFloats(expected);
  for (size_t i = 0; i < a.size() && i < e.size(); ++i)
    if (std::isnan(a[i]) && std::isnan(e[i])) a[i] = e[i] = 0.0f;
  return AllClose(a, e, rtol, atol);
}

struct SparseResult {
  HostTensor o, lse;
};

// The textbook definition over the explicit mask: every key row of the buffer is visible to a
// query when the item holds its position and the position is <= the query's. Rows in no tile
// stay NaN.
inline SparseResult SparseBruteForce(const HostTensor& q, const HostTensor& k, const HostTensor& v,
                                     const std::vector<SparseRow3>& tiles,
                                     const std::vector<SparseItem>& items,
                                     const SparseLayout& layout) {
  const int64_t n_q = q.shape()[0], hq = q.shape()[1], d = q.shape()[2];
  const int64_t n_kv = k.shape()[0], hk = k.shape()[1], group = hq / hk;
  const int64_t n_tiles = static_cast<int64_t>(tiles.size());
  const std::vector<float> qf = ToFloats(q), kf = ToFloats(k), vf = ToFloats(v);
  SparseResult r{PoisonedF32({n_q, hq, d}), PoisonedF32({n_q, hq})};
  for (int64_t t = 0; t < n_tiles; ++t)
    for (int64_t row = tiles[t][0]; row < tiles[t][1]; ++row)
      for (int64_t h = 0; h < hq; ++h) {
        const SparseItem& item = items[(h / group) * n_tiles + t];
        const int64_t p = tiles[t][2] + row - tiles[t][0], g = h / group;
        std::vector<double> s(n_kv, -INFINITY);
        double m = -INFINITY;
        for (int64_t j = 0; j < n_kv; ++j) {
          const int64_t pos = layout.PositionOf(j);
          if (pos < 0 || pos > p || !SparseItemHas(item, pos)) continue;
          double dot = 0;
          for (int64_t c = 0; c < d; ++c)
            dot += double(qf[(row * hq + h) * d + c]) * kf[(j * hk + g) * d + c];
          s[j] = dot / std::sqrt(double(d));
          m = std::max(m, s[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < n_kv; ++j) sum += s[j] == -INFINITY ? 0.0 : std::exp(s[j] - m);
        r.lse.data<float>()[row * hq + h] = sum == 0 ? -INFINITY : float(m + std::log(sum));
        for (int64_t c = 0; c < d; ++c) {
          double o = 0;
          for (int64_t j = 0; j < n_kv; ++j)
            if (s[j] != -INFINITY) o += std::exp(s[j] - m) * vf[(j * hk + g) * d + c];
          r.o.data<float>()[(row * hq + h) * d + c] = sum == 0 ? 0.0f : float(o / sum);
        }
      }
  return r;
}

}  // namespace millipede::testing
