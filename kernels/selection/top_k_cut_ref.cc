#include <algorithm>
#include <functional>
#include <vector>

#include "kernels/selection/top_k_cut.h"

namespace millipede {
namespace {

// The k-th largest of row `row`'s keys over all ranks (k >= 1; there are ranks * k of them).
// Rank r's keys start `stride` elements after rank r - 1's.
uint64_t Threshold(const uint64_t* keys, int64_t ranks, int64_t stride, int64_t k, int64_t row) {
  std::vector<uint64_t> all;
  all.reserve(static_cast<size_t>(ranks * k));
  for (int64_t r = 0; r < ranks; ++r)
    all.insert(all.end(), keys + r * stride + row * k, keys + r * stride + (row + 1) * k);
  std::nth_element(all.begin(), all.begin() + (k - 1), all.end(), std::greater<uint64_t>());
  return all[static_cast<size_t>(k - 1)];
}

}  // namespace

Status TopKCutCheckArgs(const TopKCutArgs& args) {
  MP_REQUIRE(args.keys.rank() == 3, "top_k cut keys: rank ", args.keys.rank(), ", expected 3");
  const int64_t ranks = args.keys.dim(0), rows = args.keys.dim(1), k = args.keys.dim(2);
  MP_REQUIRE(args.chosen.rank() == 2, "top_k cut chosen: rank ", args.chosen.rank(),
             ", expected 2");
  const int64_t slots = args.chosen.dim(1);
  MP_RETURN_IF_ERROR(CheckTensor(args.keys, "top_k cut keys", DType::kI64, Shape{ranks, rows, k}));
  MP_RETURN_IF_ERROR(CheckTensor(args.index, "top_k cut index", DType::kI32, Shape{rows, k}));
  MP_RETURN_IF_ERROR(CheckTensor(args.chosen, "top_k cut chosen", DType::kI32, Shape{rows, slots}));
  MP_REQUIRE(args.rank >= 0 && args.rank < ranks, "top_k cut: rank ", args.rank, " of ", ranks);
  MP_REQUIRE(slots <= k, "top_k cut: ", slots, " slots for the best ", k);
  MP_REQUIRE(args.rank_stride == 0 || args.rank_stride >= rows * k, "top_k cut: rank stride ",
             args.rank_stride, " below the ", rows * k, " keys of a rank");
  return OkStatus();
}

Status TopKCutRef(const TopKCutArgs& args) {
  MP_RETURN_IF_ERROR(TopKCutCheckArgs(args));
  const int64_t ranks = args.keys.dim(0), rows = args.keys.dim(1), k = args.keys.dim(2);
  const int64_t slots = args.chosen.dim(1);
  const int64_t stride = args.rank_stride > 0 ? args.rank_stride : rows * k;
  if (k == 0) return OkStatus();
  const auto* keys = args.keys.as<const uint64_t>();
  const int32_t* index = args.index.as<const int32_t>();
  std::vector<int32_t> out(static_cast<size_t>(rows * slots), -1);
  for (int64_t row = 0; row < rows; ++row) {
    const uint64_t threshold = Threshold(keys, ranks, stride, k, row);
    const uint64_t* own = keys + args.rank * stride + row * k;
    int64_t kept = 0;
    for (int64_t i = 0; i < k; ++i) {
      if (own[i] == 0 || own[i] < threshold) continue;
      const int32_t column = index[row * k + i];
      if (kept == slots || column < 0)
        return OutOfRangeError(detail::StrCat("top_k cut: row ", row, " keeps entry ", i,
                                              " (column ", column, ") beyond its ", slots,
                                              " slots or without a column"));
      out[static_cast<size_t>(row * slots + kept++)] = column;
    }
  }
  std::copy(out.begin(), out.end(), args.chosen.as<int32_t>());
  return OkStatus();
}

}  // namespace millipede
