#include "kernels/memory/float_rows.h"

#include <cstring>

namespace millipede {
namespace {

template <typename T, typename Convert>
void ConvertRow(const void* data, int64_t offset, int64_t count, float* out, Convert convert) {
  const T* src = static_cast<const T*>(data) + offset;
  for (int64_t i = 0; i < count; ++i) out[i] = convert(src[i]);
}

}  // namespace

void LoadFloatRow(const void* data, DType dtype, int64_t offset, int64_t count, float* out) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(out, static_cast<const float*>(data) + offset, count * sizeof(float));
      return;
    case DType::kBF16:
      ConvertRow<BFloat16>(data, offset, count, out, BFloat16ToFloat);
      return;
    case DType::kF16:
      ConvertRow<Float16>(data, offset, count, out, Float16ToFloat);
      return;
    case DType::kF8E4M3:
      ConvertRow<uint8_t>(data, offset, count, out, E4M3BitsToFloat);
      return;
    case DType::kF64:
      ConvertRow<double>(data, offset, count, out, [](double x) { return static_cast<float>(x); });
      return;
    default:
      return;
  }
}

}  // namespace millipede
