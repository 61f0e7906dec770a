// MergeStateCuda against MergeStateRef on random inputs (with empty parts), checked for every
// element and for writes outside the outputs (guard bands). Skips without a GPU.
#include "kernels/attention/merge_state_cuda.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/attention/merge_state.h"
#include "tests/kernels/kernel_test_util.h"

namespace millipede {
namespace {

using testing::AllClose;
using testing::CView;
using testing::kInf;
using testing::kNaN;
using testing::PoisonedF32;
using testing::RandomTensor;

bool HaveGpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

// Device buffer of `count` floats with `kGuard` sentinel floats on each side.
class GuardedBuffer {
 public:
  static constexpr size_t kGuard = 64;
  static constexpr float kSentinel = -12345.625f;

  explicit GuardedBuffer(const std::vector<float>& host) : count_(host.size()) {
    std::vector<float> staged(count_ + 2 * kGuard, kSentinel);
    std::memcpy(staged.data() + kGuard, host.data(), count_ * sizeof(float));
    EXPECT_EQ(cudaMalloc(&base_, staged.size() * sizeof(float)), cudaSuccess);
    EXPECT_EQ(
        cudaMemcpy(base_, staged.data(), staged.size() * sizeof(float), cudaMemcpyHostToDevice),
        cudaSuccess);
  }
  ~GuardedBuffer() { cudaFree(base_); }
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;

  float* data() { return base_ + kGuard; }
  // The payload; also checks that both guard bands still hold the sentinel.
  std::vector<float> Read() {
    std::vector<float> staged(count_ + 2 * kGuard);
    EXPECT_EQ(
        cudaMemcpy(staged.data(), base_, staged.size() * sizeof(float), cudaMemcpyDeviceToHost),
        cudaSuccess);
    for (size_t i = 0; i < kGuard; ++i) {
      EXPECT_EQ(staged[i], kSentinel) << "write before the buffer at " << i;
      EXPECT_EQ(staged[kGuard + count_ + i], kSentinel) << "write after the buffer at " << i;
    }
    return std::vector<float>(staged.begin() + kGuard, staged.begin() + kGuard + count_);
  }

 private:
  size_t count_;
  float* base_ = nullptr;
};

std::vector<float> Floats(const HostTensor& t) { return testing::ToFloats(t); }

struct Case {
  int64_t num_parts, n, num_heads, head_dim;
};

class MergeStateCudaTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_P(MergeStateCudaTest, MatchesReference) {
  const Case c = GetParam();
  const Shape o_parts_shape{c.num_parts, c.n, c.num_heads, c.head_dim};
  const Shape lse_parts_shape{c.num_parts, c.n, c.num_heads};
  HostTensor o_parts = RandomTensor(DType::kF32, o_parts_shape, 11, -2.0f, 2.0f);
  HostTensor lse_parts = RandomTensor(DType::kF32, lse_parts_shape, 12, -30.0f, 30.0f);
  // Empty parts (with garbage o), whole rows of empty parts, and a huge-magnitude LSE.
  std::mt19937 rng(13);
  const int64_t rows = c.n * c.num_heads;
  for (int64_t i = 0; i < lse_parts.NumElements(); ++i) {
    if (rng() % 4 == 0) {
      lse_parts.data<float>()[i] = -kInf;
      for (int64_t d = 0; d < c.head_dim; ++d) o_parts.data<float>()[i * c.head_dim + d] = kNaN;
    }
  }
  for (int64_t p = 0; p < c.num_parts; ++p) lse_parts.data<float>()[p * rows] = -kInf;
  if (rows > 1 && c.num_parts > 0) {
    lse_parts.data<float>()[1] = 1e30f;  // part 0, row 1 (which may have been marked empty)
    for (int64_t d = 0; d < c.head_dim; ++d) o_parts.data<float>()[c.head_dim + d] = 0.25f;
  }

  HostTensor o_ref = PoisonedF32({c.n, c.num_heads, c.head_dim});
  HostTensor lse_ref = PoisonedF32({c.n, c.num_heads});
  ASSERT_TRUE(MergeStateRef({CView(o_parts), CView(lse_parts), o_ref.view(), lse_ref.view()}).ok());

  GuardedBuffer d_o_parts(Floats(o_parts)), d_lse_parts(Floats(lse_parts));
  GuardedBuffer d_o(Floats(PoisonedF32(o_ref.shape()))),
      d_lse(Floats(PoisonedF32(lse_ref.shape())));
  MergeStateArgs args{{d_o_parts.data(), DType::kF32, o_parts_shape},
                      {d_lse_parts.data(), DType::kF32, lse_parts_shape},
                      {d_o.data(), DType::kF32, o_ref.shape()},
                      {d_lse.data(), DType::kF32, lse_ref.shape()}};
  Status status = MergeStateCuda(args, nullptr);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  const std::vector<float> o = d_o.Read(), lse = d_lse.Read();
  EXPECT_TRUE(AllClose(o, Floats(o_ref), 1e-5, 1e-6));
  EXPECT_TRUE(AllClose(lse, Floats(lse_ref), 1e-6, 1e-6));
  for (int64_t d = 0; d < c.head_dim; ++d) EXPECT_EQ(o[d], 0.0f);  // row 0: all parts empty
  EXPECT_EQ(lse[0], -kInf);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MergeStateCudaTest,
                         ::testing::Values(Case{1, 3, 2, 64}, Case{2, 5, 4, 128},
                                           Case{7, 33, 8, 128}, Case{3, 1, 32, 96},
                                           Case{0, 4, 2, 64}));

TEST(MergeStateCudaArgsTest, RejectsBadShapes) {
  // Host memory stands in for device memory: validation fails before anything is launched.
  std::vector<float> fake(2 * 3 * 4 * 9);
  MergeStateArgs args{{fake.data(), DType::kF32, {2, 3, 4, 8}},
                      {fake.data(), DType::kF32, {2, 3, 4}},
                      {fake.data(), DType::kF32, {3, 4, 9}},
                      {fake.data(), DType::kF32, {3, 4}}};
  Status status = MergeStateCuda(args, nullptr);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("merge_state o"), std::string::npos) << status.ToString();
}

}  // namespace
}  // namespace millipede
