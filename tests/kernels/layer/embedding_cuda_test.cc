// EmbeddingCuda against EmbeddingRef: every table dtype, odd hidden sizes and row counts, aligned
// and unaligned tables, out-of-range ids (NaN rows), outputs NaN-poisoned between guard bands.
// The gather and the widening are exact, so the outputs must match bit for bit. Skips without a
// GPU.
#include "kernels/layer/embedding_cuda.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/layer/embedding.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/op_harness.h"

namespace millipede {
namespace {

using testing::DeviceTensor;
using testing::HaveGpu;
using testing::OpCheck;
using testing::PoisonedF32;
using testing::RandomTensor;
using testing::Tolerance;

HostTensor Ids(int64_t n, int64_t vocab, uint64_t seed) {
  HostTensor ids(DType::kI32, {n});
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(vocab - 1));
  for (int64_t i = 0; i < n; ++i) ids.data<int32_t>()[i] = dist(rng);
  ids.data<int32_t>()[0] = 0;
  if (n > 1) ids.data<int32_t>()[n - 1] = static_cast<int32_t>(vocab - 1);
  return ids;
}

struct Case {
  int64_t n, vocab, hidden;
  DType dtype;
  size_t table_offset_bytes = 0;
};

std::string Name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return detail::StrCat("n", c.n, "_v", c.vocab, "_h", c.hidden, "_", DTypeName(c.dtype),
                        c.table_offset_bytes ? "_unaligned" : "");
}

class EmbeddingCudaTest : public testing::GpuOpTest<Case> {};

TEST_P(EmbeddingCudaTest, MatchesReference) {
  const Case c = GetParam();
  OpCheck check("embedding");
  const int ids = check.Input(Ids(c.n, c.vocab, 22));
  const int table = check.Input(RandomTensor(c.dtype, {c.vocab, c.hidden}, 21, -2.0f, 2.0f),
                                c.table_offset_bytes);
  // Widening BF16/F16/F32 to F32 is exact and F64 rounds the same way on both sides.
  const int out = check.Output("out", PoisonedF32({c.n, c.hidden}), Tolerance::Exact());
  check.Run(
      [&](const OpCheck::Tensors& t) {
        return EmbeddingArgs{t.cview(ids), t.cview(table), t.view(out)};
      },
      EmbeddingRef, EmbeddingCuda);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, EmbeddingCudaTest,
    ::testing::Values(Case{1, 1000, 64, DType::kF32}, Case{63, 1000, 4096, DType::kBF16},
                      Case{65, 32000, 4097, DType::kF16}, Case{4097, 512, 7, DType::kBF16},
                      Case{5, 100, 1, DType::kF64}, Case{17, 1000, 4100, DType::kF32},
                      Case{9, 300, 4096, DType::kBF16, 2}, Case{9, 300, 256, DType::kF32, 4},
                      Case{33, 200, 520, DType::kF64}),
    Name);

TEST(EmbeddingCudaEdgeTest, OutOfRangeIdsGiveNaNRows) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  const int64_t vocab = 50, hidden = 12;
  const HostTensor table = RandomTensor(DType::kBF16, {vocab, hidden}, 23);
  HostTensor ids(DType::kI32, {4});
  const std::vector<int32_t> values = {3, -1, static_cast<int32_t>(vocab), 49};
  for (int i = 0; i < 4; ++i) ids.data<int32_t>()[i] = values[i];

  DeviceTensor d_ids(ids), d_table(table), d_out(PoisonedF32({4, hidden}));
  ASSERT_TRUE(EmbeddingCuda({d_ids.cview(), d_table.cview(), d_out.view()}, nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const HostTensor out = d_out.Read();
  for (int64_t j = 0; j < hidden; ++j) {
    EXPECT_EQ(out.data<float>()[j], LoadAsFloat(table.view().data, DType::kBF16, 3 * hidden + j));
    EXPECT_TRUE(std::isnan(out.data<float>()[hidden + j]));
    EXPECT_TRUE(std::isnan(out.data<float>()[2 * hidden + j]));
    EXPECT_EQ(out.data<float>()[3 * hidden + j],
              LoadAsFloat(table.view().data, DType::kBF16, 49 * hidden + j));
  }
}

TEST(EmbeddingCudaEdgeTest, EmptyBatchWritesNothing) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  const HostTensor table = RandomTensor(DType::kF32, {10, 8}, 24);
  DeviceTensor d_ids(HostTensor(DType::kI32, {0})), d_table(table), d_out(PoisonedF32({0, 8}));
  ASSERT_TRUE(EmbeddingCuda({d_ids.cview(), d_table.cview(), d_out.view()}, nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  d_out.Read();
}

TEST(EmbeddingCudaArgsTest, RejectsBadShapes) {
  // Host memory stands in for device memory: validation fails before anything is launched.
  std::vector<float> fake(64);
  EmbeddingArgs args{{fake.data(), DType::kI64, {4}},
                     {fake.data(), DType::kF32, {10, 4}},
                     {fake.data(), DType::kF32, {4, 4}}};
  Status status = EmbeddingCuda(args, nullptr);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("embedding ids"), std::string::npos) << status.ToString();
  args.ids.dtype = DType::kI32;
  args.out.shape = {4, 5};
  status = EmbeddingCuda(args, nullptr);
  EXPECT_NE(status.message().find("embedding out"), std::string::npos) << status.ToString();
}

}  // namespace
}  // namespace millipede
