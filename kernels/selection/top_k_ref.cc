#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/selection/top_k.h"

namespace millipede {

Status TopKCheckArgs(const TopKArgs& args) {
  MP_REQUIRE(args.scores.rank() == 2, "top_k scores: rank ", args.scores.rank(), ", expected 2");
  MP_REQUIRE(args.k >= 0, "top_k: k = ", args.k, " is negative");
  const int64_t rows = args.scores.dim(0), cols = args.scores.dim(1);
  MP_REQUIRE(cols <= std::numeric_limits<int32_t>::max(), "top_k: ", cols,
             " columns do not fit the I32 indices");
  MP_RETURN_IF_ERROR(CheckTensor(args.scores, "top_k scores", DType::kF32, Shape{rows, cols}));
  MP_RETURN_IF_ERROR(CheckTensor(args.index, "top_k index", DType::kI32, Shape{rows, args.k}));
  return CheckTensor(args.value, "top_k value", DType::kF32, Shape{rows, args.k});
}

Status TopKRef(const TopKArgs& args) {
  MP_RETURN_IF_ERROR(TopKCheckArgs(args));
  const int64_t rows = args.scores.dim(0), cols = args.scores.dim(1), k = args.k;
  const float* scores = args.scores.as<const float>();
  int32_t* index = args.index.as<int32_t>();
  float* value = args.value.as<float>();
  std::vector<int32_t> columns;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = scores + r * cols;
    columns.clear();
    for (int64_t c = 0; c < cols; ++c)
      if (!std::isnan(row[c])) columns.push_back(static_cast<int32_t>(c));
    const int64_t n = std::min<int64_t>(k, static_cast<int64_t>(columns.size()));
    // Float comparison makes -0.0 and +0.0 equal, so they fall to the column tie-break.
    std::partial_sort(
        columns.begin(), columns.begin() + n, columns.end(),
        [row](int32_t a, int32_t b) { return row[a] != row[b] ? row[a] > row[b] : a < b; });
    if (args.order == TopKOrder::kColumn) std::sort(columns.begin(), columns.begin() + n);
    for (int64_t i = 0; i < k; ++i) {
      const bool selected = i < n;
      index[r * k + i] = selected ? columns[i] : -1;
      value[r * k + i] = selected ? row[columns[i]] : -std::numeric_limits<float>::infinity();
    }
  }
  return OkStatus();
}

}  // namespace millipede
