// StepTimeModel: the fit recovers a linear step time, waits for enough steps of both kinds,
// follows a change, and turns a latency target into a prefill work bound.
#include "coordinator/step_time_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace millipede {
namespace {

// 10 ms a step, 20 us a token, 1 ns a pair of prefill work.
constexpr double kA = 0.010, kB = 20e-6, kC = 1e-9;

double StepSeconds(double tokens, double work, double c = kC) {
  return kA + kB * tokens + c * work;
}

// A service's steps: decode-only steps of 8 to 40 tokens and steps with a chunk of prefill.
void ObserveSteps(StepTimeModel* model, int n, double c = kC) {
  for (int i = 0; i < n; ++i) {
    const double decode = 8 + (i * 7) % 33;
    if (i % 3 == 0) {
      model->Observe(decode, 0, StepSeconds(decode, 0, c));
    } else {
      const double chunk = 64 + (i * 131) % 1000, work = chunk * (50000.0 + 997.0 * i);
      model->Observe(decode + chunk, work, StepSeconds(decode + chunk, work, c));
    }
  }
}

TEST(StepTimeModelTest, RecoversTheCoefficientsOfALinearStepTime) {
  StepTimeModel model;
  ObserveSteps(&model, 60);
  ASSERT_TRUE(model.fitted());
  const auto c = model.coefficients();
  EXPECT_NEAR(c[0], kA, kA * 0.01);
  EXPECT_NEAR(c[1], kB, kB * 0.01);
  EXPECT_NEAR(c[2], kC, kC * 0.01);
  EXPECT_NEAR(*model.Predict(100, 3e7), StepSeconds(100, 3e7), 1e-4);
  // 50 ms for a step of 200 tokens: (0.05 - 0.01 - 0.004) / 1e-9 pairs.
  const std::optional<int64_t> work = model.WorkWithin(0.050, 200);
  ASSERT_TRUE(work.has_value());
  EXPECT_NEAR(static_cast<double>(*work), 3.6e7, 3.6e7 * 0.02);
  // A step whose other work alone exceeds the target: no prefill work.
  EXPECT_EQ(model.WorkWithin(0.011, 200), 0);
}

TEST(StepTimeModelTest, WaitsForEnoughStepsWithAndWithoutPrefill) {
  StepTimeModel model;
  EXPECT_FALSE(model.Predict(10, 0).has_value());
  for (int i = 0; i < 20; ++i) model.Observe(10 + i, 0, StepSeconds(10 + i, 0));
  EXPECT_FALSE(model.fitted());  // no step with prefill work yet: its cost is unknown
  EXPECT_FALSE(model.WorkWithin(0.05, 10).has_value());
  model.Observe(500, 1e7, StepSeconds(500, 1e7));
  model.Observe(700, 3e7, StepSeconds(700, 3e7));
  EXPECT_TRUE(model.fitted());
}

TEST(StepTimeModelTest, FollowsAStepTimeThatChanges) {
  StepTimeModel model;
  ObserveSteps(&model, 60);
  ObserveSteps(&model, 200, 2 * kC);  // prefill attention now costs twice as much
  ASSERT_TRUE(model.fitted());
  // The old steps still weigh 0.98^200 = 2%.
  EXPECT_NEAR(model.coefficients()[2], 2 * kC, 2 * kC * 0.05);
}

TEST(StepTimeModelTest, IgnoresStepsThatCannotBeTimed) {
  StepTimeModel model;
  model.Observe(10, 0, std::numeric_limits<double>::quiet_NaN());
  model.Observe(-1, 0, 0.01);
  model.Observe(10, -5, 0.01);
  model.Observe(10, 0, -0.01);
  model.Observe(std::numeric_limits<double>::infinity(), 0, 0.01);
  EXPECT_EQ(model.observations(), 0);
}

TEST(StepTimeModelTest, ATargetBoundsPrefillOnlyWhileJobsDecode) {
  StepTimeModel model;
  EXPECT_FALSE(PrefillWorkForTarget(model, 0.05, 10, 100).has_value());  // not fitted
  ObserveSteps(&model, 60);
  EXPECT_FALSE(PrefillWorkForTarget(model, 0.05, 0, 100).has_value());  // nothing decodes
  EXPECT_FALSE(PrefillWorkForTarget(model, 0, 10, 100).has_value());    // no target
  const std::optional<int64_t> bound = PrefillWorkForTarget(model, 0.05, 10, 100);
  ASSERT_TRUE(bound.has_value());
  EXPECT_EQ(*bound, *model.WorkWithin(0.05, 110));
}

}  // namespace
}  // namespace millipede
