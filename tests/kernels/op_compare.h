// How an op's output is compared with its CPU reference, in the shape of llama.cpp's
// test-backend-ops: error measures with a threshold per op, and fixed rules for non-finite
// values. Host code only: the GPU-vs-CPU harness (op_harness.h) builds on it.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/tensor.h"
#include "tests/kernels/kernel_test_util.h"

namespace millipede::testing {

inline constexpr double kUnbounded = std::numeric_limits<double>::infinity();

// How far an output may be from its reference. The bounds apply over the elements whose
// reference value is finite; a bound of kUnbounded is not checked:
//   nmse            sum (a - e)^2 / sum e^2 (test-backend-ops' measure; / n when every e is 0)
//   max_normalised  max |a - e| / max |e| (the worst element; max |a - e| when every e is 0)
//   atol, rtol      |a - e| <= atol + rtol |e| for every element
// Non-finite values: an infinity must be matched by the same infinity (a finite value, the
// other sign or NaN fails); NaN fails, unless nan_matches_nan and the reference is NaN at the
// same place (ops whose NaN inputs must come out as NaN). `bitwise` instead asks for the same
// bytes in every element: ops that only move or select values, and integer outputs.
struct Tolerance {
  double nmse = 0.0;
  double max_normalised = 0.0;
  double atol = 0.0;
  double rtol = 0.0;
  bool nan_matches_nan = false;
  bool bitwise = false;

  // Equal values everywhere (gathers, widening conversions, the same fp32 operation on both
  // sides).
  static Tolerance Exact() { return {}; }
  // The same bytes (a -0 for a +0, or another NaN payload, fails).
  static Tolerance Bitwise() {
    Tolerance t;
    t.bitwise = true;
    return t;
  }
  // An op that rounds differently from its reference: the worst element within t of max |e|,
  // and the mean squared error within t^2 of the mean square (so an error spread over all
  // elements is held to the bound that one worst element is).
  static Tolerance Normalised(double t) { return {t * t, t, kUnbounded, kUnbounded, false, false}; }
  // Every element within atol + rtol |e| (rtol = 0: a maximum absolute error).
  static Tolerance Elementwise(double rtol, double atol) {
    return {kUnbounded, kUnbounded, atol, rtol, false, false};
  }
  Tolerance WithNanMatchingNan() const {
    Tolerance t = *this;
    t.nan_matches_nan = true;
    return t;
  }
};

// The measured errors of one comparison (over the elements with a finite reference).
struct ErrorMeasures {
  double nmse = 0.0;
  double max_normalised = 0.0;
  double max_abs = 0.0;
};

// Checks `actual` against `expected` under `tolerance`. With a `name`, the measured errors are
// recorded as test properties (<name>_nmse, <name>_max_normalised_error) for the JSON report.
inline ::testing::AssertionResult MatchesReference(const std::vector<float>& actual,
                                                   const std::vector<float>& expected,
                                                   const Tolerance& tolerance,
                                                   const std::string& name = "") {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure()
           << "sizes differ: " << actual.size() << " vs " << expected.size();
  if (tolerance.bitwise) {
    for (size_t i = 0; i < actual.size(); ++i)
      if (std::memcmp(&actual[i], &expected[i], sizeof(float)) != 0)
        return ::testing::AssertionFailure() << "element " << i << ": " << actual[i]
                                             << " vs expected " << expected[i] << " (bits differ)";
    return ::testing::AssertionSuccess();
  }
  const bool elementwise = std::isfinite(tolerance.atol) && std::isfinite(tolerance.rtol);
  double sum_sq_diff = 0.0, sum_sq_ref = 0.0, max_diff = 0.0, max_ref = 0.0;
  size_t finite = 0, worst = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double a = actual[i], e = expected[i];
    if (std::isnan(a) || std::isnan(e)) {
      if (tolerance.nan_matches_nan && std::isnan(a) && std::isnan(e)) continue;
      return ::testing::AssertionFailure()
             << "element " << i << ": " << a << " vs expected " << e << " (NaN must not appear)";
    }
    if (std::isinf(a) || std::isinf(e)) {
      if (a == e) continue;
      return ::testing::AssertionFailure() << "element " << i << ": " << a << " vs expected " << e
                                           << " (infinities must match in sign)";
    }
    const double diff = std::abs(a - e);
    if (elementwise && diff > tolerance.atol + tolerance.rtol * std::abs(e))
      return ::testing::AssertionFailure()
             << "element " << i << ": " << a << " vs expected " << e << " (|diff| " << diff << " > "
             << tolerance.atol << " + " << tolerance.rtol << " * |expected|)";
    ++finite;
    sum_sq_diff += diff * diff;
    sum_sq_ref += e * e;
    max_ref = std::max(max_ref, std::abs(e));
    if (diff > max_diff) {
      max_diff = diff;
      worst = i;
    }
  }
  ErrorMeasures m;
  m.nmse = sum_sq_ref > 0.0 ? sum_sq_diff / sum_sq_ref
                            : (finite > 0 ? sum_sq_diff / static_cast<double>(finite) : 0.0);
  m.max_normalised = max_ref > 0.0 ? max_diff / max_ref : max_diff;
  m.max_abs = max_diff;
  if (!name.empty()) {
    ::testing::Test::RecordProperty(name + "_nmse", std::to_string(m.nmse));
    ::testing::Test::RecordProperty(name + "_max_normalised_error",
                                    std::to_string(m.max_normalised));
  }
  if (m.nmse > tolerance.nmse || m.max_normalised > tolerance.max_normalised)
    return ::testing::AssertionFailure()
           << "NMSE " << m.nmse << " (bound " << tolerance.nmse << "), max normalised error "
           << m.max_normalised << " (bound " << tolerance.max_normalised << "); worst element "
           << worst << ": " << actual[worst] << " vs expected " << expected[worst]
           << ", max |expected| " << max_ref;
  return ::testing::AssertionSuccess();
}

