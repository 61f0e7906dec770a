// Helpers of the CUDA kernel benchmarks: device buffers, random device tensors and CUDA-event
// timing.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "common/cuda_check.h"
#include "common/dtype.h"
#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

// Device allocation freed on scope exit.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  Status Allocate(size_t bytes) {
    MP_CUDA_CHECK(cudaMalloc(&data_, bytes));
    return OkStatus();
  }
  void* data() const { return data_; }

 private:
  void* data_ = nullptr;
};

// A device tensor of `dtype` with uniform values in [-1, 1) from a cheap fixed-seed generator
// (the values only need to be non-degenerate, not statistically good).
inline Status FillRandom(DeviceBuffer* buffer, DType dtype, const Shape& shape, uint64_t seed) {
  const int64_t n = shape.NumElements();
  std::vector<unsigned char> host(static_cast<size_t>(n) * DTypeSize(dtype));
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < n; ++i) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    const float x = static_cast<float>(state >> 40) / static_cast<float>(1 << 24) * 2.0f - 1.0f;
    StoreFromFloat(host.data(), dtype, static_cast<size_t>(i), x);
  }
  MP_RETURN_IF_ERROR(buffer->Allocate(host.size()));
  MP_CUDA_CHECK(cudaMemcpy(buffer->data(), host.data(), host.size(), cudaMemcpyHostToDevice));
  return OkStatus();
}

// FillRandom for tensors too large to stage on the host: a block of up to 2^24 random elements
// repeated over the tensor by device copies (values repeat with that period; enough for timing).
inline Status FillRandomRepeated(DeviceBuffer* buffer, DType dtype, const Shape& shape,
                                 uint64_t seed) {
  constexpr int64_t kBlock = int64_t{1} << 24;
  const int64_t n = shape.NumElements();
  if (n <= kBlock) return FillRandom(buffer, dtype, shape, seed);
  DeviceBuffer block;
  MP_RETURN_IF_ERROR(FillRandom(&block, dtype, Shape{kBlock}, seed));
  const size_t element = DTypeSize(dtype), bytes = static_cast<size_t>(n) * element;
  MP_RETURN_IF_ERROR(buffer->Allocate(bytes));
  char* const dst = static_cast<char*>(buffer->data());
  MP_CUDA_CHECK(cudaMemcpy(dst, block.data(), kBlock * element, cudaMemcpyDeviceToDevice));
  // Doubling copies of what is already filled.
  for (size_t filled = kBlock * element; filled < bytes;) {
    const size_t count = std::min(filled, bytes - filled);
    MP_CUDA_CHECK(cudaMemcpy(dst + filled, dst, count, cudaMemcpyDeviceToDevice));
    filled += count;
  }
  return OkStatus();
}

// Milliseconds per call of `run`, averaged over `iters` after `warmup` calls.
inline StatusOr<double> TimeMs(const std::function<Status()>& run, int64_t warmup, int64_t iters) {
  for (int64_t i = 0; i < warmup; ++i) MP_RETURN_IF_ERROR(run());
  cudaEvent_t start = nullptr, stop = nullptr;
  MP_CUDA_CHECK(cudaEventCreate(&start));
  MP_CUDA_CHECK(cudaEventCreate(&stop));
  Status status = OkStatus();
  float ms = 0.0f;
  if (cudaEventRecord(start) == cudaSuccess) {
    for (int64_t i = 0; i < iters && status.ok(); ++i) status = run();
    if (status.ok() &&
        (cudaEventRecord(stop) != cudaSuccess || cudaEventSynchronize(stop) != cudaSuccess ||
         cudaEventElapsedTime(&ms, start, stop) != cudaSuccess))
      status =
          DeviceError(detail::StrCat("timing failed: ", cudaGetErrorString(cudaGetLastError())));
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  MP_RETURN_IF_ERROR(status);
  return static_cast<double>(ms) / static_cast<double>(iters);
}

}  // namespace millipede
