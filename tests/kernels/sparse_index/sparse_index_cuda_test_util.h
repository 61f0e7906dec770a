// Helpers of the index builders' CUDA tests: a count pass and a fill pass on the device as a
// caller runs them (one pair of offset arrays for both passes), for the tests of the fill pass's
// reuse of the count pass (inputs_unchanged_since_count), and a comparison of two indexes.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>

#include "common/status.h"
#include "common/tensor.h"
#include "kernels/sparse_index/sparse_index.h"
#include "tests/kernels/op_harness.h"
#include "tests/kernels/sparse_index/sparse_index_test_util.h"

namespace millipede::testing {

// An I64 tensor of 0x7b7b... bytes: a value no builder writes.
inline HostTensor PoisonedIndexTensor(const Shape& shape) {
  HostTensor t(DType::kI64, shape);
  std::memset(t.view().data, 0x7b, t.NumBytes());
  return t;
}

inline HostIndex ReadIndex(const DeviceTensor& range_offsets, const DeviceTensor& ranges,
                           const DeviceTensor& column_offsets, const DeviceTensor& columns) {
  HostIndex index;
  index.range_offsets = ToVector(range_offsets.Read());
  index.column_offsets = ToVector(column_offsets.Read());
  const std::vector<int64_t> r = ToVector(ranges.Read()), c = ToVector(columns.Read());
  for (size_t i = 0; i + 2 < r.size(); i += 3) index.ranges.push_back({r[i], r[i + 1], r[i + 2]});
  for (size_t i = 0; i + 1 < c.size(); i += 2) index.columns.push_back({c[i], c[i + 1]});
  return index;
}

// The count pass with `count_args`, then `between` (when given), then the fill pass with
// `fill_args` and inputs_unchanged_since_count = `unchanged`, which writes into the count
// pass's offsets and into poisoned ranges [n_ranges, 3] and columns [n_columns, 2] (the sizes
// fill_args need). `build(args)` runs one pass on the device. Returns what the fill pass left;
// items: num_kv_heads * n_tiles, the same for both argument sets.
template <typename Args, typename Build>
StatusOr<HostIndex> CountThenFillOnDevice(Args count_args, Args fill_args, int64_t items,
                                          int64_t n_ranges, int64_t n_columns, bool unchanged,
                                          const Build& build,
                                          const std::function<Status()>& between = {}) {
  DeviceTensor range_offsets(PoisonedIndexTensor({items + 1}));
  DeviceTensor column_offsets(PoisonedIndexTensor({items + 1}));
  DeviceTensor ranges(PoisonedIndexTensor({n_ranges, 3}));
  DeviceTensor columns(PoisonedIndexTensor({n_columns, 2}));
  count_args.out = {range_offsets.view(), TensorView{nullptr, DType::kI64, Shape{0, 3}},
                    column_offsets.view(), TensorView{nullptr, DType::kI64, Shape{0, 2}}};
  MP_RETURN_IF_ERROR(build(count_args));
  if (between) MP_RETURN_IF_ERROR(between());
  fill_args.out = {range_offsets.view(), ranges.view(), column_offsets.view(), columns.view()};
  fill_args.inputs_unchanged_since_count = unchanged;
  MP_RETURN_IF_ERROR(build(fill_args));
  return ReadIndex(range_offsets, ranges, column_offsets, columns);
}

// Entry for entry.
inline void ExpectSameIndex(const HostIndex& got, const HostIndex& expected, const char* what) {
  EXPECT_EQ(got.range_offsets, expected.range_offsets) << what;
  EXPECT_EQ(got.column_offsets, expected.column_offsets) << what;
  EXPECT_EQ(got.ranges, expected.ranges) << what;
  EXPECT_EQ(got.columns, expected.columns) << what;
}

}  // namespace millipede::testing
