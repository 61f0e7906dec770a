// SamplingLogprobsRef against log-softmax worked out independently, its order and tail rules,
// and the argument checks. (PyTorch's log_softmax and topk check it on random inputs in
// sampling_oracle_test.py.)
#include "kernels/sampling/sampling_logprobs.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/kernels/kernel_test_util.h"

namespace millipede {
namespace {

using testing::CView;
using testing::kInf;
using testing::kNaN;
using testing::Poisoned;
using testing::PoisonedF32;
using testing::TensorOf;

struct Result {
  float token_logprob = 0;
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
};

StatusOr<Result> Logprobs(const std::vector<float>& values, int32_t token, int64_t k) {
  HostTensor logits = TensorOf(DType::kF32, {static_cast<int64_t>(values.size())}, values);
  HostTensor token_logprob = PoisonedF32({1});
  HostTensor ids = Poisoned(DType::kI32, {k});
  HostTensor logprobs = PoisonedF32({k});
  MP_RETURN_IF_ERROR(SamplingLogprobsRef({.logits = CView(logits),
                                          .token = token,
                                          .token_logprob = token_logprob.view(),
                                          .top_ids = ids.view(),
                                          .top_logprobs = logprobs.view()}));
  Result r{token_logprob.data<float>()[0], {}, {}};
  for (int64_t i = 0; i < k; ++i) {
    r.ids.push_back(ids.data<int32_t>()[i]);
    r.logprobs.push_back(logprobs.data<float>()[i]);
  }
  return r;
}

TEST(SamplingLogprobsTest, LogSoftmaxAndTheBestAlternatives) {
  const std::vector<float> values = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, -kInf};
  double sum = 0;
  for (float v : values) sum += std::exp(static_cast<double>(v));
  const double lse = std::log(sum);
  StatusOr<Result> r = Logprobs(values, 4, 3);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FLOAT_EQ(r->token_logprob, static_cast<float>(1.0 - lse));
  // Ties go to the lower id: 1 before 3.
  EXPECT_EQ(r->ids, (std::vector<int32_t>{1, 3, 4}));
  EXPECT_FLOAT_EQ(r->logprobs[0], static_cast<float>(2.0 - lse));
  EXPECT_EQ(r->logprobs[0], r->logprobs[1]);
  EXPECT_FLOAT_EQ(r->logprobs[2], r->token_logprob);
  // Probabilities sum to 1 over the vocabulary.
  StatusOr<Result> all = Logprobs(values, 0, 6);
  ASSERT_TRUE(all.ok());
  double total = 0;
  for (float lp : all->logprobs) total += std::exp(static_cast<double>(lp));
  EXPECT_NEAR(total, 1.0, 1e-6);
  EXPECT_EQ(all->ids.back(), 5);
  EXPECT_EQ(all->logprobs.back(), -kInf);
}

TEST(SamplingLogprobsTest, TailAndEmptyTop) {
  StatusOr<Result> r = Logprobs({0.0f, 0.0f}, 1, 4);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FLOAT_EQ(r->token_logprob, static_cast<float>(-std::log(2.0)));
  EXPECT_EQ(r->ids, (std::vector<int32_t>{0, 1, -1, -1}));
  EXPECT_EQ(r->logprobs[3], -kInf);
  StatusOr<Result> none = Logprobs({3.0f}, 0, 0);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->token_logprob, 0.0f);
  // Logits whose exponentials overflow even a double are taken relative to the largest.
  StatusOr<Result> big = Logprobs({1000.0f, 1000.0f, -1000.0f}, 2, 1);
  ASSERT_TRUE(big.ok());
  EXPECT_FLOAT_EQ(big->logprobs[0], static_cast<float>(-std::log(2.0)));
  EXPECT_FLOAT_EQ(big->token_logprob, static_cast<float>(-2000.0 - std::log(2.0)));
}

TEST(SamplingLogprobsTest, RejectsBadArguments) {
  EXPECT_EQ(Logprobs({1.0f, 2.0f}, 2, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Logprobs({1.0f, 2.0f}, -1, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Logprobs({1.0f, kNaN}, 0, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Logprobs({1.0f, kInf}, 0, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Logprobs({-kInf, -kInf}, 0, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Logprobs({}, 0, 1).status().code(), StatusCode::kInvalidArgument);
  HostTensor logits = TensorOf(DType::kF32, {2}, {1.0f, 2.0f});
  HostTensor token_logprob = PoisonedF32({1});
  HostTensor ids = Poisoned(DType::kI32, {2});
  HostTensor short_values = PoisonedF32({1});
  EXPECT_EQ(SamplingLogprobsRef({.logits = CView(logits),
                                 .token = 0,
                                 .token_logprob = token_logprob.view(),
                                 .top_ids = ids.view(),
                                 .top_logprobs = short_values.view()})
                .code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace millipede
