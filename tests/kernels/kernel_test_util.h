// Shared helpers of the kernel tests: seeded random tensors, NaN poisoning and comparisons.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "common/tensor.h"

namespace millipede::testing {

inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
inline constexpr float kInf = std::numeric_limits<float>::infinity();

// A read-only view (HostTensor::view() on a non-const tensor gives a mutable one).
inline ConstTensorView CView(const HostTensor& t) { return t.view(); }

// A tensor of `dtype` filled with uniform values in [lo, hi) from a fixed seed (values are
// rounded to the dtype).
inline HostTensor RandomTensor(DType dtype, const Shape& shape, uint64_t seed, float lo = -1.0f,
                               float hi = 1.0f) {
  HostTensor t(dtype, shape);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < t.NumElements(); ++i) StoreFromFloat(t.view().data, dtype, i, dist(rng));
  return t;
}

// A tensor holding `values` (converted to `dtype`).
// Random bytes of any dtype (ops that move data as bytes compare bit for bit).
inline HostTensor RandomBytes(DType dtype, const Shape& shape, uint64_t seed) {
  HostTensor t(dtype, shape);
  std::mt19937_64 rng(seed);
  auto* bytes = static_cast<unsigned char*>(t.view().data);
  for (size_t i = 0; i < t.NumBytes(); ++i) bytes[i] = static_cast<unsigned char>(rng());
  return t;
}

inline HostTensor TensorOf(DType dtype, const Shape& shape, const std::vector<float>& values) {
  HostTensor t(dtype, shape);
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.NumElements());
  for (size_t i = 0; i < values.size(); ++i) StoreFromFloat(t.view().data, dtype, i, values[i]);
  return t;
}

// An F32 output tensor filled with NaN, so an element the op forgets to write shows up.
inline HostTensor PoisonedF32(const Shape& shape) {
  HostTensor t(DType::kF32, shape);
  for (int64_t i = 0; i < t.NumElements(); ++i) t.data<float>()[i] = kNaN;
  return t;
}

// An output tensor of any float dtype filled with NaN.
inline HostTensor Poisoned(DType dtype, const Shape& shape) {
  HostTensor t(dtype, shape);
  for (int64_t i = 0; i < t.NumElements(); ++i) StoreFromFloat(t.view().data, dtype, i, kNaN);
  return t;
}

// A copy of an F32 tensor.
inline HostTensor CopyF32(const HostTensor& src) {
  HostTensor t(DType::kF32, src.shape());
  for (int64_t i = 0; i < t.NumElements(); ++i) t.data<float>()[i] = src.data<float>()[i];
  return t;
}

// The tensor's elements as floats.
inline std::vector<float> ToFloats(const HostTensor& t) {
  std::vector<float> out(t.NumElements());
  for (int64_t i = 0; i < t.NumElements(); ++i) out[i] = LoadAsFloat(t.view().data, t.dtype(), i);
  return out;
}

// Every element must be finite (in particular: written, since outputs start as NaN).
inline ::testing::AssertionResult AllFinite(const HostTensor& t) {
  for (int64_t i = 0; i < t.NumElements(); ++i) {
    const float v = LoadAsFloat(t.view().data, t.dtype(), i);
    if (!std::isfinite(v)) return ::testing::AssertionFailure() << "element " << i << " is " << v;
  }
  return ::testing::AssertionSuccess();
}

// |actual - expected| <= atol + rtol * |expected| elementwise; infinities must match exactly.
inline ::testing::AssertionResult AllClose(const std::vector<float>& actual,
                                           const std::vector<float>& expected, double rtol,
                                           double atol = 0.0) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure()
           << "sizes differ: " << actual.size() << " vs " << expected.size();
  for (size_t i = 0; i < actual.size(); ++i) {
    const double a = actual[i], e = expected[i];
    if (std::isnan(a) || std::isnan(e) || std::isinf(a) || std::isinf(e)) {
      if (a == e) continue;
      return ::testing::AssertionFailure() << "element " << i << ": " << a << " vs " << e;
    }
    if (std::abs(a - e) > atol + rtol * std::abs(e))
      return ::testing::AssertionFailure() << "element " << i << ": " << a << " vs expected " << e
                                           << " (diff " << std::abs(a - e) << ")";
  }
  return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult AllClose(const HostTensor& actual, const HostTensor& expected,
                                           double rtol, double atol = 0.0) {
  return AllClose(ToFloats(actual), ToFloats(expected), rtol, atol);
}

}  // namespace millipede::testing
