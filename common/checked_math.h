// Overflow-checked integer arithmetic for sizes read from untrusted files.
#pragma once

#include <cstdint>

namespace millipede {

// Each returns false (leaving *out unspecified) if the exact result does not fit.
inline bool CheckedAdd(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_add_overflow(a, b, out);
}
inline bool CheckedMul(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}

}  // namespace millipede
