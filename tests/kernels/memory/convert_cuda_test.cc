// ConvertCuda against ConvertRef, bit for bit, into and out of FP8 (E4M3), the KV cache's 8-bit
// type: every one of the 256 encodings widened to F32, BF16 and F16; and F32, BF16 and F16
// inputs rounded to E4M3: every float that lies on or next to an E4M3 midpoint, both signs,
// zeros, subnormals, values past 448 (saturation), infinities and NaN, and a million random bit
// patterns. Both backends run the one conversion of common/fp8.h; this shows the device build of
// it rounds as the host's does. A NaN stays a NaN (its sign and payload may differ where the
// device widens a 16-bit or E4M3 NaN: it makes canonical ones). Guard bands around every
// output. Skips without a GPU.
#include "kernels/memory/convert_cuda.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/memory/convert.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/op_harness.h"

namespace millipede {
namespace {

using testing::DeviceTensor;
using testing::HaveGpu;
using testing::SameElementBytes;

// The same elements bit for bit, except that where `expected` holds a NaN `actual` need only hold
// one.
::testing::AssertionResult SameUpToNaNs(const HostTensor& actual, const HostTensor& expected) {
  if (actual.NumElements() != expected.NumElements() || actual.dtype() != expected.dtype())
    return ::testing::AssertionFailure() << "shapes or dtypes differ";
  const size_t size = DTypeSize(actual.dtype());
  const auto* a = static_cast<const unsigned char*>(actual.view().data);
  const auto* e = static_cast<const unsigned char*>(expected.view().data);
  for (int64_t i = 0; i < actual.NumElements(); ++i) {
    if (std::memcmp(a + i * size, e + i * size, size) == 0) continue;
    const float x = LoadAsFloat(a, actual.dtype(), i), y = LoadAsFloat(e, expected.dtype(), i);
    if (std::isnan(x) && std::isnan(y)) continue;
    return ::testing::AssertionFailure() << "element " << i << ": " << x << " vs expected " << y;
  }
  return ::testing::AssertionSuccess();
}

// ConvertCuda(src) into a fresh `dst_dtype` tensor, read back.
HostTensor ConvertOnGpu(const HostTensor& src, DType dst_dtype) {
  DeviceTensor d_src(src);
  HostTensor poison(dst_dtype, src.shape());
  std::memset(poison.view().data, 0x5a, poison.NumBytes());
  DeviceTensor d_dst(poison);
  EXPECT_TRUE(ConvertCuda(d_src.cview(), d_dst.view(), nullptr).ok());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return d_dst.Read();
}

HostTensor ConvertOnCpu(const HostTensor& src, DType dst_dtype) {
  HostTensor dst(dst_dtype, src.shape());
  EXPECT_TRUE(ConvertRef(src.view(), dst.view()).ok());
  return dst;
}

// Floats around every midpoint of neighbouring E4M3 values and the special values.
std::vector<float> EdgeFloats() {
  std::vector<float> out = {0.0f,
                            -0.0f,
                            448.0f,
                            464.0f,
                            480.0f,
                            1e30f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::nanf(""),
                            std::numeric_limits<float>::denorm_min(),
                            std::ldexp(1.0f, -10),
                            std::ldexp(1.0f, -9),
                            std::ldexp(3.0f, -10)};
  for (uint32_t b = 0; b < 0x7e; ++b) {
    const float lo = E4M3BitsToFloat(static_cast<uint8_t>(b));
    const float hi = E4M3BitsToFloat(static_cast<uint8_t>(b + 1));
    const float mid = (lo + hi) / 2;
    for (float x : {lo, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1000.0f)}) {
      out.push_back(x);
      out.push_back(-x);
    }
  }
  return out;
}

TEST(ConvertCudaTest, Fp8EncodingsWidenExactly) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  HostTensor codes(DType::kF8E4M3, {256});
  for (int b = 0; b < 256; ++b)
    static_cast<uint8_t*>(codes.view().data)[b] = static_cast<uint8_t>(b);
  for (DType to : {DType::kF32, DType::kBF16, DType::kF16})
    EXPECT_TRUE(SameUpToNaNs(ConvertOnGpu(codes, to), ConvertOnCpu(codes, to))) << DTypeName(to);
}

TEST(ConvertCudaTest, RoundsToFp8AsTheCpuDoes) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  std::vector<float> values = EdgeFloats();
  std::mt19937 rng(77);
  for (int i = 0; i < (1 << 20); ++i) values.push_back(BitsToFloat(rng()));
  HostTensor f32(DType::kF32, {static_cast<int64_t>(values.size())});
  std::memcpy(f32.view().data, values.data(), values.size() * sizeof(float));
  // From F32 every bit agrees, NaNs included: the one routine on both sides.
  EXPECT_TRUE(
      SameElementBytes(ConvertOnGpu(f32, DType::kF8E4M3), ConvertOnCpu(f32, DType::kF8E4M3)));
  for (DType from : {DType::kBF16, DType::kF16}) {
    const HostTensor narrow = ConvertOnCpu(f32, from);
    EXPECT_TRUE(
        SameUpToNaNs(ConvertOnGpu(narrow, DType::kF8E4M3), ConvertOnCpu(narrow, DType::kF8E4M3)))
        << DTypeName(from);
  }
}

}  // namespace
}  // namespace millipede
