// Shared helpers of the fast CPU kernels' tests: tensors between guard bands, so a write outside
// a tensor (or into an input) shows up.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "common/tensor.h"
#include "tests/kernels/kernel_test_util.h"

namespace millipede::testing {

// A copy of a host tensor placed between two bands of sentinel bytes, at an offset that leaves the
// payload 8-byte aligned but not 16- or more (the kernels must not assume vector alignment).
class GuardedTensor {
 public:
  static constexpr size_t kGuardBytes = 264;
  static constexpr unsigned char kSentinel = 0xA7;

  explicit GuardedTensor(const HostTensor& host)
      : dtype_(host.dtype()), shape_(host.shape()), bytes_(host.NumBytes()) {
    storage_.assign(kGuardBytes + bytes_ + kGuardBytes, kSentinel);
    if (bytes_ > 0) std::memcpy(storage_.data() + kGuardBytes, host.view().data, bytes_);
  }

  TensorView view() { return {storage_.data() + kGuardBytes, dtype_, shape_}; }
  ConstTensorView cview() { return AsConst(view()); }

  // The payload; also checks that both guard bands still hold the sentinel.
  HostTensor Read() const {
    for (size_t i = 0; i < kGuardBytes; ++i) {
      EXPECT_EQ(storage_[i], kSentinel) << "write " << kGuardBytes - i << " bytes before";
      EXPECT_EQ(storage_[kGuardBytes + bytes_ + i], kSentinel) << "write " << i << " bytes after";
    }
    HostTensor host(dtype_, shape_);
    if (bytes_ > 0) std::memcpy(host.view().data, storage_.data() + kGuardBytes, bytes_);
    return host;
  }

  // The payload is still `expected` byte for byte (for inputs), guards included.
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
  std::vector<unsigned char> storage_;
};

// Bitwise equality of two tensors.
inline ::testing::AssertionResult BitEqual(const HostTensor& a, const HostTensor& b) {
  if (a.NumBytes() != b.NumBytes() || std::memcmp(a.view().data, b.view().data, a.NumBytes()) != 0)
    return ::testing::AssertionFailure() << "tensors differ";
  return ::testing::AssertionSuccess();
}

}  // namespace millipede::testing
