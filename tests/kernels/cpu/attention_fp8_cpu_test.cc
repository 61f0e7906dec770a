// AttentionFp8Cpu against AttentionFp8Ref: the threaded slices give the reference's bytes (rows
// are independent and every slice rounds the same K and V), over odd sizes, GQA, offsets, both
// masks and no LSE; its refusals are the reference's.
#include "kernels/cpu/attention_fp8_cpu.h"

#include <gtest/gtest.h>

#include <cstring>

#include "kernels/attention/attention_fp8.h"
#include "tests/kernels/cpu/cpu_test_util.h"

namespace millipede {
namespace {

using testing::CView;
using testing::PoisonedF32;
using testing::RandomTensor;

TEST(AttentionFp8CpuTest, EqualsTheReferenceBitForBit) {
  struct Case {
    int64_t n_q, n_kv, q_heads, kv_heads, d, q_offset;
    AttentionMask mask;
    bool lse;
  };
  for (const Case& c : {Case{1, 1, 2, 2, 16, 0, AttentionMask::kCausal, true},
                        Case{333, 333, 8, 2, 64, 0, AttentionMask::kCausal, true},
                        Case{100, 700, 4, 1, 32, 600, AttentionMask::kCausal, false},
                        Case{257, 130, 4, 4, 16, 0, AttentionMask::kNone, true}}) {
    SCOPED_TRACE(::testing::Message() << "n_q " << c.n_q << " n_kv " << c.n_kv);
    const HostTensor q = RandomTensor(DType::kF32, {c.n_q, c.q_heads, c.d}, 1, -2, 2);
    const HostTensor k = RandomTensor(DType::kBF16, {c.n_kv, c.kv_heads, c.d}, 2, -2, 2);
    const HostTensor v = RandomTensor(DType::kF16, {c.n_kv, c.kv_heads, c.d}, 3);
    HostTensor o_ref = PoisonedF32({c.n_q, c.q_heads, c.d}),
               lse_ref = PoisonedF32({c.n_q, c.q_heads});
    HostTensor o = PoisonedF32({c.n_q, c.q_heads, c.d}), lse = PoisonedF32({c.n_q, c.q_heads});
    AttentionArgs args{CView(q),
                       CView(k),
                       CView(v),
                       c.q_offset,
                       0,
                       c.mask,
                       0.0f,
                       o_ref.view(),
                       c.lse ? lse_ref.view() : TensorView{}};
    ASSERT_TRUE(AttentionFp8Ref(args).ok());
    args.o = o.view();
    if (c.lse) args.lse = lse.view();
    ASSERT_TRUE(AttentionFp8Cpu(args).ok());
    EXPECT_EQ(std::memcmp(o.view().data, o_ref.view().data, o.NumBytes()), 0);
    EXPECT_EQ(std::memcmp(lse.view().data, lse_ref.view().data, lse.NumBytes()), 0);
  }
}

TEST(AttentionFp8CpuTest, RefusesWhatTheReferenceRefuses) {
  const HostTensor q = RandomTensor(DType::kF32, {4, 2, 16}, 1);
  const HostTensor k = RandomTensor(DType::kBF16, {4, 1, 16}, 2);
  HostTensor o = PoisonedF32({4, 2, 16});
  AttentionArgs args{CView(q), CView(k), CView(k), 0, 0, AttentionMask::kCausal,
                     0.0f,     o.view(), {}};
  const int64_t window[1] = {2};
  args.kv_head_window = window;
  EXPECT_EQ(AttentionFp8Cpu(args).code(), StatusCode::kUnimplemented);
  args.kv_head_window = nullptr;
  args.scale = -1.0f;
  EXPECT_EQ(AttentionFp8Cpu(args).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace millipede
