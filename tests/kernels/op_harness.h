// The GPU-vs-CPU op test harness (CUDA builds only), in the shape of llama.cpp's
// test-backend-ops. A test gives an op (how its args are built from a list of tensors, its CPU
// reference and its CUDA launcher), the sizes of a case and a tolerance per output; OpCheck runs
// the reference on host copies and the kernel on device copies placed between guard bands, then
// requires every output within its tolerance of the reference (op_compare.h: NMSE or worst
// element under a per-op bound, NaN fails, infinities match in sign), every input unchanged and
// every guard band intact. Outputs start as the test gives them: NaN-poisoned, so an element the
// kernel forgets to write fails, or holding the values an op accumulates into. A kernel that
// answers Unimplemented is reported as unsupported (the case is skipped) where the case allows
// it, and fails where the case requires support.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"
#include "common/tensor.h"
#include "tests/have_gpu.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/op_compare.h"

namespace millipede::testing {

// The fixture of a parameterised GPU op test: skips every case on a machine without a GPU.
template <typename Case>
class GpuOpTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  }
};

// A copy of a host tensor of any dtype.
inline HostTensor CopyOf(const HostTensor& t) {
  HostTensor copy(t.dtype(), t.shape());
  if (t.NumBytes() > 0) std::memcpy(copy.view().data, t.view().data, t.NumBytes());
  return copy;
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
    ::testing::AssertionResult same = SameElementBytes(Read(), expected);
    if (!same)
      return ::testing::AssertionFailure() << "an input tensor was modified: " << same.message();
    return same;
  }

 private:
  DType dtype_;
  Shape shape_;
  size_t bytes_;
  size_t front_;
  unsigned char* base_ = nullptr;
};

// Whether a case may meet a kernel that does not implement it.
enum class Support { kRequired, kOptional };

// One op run on both sides and compared. Register the case's tensors, then Run:
//
//   OpCheck check("rms_norm");
//   const int x = check.Input(x_host), w = check.Input(weight_host);
//   const int out = check.Output("out", PoisonedF32(shape), Tolerance::Normalised(1e-5));
//   check.Run([&](const OpCheck::Tensors& t) {
//               return RmsNormArgs{t.cview(x), t.cview(w), TensorView{}, t.view(out), eps};
//             },
//             RmsNormRef, RmsNormCuda);
//
// The same args builder serves both sides, so aliasing (out = x) and optional tensors are
// written once.
class OpCheck {
 public:
  explicit OpCheck(std::string op) : op_(std::move(op)) {}

  // A tensor the op only reads; it must come back unchanged.
  int Input(const HostTensor& initial, size_t offset_bytes = 0) {
    return Add({"input " + std::to_string(entries_.size()), CopyOf(initial), offset_bytes, false,
                Tolerance::Exact()});
  }
  // A tensor the op writes (an output, in place, or accumulated into). Both sides start from
  // `initial`; afterwards the device's contents must match the reference's within `tolerance`.
  int Output(const std::string& name, const HostTensor& initial, const Tolerance& tolerance,
             size_t offset_bytes = 0) {
    return Add({name, CopyOf(initial), offset_bytes, true, tolerance});
  }

  // The registered tensors as one side sees them (host copies or device copies).
  class Tensors {
   public:
    TensorView view(int i) const { return views_.at(static_cast<size_t>(i)); }
    ConstTensorView cview(int i) const { return AsConst(view(i)); }

   private:
    friend class OpCheck;
    std::vector<TensorView> views_;
  };

  // Runs `reference(make_args(host tensors))` and `device(make_args(device tensors), stream)`
  // (on the default stream) and compares. Returns whether the outputs were compared: false when
  // the kernel does not support the case (reported as skipped for Support::kOptional, failed
  // otherwise) or when either side failed.
  template <typename MakeArgs, typename Reference, typename Device>
  bool Run(const MakeArgs& make_args, const Reference& reference, const Device& device,
           Support support = Support::kRequired) {
    Tensors host, dev;
    expected_.clear();
    device_.clear();
    for (const Entry& e : entries_) {
      expected_.push_back(CopyOf(e.initial));
      host.views_.push_back(expected_.back().view());
      device_.push_back(std::make_unique<DeviceTensor>(e.initial, e.offset_bytes));
      dev.views_.push_back(device_.back()->view());
    }
    const Status reference_status = reference(make_args(host));
    if (!reference_status.ok()) {
      ADD_FAILURE() << op_ << " reference: " << reference_status.ToString();
      return false;
    }
    const Status device_status = device(make_args(dev), cudaStream_t{nullptr});
    if (device_status.code() == StatusCode::kUnimplemented) {
      if (support == Support::kOptional) {
        [&] { GTEST_SKIP() << op_ << " unsupported: " << device_status.ToString(); }();
      } else {
        ADD_FAILURE() << op_
                      << " unsupported, but the case requires it: " << device_status.ToString();
      }
      return false;
    }
    if (!device_status.ok()) {
      ADD_FAILURE() << op_ << ": " << device_status.ToString();
      return false;
    }
    const cudaError_t sync = cudaDeviceSynchronize();
    if (sync != cudaSuccess) {
      ADD_FAILURE() << op_ << ": " << cudaGetErrorString(sync);
      return false;
    }
    actual_.clear();
    for (size_t i = 0; i < entries_.size(); ++i) {
      const Entry& e = entries_[i];
      actual_.push_back(device_[i]->Read());
      if (!e.written) {
        EXPECT_TRUE(SameElementBytes(actual_.back(), e.initial))
            << op_ << ": " << e.name << " modified";
      } else {
        EXPECT_TRUE(MatchesReference(actual_.back(), expected_[i], e.tolerance, e.name))
            << op_ << " " << e.name;
      }
    }
    return true;
  }

  // After Run: what the reference and the device left in tensor i.
  const HostTensor& expected(int i) const { return expected_.at(static_cast<size_t>(i)); }
  const HostTensor& actual(int i) const { return actual_.at(static_cast<size_t>(i)); }
  // The device copy of tensor i, for further launches on the same data.
  DeviceTensor& device(int i) { return *device_.at(static_cast<size_t>(i)); }

 private:
  struct Entry {
    std::string name;
    HostTensor initial;
    size_t offset_bytes;
    bool written;
    Tolerance tolerance;
  };
  int Add(Entry e) {
    entries_.push_back(std::move(e));
    return static_cast<int>(entries_.size()) - 1;
  }

  std::string op_;
  std::vector<Entry> entries_;
  std::vector<HostTensor> expected_, actual_;
  std::vector<std::unique_ptr<DeviceTensor>> device_;
};

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