// The same bytes in every element of two tensors of one dtype and shape.
inline ::testing::AssertionResult SameElementBytes(const HostTensor& actual,
                                                   const HostTensor& expected) {
  if (!(actual.shape() == expected.shape()) || actual.dtype() != expected.dtype())
    return ::testing::AssertionFailure()
           << "shapes or dtypes differ: " << actual.shape().ToString() << " "
           << DTypeName(actual.dtype()) << " vs " << expected.shape().ToString() << " "
           << DTypeName(expected.dtype());
  const size_t size = DTypeSize(actual.dtype());
  const auto* a = static_cast<const unsigned char*>(actual.view().data);
  const auto* e = static_cast<const unsigned char*>(expected.view().data);
  for (int64_t i = 0; i < actual.NumElements(); ++i) {
    if (std::memcmp(a + i * size, e + i * size, size) == 0) continue;
    ::testing::AssertionResult failure = ::testing::AssertionFailure();
    failure << "element " << i << " differs";
    if (IsLoadableDType(actual.dtype()))
      failure << ": " << LoadAsFloat(a, actual.dtype(), i) << " vs expected "
              << LoadAsFloat(e, expected.dtype(), i);
    return failure;
  }
  return ::testing::AssertionSuccess();
}

// Tensors of any float dtypes compare as their values; integer tensors only bitwise.
inline ::testing::AssertionResult MatchesReference(const HostTensor& actual,
                                                   const HostTensor& expected,
                                                   const Tolerance& tolerance,
                                                   const std::string& name = "") {
  if (tolerance.bitwise) return SameElementBytes(actual, expected);
  if (!(actual.shape() == expected.shape()))
    return ::testing::AssertionFailure() << "shapes differ: " << actual.shape().ToString() << " vs "
                                         << expected.shape().ToString();
  if (!IsLoadableDType(actual.dtype()) || !IsLoadableDType(expected.dtype()))
    return ::testing::AssertionFailure() << "integer values are compared with Tolerance::Bitwise()";
  return MatchesReference(ToFloats(actual), ToFloats(expected), tolerance, name);
}

}  // namespace millipede::testing
