// EmbeddingCpu against EmbeddingRef: every table dtype, odd sizes, repeated ids, guard bands, and
// an id outside the vocabulary (the same error, nothing written).
#include "kernels/cpu/embedding_cpu.h"

#include <gtest/gtest.h>

#include "tests/kernels/cpu/cpu_test_util.h"

namespace millipede {
namespace {

using testing::CView;
using testing::GuardedTensor;
using testing::PoisonedF32;
using testing::RandomTensor;

HostTensor Ids(int64_t n, int64_t vocab) {
  HostTensor ids(DType::kI32, {n});
  for (int64_t i = 0; i < n; ++i)
    ids.data<int32_t>()[i] = static_cast<int32_t>((i * 37 + 5) % vocab);
  return ids;
}

TEST(EmbeddingCpuTest, EqualsReferenceBitForBit) {
  for (const DType dtype : {DType::kF32, DType::kBF16, DType::kF16, DType::kF64})
    for (const int64_t n : {1, 9, 700}) {
      const HostTensor table = RandomTensor(dtype, {50, 77}, n);
      const HostTensor ids = Ids(n, 50);
      HostTensor ref = PoisonedF32({n, 77});
      ASSERT_TRUE(EmbeddingRef({CView(ids), CView(table), ref.view()}).ok());
      GuardedTensor out(PoisonedF32({n, 77}));
      ASSERT_TRUE(EmbeddingCpu({CView(ids), CView(table), out.view()}).ok());
      EXPECT_TRUE(testing::BitEqual(out.Read(), ref));
    }
}

TEST(EmbeddingCpuTest, IdOutsideTheVocabulary) {
  const HostTensor table = RandomTensor(DType::kF32, {10, 4}, 1);
  HostTensor ids = Ids(6, 10);
  ids.data<int32_t>()[4] = 10;
  HostTensor out = PoisonedF32({6, 4});
  const EmbeddingArgs args{CView(ids), CView(table), out.view()};
  const Status got = EmbeddingCpu(args);
  EXPECT_EQ(got.code(), StatusCode::kOutOfRange);
  EXPECT_EQ(got.ToString(), EmbeddingRef(args).ToString());
}

}  // namespace
}  // namespace millipede
