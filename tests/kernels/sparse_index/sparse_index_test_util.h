// Helpers of the index builders' tests: I64 tensors from lists, running a builder's count pass
// and fill pass on host memory, and the key positions an index item selects.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <set>
#include <vector>

#include "common/status.h"
#include "common/tensor.h"
#include "kernels/sparse_index/sparse_index.h"

namespace millipede::testing {

inline HostTensor I64Tensor(const Shape& shape, const std::vector<int64_t>& values) {
  HostTensor t(DType::kI64, shape);
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.NumElements());
  for (size_t i = 0; i < values.size(); ++i) t.data<int64_t>()[i] = values[i];
  return t;
}

// Rows of three: [n, 3] from {a0, b0, c0, a1, ...}.
inline HostTensor Rows3(const std::vector<int64_t>& values) {
  return I64Tensor({static_cast<int64_t>(values.size() / 3), 3}, values);
}

// An index read back to the host.
struct HostIndex {
  std::vector<int64_t> range_offsets, column_offsets;
  std::vector<std::array<int64_t, 3>> ranges;   // (row_begin, row_end, pos_begin)
  std::vector<std::array<int64_t, 2>> columns;  // (row, pos)
  int64_t items() const { return static_cast<int64_t>(range_offsets.size()) - 1; }
};

inline std::vector<int64_t> ToVector(const HostTensor& t) {
  return std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + t.NumElements());
}

// Runs `build(args)` as a caller does: the count pass into poisoned offsets, then the fill pass
// into ranges and columns sized by them. The fill pass must rewrite the same offsets.
template <typename Args, typename Build>
StatusOr<HostIndex> BuildIndex(Args args, int64_t items, const Build& build) {
  HostTensor range_offsets = I64Tensor({items + 1}, std::vector<int64_t>(items + 1, -7));
  HostTensor column_offsets = I64Tensor({items + 1}, std::vector<int64_t>(items + 1, -7));
  args.out = SparseIndexOut{range_offsets.view(), TensorView{nullptr, DType::kI64, Shape{0, 3}},
                            column_offsets.view(), TensorView{nullptr, DType::kI64, Shape{0, 2}}};
  MP_RETURN_IF_ERROR(build(args));
  HostIndex index;
  index.range_offsets = ToVector(range_offsets);
  index.column_offsets = ToVector(column_offsets);
  const int64_t n_ranges = index.range_offsets.back(), n_columns = index.column_offsets.back();
  HostTensor ranges = I64Tensor({n_ranges, 3}, std::vector<int64_t>(n_ranges * 3, -7));
  HostTensor columns = I64Tensor({n_columns, 2}, std::vector<int64_t>(n_columns * 2, -7));
  // Fresh offsets for the fill pass: it must write them, not rely on the count pass's.
  HostTensor range_offsets2 = I64Tensor({items + 1}, std::vector<int64_t>(items + 1, -7));
  HostTensor column_offsets2 = I64Tensor({items + 1}, std::vector<int64_t>(items + 1, -7));
  args.out =
      SparseIndexOut{range_offsets2.view(), ranges.view(), column_offsets2.view(), columns.view()};
  MP_RETURN_IF_ERROR(build(args));
  EXPECT_EQ(ToVector(range_offsets2), index.range_offsets) << "count and fill passes differ";
  EXPECT_EQ(ToVector(column_offsets2), index.column_offsets) << "count and fill passes differ";
  for (int64_t i = 0; i < n_ranges; ++i)
    index.ranges.push_back({ranges.data<int64_t>()[3 * i], ranges.data<int64_t>()[3 * i + 1],
                            ranges.data<int64_t>()[3 * i + 2]});
  for (int64_t i = 0; i < n_columns; ++i)
    index.columns.push_back({columns.data<int64_t>()[2 * i], columns.data<int64_t>()[2 * i + 1]});
  return index;
}

// Item i's ranges and columns.
inline std::vector<std::array<int64_t, 3>> ItemRanges(const HostIndex& index, int64_t i) {
  return {index.ranges.begin() + index.range_offsets[i],
          index.ranges.begin() + index.range_offsets[i + 1]};
}
inline std::vector<std::array<int64_t, 2>> ItemColumns(const HostIndex& index, int64_t i) {
  return {index.columns.begin() + index.column_offsets[i],
          index.columns.begin() + index.column_offsets[i + 1]};
}

// The positions item i selects, checking the layout rules on the way: ranges non-empty, sorted
// and disjoint; columns sorted, outside every range; every row where `row_of` puts its position.
template <typename RowOf>
std::set<int64_t> ItemPositions(const HostIndex& index, int64_t i, const RowOf& row_of) {
  std::set<int64_t> positions;
  int64_t last = -1;
  for (const auto& r : ItemRanges(index, i)) {
    EXPECT_LT(r[0], r[1]) << "empty range in item " << i;
    EXPECT_GT(r[2], last) << "ranges of item " << i << " out of order or overlapping";
    for (int64_t p = r[2]; p < r[2] + r[1] - r[0]; ++p) {
      EXPECT_EQ(row_of(p), r[0] + p - r[2]) << "item " << i << " position " << p;
      positions.insert(p);
      last = p;
    }
  }
  last = -1;
  for (const auto& c : ItemColumns(index, i)) {
    EXPECT_GT(c[1], last) << "columns of item " << i << " out of order";
    EXPECT_EQ(positions.count(c[1]), 0u) << "column " << c[1] << " inside a range of item " << i;
    EXPECT_EQ(row_of(c[1]), c[0]) << "item " << i << " column " << c[1];
    last = c[1];
  }
  for (const auto& c : ItemColumns(index, i)) positions.insert(c[1]);
  return positions;
}

}  // namespace millipede::testing
