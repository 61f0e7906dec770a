#include "kernels/cpu/convert_cpu.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/memory/convert.h"

namespace millipede {

Status ConvertCpu(ConstTensorView src, TensorView dst) {
  MP_RETURN_IF_ERROR(ConvertCheckArgs(src, dst));
  const int64_t count = src.NumElements();
  if (count == 0 || src.data == dst.data) return OkStatus();
  constexpr int64_t kElementsPerItem = 16384;
  const size_t src_size = DTypeSize(src.dtype), dst_size = DTypeSize(dst.dtype);
  cpu::ParallelFor((count + kElementsPerItem - 1) / kElementsPerItem, static_cast<double>(count),
                   [&](int64_t item) {
                     const int64_t begin = item * kElementsPerItem;
                     const int64_t n = std::min(kElementsPerItem, count - begin);
                     if (src.dtype == dst.dtype) {
                       std::memcpy(static_cast<char*>(dst.data) + begin * dst_size,
                                   static_cast<const char*>(src.data) + begin * src_size,
                                   static_cast<size_t>(n) * src_size);
                     } else if (src.dtype == DType::kF32) {
                       cpu::NarrowRow(src.as<const float>() + begin, n, dst.data, dst.dtype, begin);
                     } else if (dst.dtype == DType::kF32) {
                       cpu::WidenRow(src.data, src.dtype, begin, n, dst.as<float>() + begin);
                     } else {
                       thread_local std::vector<float> row;
                       row.resize(static_cast<size_t>(n));
                       cpu::WidenRow(src.data, src.dtype, begin, n, row.data());
                       cpu::NarrowRow(row.data(), n, dst.data, dst.dtype, begin);
                     }
                   });
  return OkStatus();
}

}  // namespace millipede
