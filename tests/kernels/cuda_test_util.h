// Shared helpers of the CUDA-vs-reference kernel tests: device copies of host tensors between
// guard bands, and the normalised-error comparison. CUDA builds only.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>

#include "common/dtype.h"
#include "common/tensor.h"
#include "tests/kernels/kernel_test_util.h"

namespace millipede::testing {

inline bool HaveGpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

// Device copy of a host tensor between two guard bands of sentinel bytes, so writes outside the
// tensor show up. `offset_bytes` moves the payload off cudaMalloc's 256-byte alignment, to
// exercise a kernel's unaligned path.
class DeviceTensor {
 public:
  static constexpr size_t kGuardBytes = 256;
  static constexpr unsigned char kSentinel = 0xA7;

  explicit DeviceTensor(const HostTensor& host, size_t offset_bytes = 0)
      : dtype_(host.dtype()),
        shape_(host.shape()),
        bytes_(host.NumBytes()),
        front_(kGuardBytes + offset_bytes) {
    std::vector<unsigned char> staged(front_ + bytes_ + kGuardBytes, kSentinel);
    if (bytes_ > 0) std::memcpy(staged.data() + front_, host.view().data, bytes_);
    EXPECT_EQ(cudaMalloc(&base_, staged.size()), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(base_, staged.data(), staged.size(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceTensor() { cudaFree(base_); }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;

  TensorView view() { return {base_ + front_, dtype_, shape_}; }
  ConstTensorView cview() { return AsConst(view()); }

  // The payload; also checks that both guard bands still hold the sentinel.
  HostTensor Read() const {
    std::vector<unsigned char> staged(front_ + bytes_ + kGuardBytes);
    EXPECT_EQ(cudaMemcpy(staged.data(), base_, staged.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t i = 0; i < front_; ++i)
      EXPECT_EQ(staged[i], kSentinel) << "write " << front_ - i << " bytes before the tensor";
    for (size_t i = 0; i < kGuardBytes; ++i)
      EXPECT_EQ(staged[front_ + bytes_ + i], kSentinel) << "write " << i << " bytes after it";
    HostTensor host(dtype_, shape_);
    if (bytes_ > 0) std::memcpy(host.view().data, staged.data() + front_, bytes_);
    return host;
  }

  // The payload must still be `expected` byte for byte (for inputs), guards included.
  ::testing::AssertionResult Unchanged(const HostTensor& expected) const {
    const HostTensor now = Read();
    if (now.NumBytes() != expected.NumBytes() ||
        std::memcmp(now.view().data, expected.view().data, now.NumBytes()) != 0)
      return ::testing::AssertionFailure() << "an input tensor was modified";
    return ::testing::AssertionSuccess();
  }

 private:
  DType dtype_;
  Shape shape_;
  size_t bytes_;
  size_t front_;
  unsigned char* base_ = nullptr;
};

// max |actual - expected| / max |expected| (both over the finite expected values; plain max
// |actual - expected| when every expected value is 0) must be <= threshold. Non-finite values
// must match elementwise: NaN where expected is NaN, the same infinity where it is infinite;
// a NaN or Inf on one side only (e.g. an output element left poisoned) fails.
inline ::testing::AssertionResult NormalisedErrorBelow(const std::vector<float>& actual,
                                                       const std::vector<float>& expected,
                                                       double threshold) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure()
           << "sizes differ: " << actual.size() << " vs " << expected.size();
  double max_ref = 0.0, max_diff = 0.0;
  size_t worst = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double a = actual[i], e = expected[i];
    if (!std::isfinite(e) || !std::isfinite(a)) {
      const bool same = (std::isnan(a) && std::isnan(e)) || a == e;
      if (!same)
        return ::testing::AssertionFailure()
               << "element " << i << ": " << a << " vs expected " << e;
      continue;
    }
    max_ref = std::max(max_ref, std::abs(e));
    if (std::abs(a - e) > max_diff) {
      max_diff = std::abs(a - e);
      worst = i;
    }
  }
  const double error = max_ref > 0.0 ? max_diff / max_ref : max_diff;
  if (error > threshold)
    return ::testing::AssertionFailure()
           << "normalised error " << error << " > " << threshold << " (worst element " << worst
           << ": " << actual[worst] << " vs expected " << expected[worst] << ", max |ref| "
           << max_ref << ")";
  return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult NormalisedErrorBelow(const HostTensor& actual,
                                                       const HostTensor& expected,
                                                       double threshold) {
  return NormalisedErrorBelow(ToFloats(actual), ToFloats(expected), threshold);
}

// An F32 copy of `t` with every element rounded to `dtype` and back (what a kernel sees after
// converting it to that dtype).
inline HostTensor RoundedThrough(const HostTensor& t, DType dtype) {
  HostTensor out(DType::kF32, t.shape());
  std::vector<unsigned char> narrow(static_cast<size_t>(t.NumElements()) * DTypeSize(dtype));
  for (int64_t i = 0; i < t.NumElements(); ++i) {
    StoreFromFloat(narrow.data(), dtype, i, LoadAsFloat(t.view().data, t.dtype(), i));
    out.data<float>()[i] = LoadAsFloat(narrow.data(), dtype, i);
  }
  return out;
}

}  // namespace millipede::testing
