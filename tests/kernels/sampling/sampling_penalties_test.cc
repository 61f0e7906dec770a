// SamplingPenaltiesRef against values worked out by hand from vLLM's definitions, the host
// tables' builder, and the argument checks. (Hugging Face's processors check it on random inputs
// in sampling_oracle_test.py.)
#include "kernels/sampling/sampling_penalties.h"

#include <gtest/gtest.h>

#include <vector>

#include "tests/kernels/kernel_test_util.h"

namespace millipede {
namespace {

using testing::CView;
using testing::kInf;
using testing::kNaN;
using testing::PoisonedF32;
using testing::TensorOf;
using testing::ToFloats;

HostTensor Row(const std::vector<float>& values) {
  return TensorOf(DType::kF32, {static_cast<int64_t>(values.size())}, values);
}

struct Tables {
  HostTensor bias, prompt, counts;
};

Tables MakeTables(const std::vector<float>& bias, const std::vector<uint8_t>& prompt,
                  const std::vector<int32_t>& counts) {
  const int64_t n = static_cast<int64_t>(bias.size());
  Tables t{Row(bias), HostTensor(DType::kU8, {n}), HostTensor(DType::kI32, {n})};
  for (int64_t i = 0; i < n; ++i) {
    t.prompt.data<uint8_t>()[i] = prompt[i];
    t.counts.data<int32_t>()[i] = counts[i];
  }
  return t;
}

std::vector<float> Apply(const HostTensor& logits, const Tables& t, float repetition,
                         float presence, float frequency) {
  HostTensor out = PoisonedF32(logits.shape());
  const Status s = SamplingPenaltiesRef({.logits = CView(logits),
                                         .bias = CView(t.bias),
                                         .prompt_mask = CView(t.prompt),
                                         .output_counts = CView(t.counts),
                                         .repetition_penalty = repetition,
                                         .presence_penalty = presence,
                                         .frequency_penalty = frequency,
                                         .out = out.view()});
  EXPECT_TRUE(s.ok()) << s.ToString();
  return ToFloats(out);
}

TEST(SamplingPenaltiesTest, HandValues) {
  // ids:            0     1     2      3     4     5
  // bias:           0     1     0      0    -2     0
  // in the prompt:  1     0     1      0     0     0
  // output counts:  0     2     0      1     0     0
  const HostTensor logits = Row({2.0f, 1.0f, -3.0f, 4.0f, 0.5f, -kInf});
  const Tables t = MakeTables({0, 1, 0, 0, -2, 0}, {1, 0, 1, 0, 0, 0}, {0, 2, 0, 1, 0, 0});
  // repetition 2: 0 (prompt, positive) 2 / 2 = 1; 1 (output) (1 + 1) / 2 = 1; 2 (prompt,
  // negative) -3 * 2 = -6; 3 (output) 4 / 2 = 2; 4 (unseen) 0.5 - 2 = -1.5; 5 stays -inf.
  // frequency 0.5 and presence 0.25 then take 2 x 0.5 + 0.25 = 1.25 from id 1 and
  // 0.5 + 0.25 = 0.75 from id 3.
  const std::vector<float> out = Apply(logits, t, 2.0f, 0.25f, 0.5f);
  EXPECT_EQ(out, (std::vector<float>{1.0f, -0.25f, -6.0f, 1.25f, -1.5f, -kInf}));
  // No penalties: the bias alone.
  EXPECT_EQ(Apply(logits, t, 1.0f, 0.0f, 0.0f),
            (std::vector<float>{2.0f, 2.0f, -3.0f, 4.0f, -1.5f, -kInf}));
  // A repetition penalty below 1 raises seen tokens; negative presence and frequency too.
  EXPECT_EQ(Apply(logits, t, 0.5f, -1.0f, -0.5f),
            (std::vector<float>{4.0f, 6.0f, -1.5f, 9.5f, -1.5f, -kInf}));
}

TEST(SamplingPenaltiesTest, AbsentTablesAndInPlace) {
  HostTensor logits = Row({1.0f, -1.0f, 0.0f});
  HostTensor out = PoisonedF32({3});
  // No tables: nothing is seen, so only the identity remains whatever the penalties.
  ASSERT_TRUE(SamplingPenaltiesRef({.logits = CView(logits),
                                    .repetition_penalty = 3.0f,
                                    .presence_penalty = 2.0f,
                                    .frequency_penalty = 2.0f,
                                    .out = out.view()})
                  .ok());
  EXPECT_EQ(ToFloats(out), ToFloats(logits));
  // In place, with only the counts.
  HostTensor counts(DType::kI32, {3});
  for (int i = 0; i < 3; ++i) counts.data<int32_t>()[i] = i;
  ASSERT_TRUE(SamplingPenaltiesRef({.logits = CView(logits),
                                    .output_counts = CView(counts),
                                    .repetition_penalty = 2.0f,
                                    .frequency_penalty = 1.0f,
                                    .out = logits.view()})
                  .ok());
  EXPECT_EQ(ToFloats(logits), (std::vector<float>{1.0f, -3.0f, -2.0f}));
}

TEST(SamplingPenaltiesTest, NanAndInfinityPassThrough) {
  HostTensor logits = Row({kNaN, kInf, 1.0f});
  HostTensor out = PoisonedF32({3});
  HostTensor prompt(DType::kU8, {3});
  for (int i = 0; i < 3; ++i) prompt.data<uint8_t>()[i] = 1;
  ASSERT_TRUE(SamplingPenaltiesRef({.logits = CView(logits),
                                    .prompt_mask = CView(prompt),
                                    .repetition_penalty = 2.0f,
                                    .out = out.view()})
                  .ok());
  EXPECT_TRUE(std::isnan(out.data<float>()[0]));
  EXPECT_EQ(out.data<float>()[1], kInf);
  EXPECT_EQ(out.data<float>()[2], 0.5f);
}

TEST(SamplingPenaltiesTest, TablesFromIds) {
  const std::vector<int32_t> prompt = {1, 1, 3}, output = {3, 2, 3, 3}, bad = {-1}, big = {7};
  StatusOr<SamplingPenaltiesTables> t =
      SamplingPenaltiesTables::Build(5, {{4, -1.5f}, {0, 2.0f}}, prompt, output);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->bias, (std::vector<float>{2.0f, 0, 0, 0, -1.5f}));
  EXPECT_EQ(t->prompt_mask, (std::vector<uint8_t>{0, 1, 0, 1, 0}));
  EXPECT_EQ(t->output_counts, (std::vector<int32_t>{0, 0, 1, 3, 0}));
  EXPECT_FALSE(SamplingPenaltiesTables::Build(5, {{5, 1.0f}}, {}, {}).ok());
  EXPECT_FALSE(SamplingPenaltiesTables::Build(5, {}, bad, {}).ok());
  EXPECT_FALSE(SamplingPenaltiesTables::Build(5, {}, {}, big).ok());
  EXPECT_FALSE(SamplingPenaltiesTables::Build(0, {}, {}, {}).ok());
}

TEST(SamplingPenaltiesTest, RejectsBadArguments) {
  HostTensor logits = Row({1.0f, 2.0f});
  HostTensor out = PoisonedF32({2});
  auto run = [&](SamplingPenaltiesArgs a) { return SamplingPenaltiesRef(a).code(); };
  const SamplingPenaltiesArgs good{.logits = CView(logits), .out = out.view()};
  EXPECT_EQ(run(good), StatusCode::kOk);
  SamplingPenaltiesArgs a = good;
  a.repetition_penalty = 0.0f;
  EXPECT_EQ(run(a), StatusCode::kInvalidArgument);
  a = good;
  a.presence_penalty = 2.5f;
  EXPECT_EQ(run(a), StatusCode::kInvalidArgument);
  a = good;
  a.frequency_penalty = kNaN;
  EXPECT_EQ(run(a), StatusCode::kInvalidArgument);
  HostTensor short_mask(DType::kU8, {1});
  a = good;
  a.prompt_mask = CView(short_mask);
  EXPECT_EQ(run(a), StatusCode::kInvalidArgument);
  HostTensor float_counts(DType::kF32, {2});
  a = good;
  a.output_counts = CView(float_counts);
  EXPECT_EQ(run(a), StatusCode::kInvalidArgument);
  HostTensor negative(DType::kI32, {2});
  negative.data<int32_t>()[0] = 0;
  negative.data<int32_t>()[1] = -1;
  a = good;
  a.output_counts = CView(negative);
  EXPECT_EQ(run(a), StatusCode::kInvalidArgument);
  HostTensor wide = PoisonedF32({3});
  a = good;
  a.out = wide.view();
  EXPECT_EQ(run(a), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace millipede
