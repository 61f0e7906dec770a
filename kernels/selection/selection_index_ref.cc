#include "kernels/selection/selection_index.h"

#include <algorithm>

namespace millipede {

Status SelectionIndexCheckArgs(const SelectionIndexArgs& args) {
  MP_REQUIRE(args.chosen.rank() == 2, "selection index chosen: rank ", args.chosen.rank(),
             ", expected 2");
  const int64_t kv_heads = args.chosen.dim(0), slots = args.chosen.dim(1);
  MP_REQUIRE(args.index.rank() == 2, "selection index index: rank ", args.index.rank(),
             ", expected 2");
  const int64_t blocks = args.index.dim(0);
  MP_RETURN_IF_ERROR(
      CheckTensor(args.chosen, "selection index chosen", DType::kI32, Shape{kv_heads, slots}));
  MP_RETURN_IF_ERROR(CheckTensor(args.index, "selection index index", DType::kI64,
                                 Shape{blocks, slots * kv_heads}));
  MP_RETURN_IF_ERROR(
      CheckTensor(args.counts, "selection index counts", DType::kI32, Shape{kv_heads}));
  MP_REQUIRE(args.rows >= 0 && (slots == 0 || args.rows > 0), "selection index: ", slots,
             " slots over ", args.rows, " rows");
  MP_REQUIRE(blocks <= 1 || args.block_stride >= args.rows * kv_heads,
             "selection index: block stride ", args.block_stride, " < ", args.rows, " rows of ",
             kv_heads, " heads");
  return OkStatus();
}

Status SelectionIndexRef(const SelectionIndexArgs& args) {
  MP_RETURN_IF_ERROR(SelectionIndexCheckArgs(args));
  const int64_t kv_heads = args.chosen.dim(0), slots = args.chosen.dim(1);
  const int64_t blocks = args.index.dim(0);
  const int32_t* chosen = args.chosen.as<const int32_t>();
  for (int64_t g = 0; g < kv_heads; ++g) {
    bool ended = false;
    for (int64_t i = 0; i < slots; ++i) {
      const int64_t row = chosen[g * slots + i];
      if (row < -1 || row >= args.rows)
        return OutOfRangeError(detail::StrCat("selection index: head ", g, " slot ", i,
                                              " chose row ", row, " of ", args.rows));
      if (ended && row >= 0)
        return OutOfRangeError(detail::StrCat("selection index: head ", g, " chose row ", row,
                                              " in slot ", i, " after an empty slot"));
      ended = ended || row < 0;
    }
  }
  int32_t* counts = args.counts.as<int32_t>();
  int64_t* index = args.index.as<int64_t>();
  for (int64_t g = 0; g < kv_heads; ++g) {
    int32_t n = 0;
    while (n < slots && chosen[g * slots + n] >= 0) ++n;
    counts[g] = n;
    for (int64_t i = 0; i < slots; ++i) {
      const int64_t row = std::max<int64_t>(chosen[g * slots + i], 0);
      for (int64_t b = 0; b < blocks; ++b)
        index[b * slots * kv_heads + i * kv_heads + g] =
            b * args.block_stride + row * kv_heads + g;
    }
  }
  return OkStatus();
}

}  // namespace millipede
