// The order TopK ranks entries by, as unsigned integers: shared by the top-k kernels, their
// references and the ops that carry a rank's candidates to a top-k over several ranks.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/host_device.h"

namespace millipede {

// Larger float, larger key. NaN maps to 0, below every number (-inf maps to 0x007fffff), so a
// key of 0 marks an entry that is never selected; -0.0 maps to +0.0's key so that they tie.
MP_HOST_DEVICE inline uint32_t TopKFloatKey(float x) {
  if (x != x) return 0;
  if (x == 0.0f) x = 0.0f;
#if defined(__CUDA_ARCH__)
  const uint32_t u = __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
#endif
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// An entry as one 64-bit key: key descending is TopK's order, the score's key descending, then
// the column (or position) ascending. `column` < 2^32.
MP_HOST_DEVICE inline uint64_t TopKEntryKey(uint32_t float_key, uint64_t column) {
  return (static_cast<uint64_t>(float_key) << 32) | (0xffffffffu - static_cast<uint32_t>(column));
}

}  // namespace millipede
