#include "common/sampling_params.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>

namespace millipede {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(SamplingParamsTest, EdgesOfEveryRangeAreAccepted) {
  EXPECT_TRUE(CheckSamplingParams({}).ok());  // greedy
  EXPECT_TRUE(CheckSamplingParams({0.0f, 0, 1.0f, 0}).ok());
  EXPECT_TRUE(CheckSamplingParams({1e30f, 1 << 30, 1e-30f, ~uint64_t{0}}).ok());
}

TEST(SamplingParamsTest, EachBadFieldIsNamed) {
  struct Bad {
    SamplingParams params;
    std::string field;
  };
  for (const Bad& bad :
       {Bad{{-1.0f}, "temperature"}, Bad{{kNaN}, "temperature"}, Bad{{kInf}, "temperature"},
        Bad{{-0.5f, 3, 0.5f}, "temperature"}, Bad{{1.0f, -1}, "top_k"},
        Bad{{1.0f, 0, 0.0f}, "top_p"}, Bad{{1.0f, 0, -0.5f}, "top_p"},
        Bad{{1.0f, 0, 1.0001f}, "top_p"}, Bad{{1.0f, 0, kNaN}, "top_p"}}) {
    const Status status = CheckSamplingParams(bad.params);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << bad.field;
    EXPECT_NE(status.message().find(bad.field), std::string::npos) << status.ToString();
  }
}

}  // namespace
}  // namespace millipede
