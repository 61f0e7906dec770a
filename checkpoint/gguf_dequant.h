// Dequantisation of ggml's block formats at load time, on the host (the engine then holds plain
// bf16/fp16/fp32 weights). Each block format follows ggml's reference dequantisers: Q4_0, Q4_1,
// Q5_0, Q5_1, Q8_0 (32-element blocks with an f16 scale, and min for the _1 types) and the
// K-quants Q2_K..Q6_K (256-element super-blocks with 6- or 8-bit sub-block scales).
#pragma once

#include <cstddef>
#include <cstdint>

#include "checkpoint/gguf.h"
#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

// Writes `count` fp32 values decoded from `src` (`src_bytes` bytes of `type`'s blocks).
// InvalidArgument if `count` is not a whole number of blocks or `src_bytes` does not hold them.
Status DequantizeGgml(GgmlType type, const void* src, size_t src_bytes, int64_t count, float* out);

// The tensor as a row-major host tensor of `dtype` (kF32, kBF16 or kF16; rounded to nearest even
// from fp32) with the dimensions reversed: shape [ne[n-1], ..., ne[0]].
StatusOr<HostTensor> DequantizeTensor(const GgufTensorInfo& tensor, DType dtype);

}  // namespace millipede
