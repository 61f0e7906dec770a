#include <algorithm>
#include <vector>

#include "kernels/selection/top_k_key.h"
#include "kernels/selection/top_k_keys.h"

namespace millipede {

Status TopKKeysCheckArgs(const TopKKeysArgs& args) {
  MP_REQUIRE(args.index.rank() == 2, "top_k keys index: rank ", args.index.rank(),
             ", expected 2");
  const Shape shape{args.index.dim(0), args.index.dim(1)};
  MP_RETURN_IF_ERROR(CheckTensor(args.index, "top_k keys index", DType::kI32, shape));
  MP_RETURN_IF_ERROR(CheckTensor(args.value, "top_k keys value", DType::kF32, shape));
  MP_RETURN_IF_ERROR(CheckTensor(args.keys, "top_k keys keys", DType::kI64, shape));
  MP_REQUIRE(args.ranges.size() <= kTopKKeysMaxRanges, "top_k keys: ", args.ranges.size(),
             " position ranges, at most ", kTopKKeysMaxRanges);
  int64_t end = 0;
  for (size_t i = 0; i < args.ranges.size(); ++i) {
    const TopKPositionRange& r = args.ranges[i];
    MP_REQUIRE(r.begin >= end && r.end >= r.begin && r.end <= (int64_t{1} << 32),
               "top_k keys: position range ", i, " [", r.begin, ", ", r.end,
               ") is not increasing, disjoint and below 2^32");
    end = r.end;
  }
  return OkStatus();
}

Status TopKKeysRef(const TopKKeysArgs& args) {
  MP_RETURN_IF_ERROR(TopKKeysCheckArgs(args));
  // Each range's first column.
  std::vector<int64_t> first_column;
  int64_t columns = 0;
  for (const TopKPositionRange& r : args.ranges) {
    first_column.push_back(columns);
    columns += r.end - r.begin;
  }
  const int64_t n = args.index.NumElements();
  const int32_t* index = args.index.as<const int32_t>();
  for (int64_t i = 0; i < n; ++i)
    if (index[i] < -1 || index[i] >= columns)
      return OutOfRangeError(
          detail::StrCat("top_k keys: entry ", i, " has column ", index[i], " of ", columns));
  const float* value = args.value.as<const float>();
  auto* keys = args.keys.as<uint64_t>();
  for (int64_t i = 0; i < n; ++i) {
    if (index[i] < 0) {
      keys[i] = 0;
      continue;
    }
    const size_t r = static_cast<size_t>(
        std::upper_bound(first_column.begin(), first_column.end(), index[i]) -
        first_column.begin() - 1);
    const int64_t position = args.ranges[r].begin + (index[i] - first_column[r]);
    keys[i] = TopKEntryKey(TopKFloatKey(value[i]), static_cast<uint64_t>(position));
  }
  return OkStatus();
}

}  // namespace millipede
