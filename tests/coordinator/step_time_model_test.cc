// StepTimeModel: the fit recovers a linear step time, waits for enough steps with prefill work,
// and follows a change. PrefillWorkController: the bound settles where steps take the target,
// falls to its floor where the target cannot be met, and grows back.
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
  EXPECT_NEAR(*model.Predict(100, 0), StepSeconds(100, 0), 1e-4);
}

TEST(StepTimeModelTest, WaitsForEnoughStepsWithPrefill) {
  StepTimeModel model;
  EXPECT_FALSE(model.Predict(10, 0).has_value());
  for (int i = 0; i < 20; ++i) model.Observe(10 + i, 0, StepSeconds(10 + i, 0));
  EXPECT_FALSE(model.fitted());  // no step with prefill work yet: its cost is unknown
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

// A step of the service beside a long prompt: 25 ms of decode and fixed costs, then the prefill
// work at 1 ns a pair.
double ServiceStep(double work, double fixed = 0.025) { return fixed + 1e-9 * work; }

TEST(PrefillWorkControllerTest, SettlesWhereStepsTakeTheTarget) {
  PrefillWorkController control(0.060, /*initial=*/60'000'000, /*ceiling=*/60'000'000);
  EXPECT_FALSE(control.Bound(0).has_value());  // nothing decodes: no bound from the target
  ASSERT_TRUE(control.Bound(3).has_value());
  for (int i = 0; i < 60; ++i) {
    const double work = static_cast<double>(*control.Bound(3));
    control.Observe(work, ServiceStep(work));
  }
  // 60 ms = 25 ms + 35e6 pairs.
  EXPECT_NEAR(static_cast<double>(control.bound()), 35e6, 35e6 * 0.01);
}

TEST(PrefillWorkControllerTest, FallsToTheFloorAndGrowsBack) {
  PrefillWorkController control(0.060, 60'000'000, 60'000'000, /*floor=*/1000);
  for (int i = 0; i < 80; ++i) {  // the decode tokens alone take 70 ms
    const double work = static_cast<double>(control.bound());
    control.Observe(work, ServiceStep(work, 0.070));
  }
  EXPECT_EQ(control.bound(), 1000);
  for (int i = 0; i < 80; ++i) {  // they take 25 ms again
    const double work = static_cast<double>(control.bound());
    control.Observe(work, ServiceStep(work));
  }
  EXPECT_NEAR(static_cast<double>(control.bound()), 35e6, 35e6 * 0.01);
  // Never above its ceiling, however fast the steps.
  for (int i = 0; i < 40; ++i) control.Observe(static_cast<double>(control.bound()), 0.001);
  EXPECT_EQ(control.bound(), 60'000'000);
}

TEST(PrefillWorkControllerTest, StepsThatDidNotUseTheBoundDoNotMoveItUp) {
  PrefillWorkController control(0.060, 10'000'000, 60'000'000);
  control.Observe(1'000'000, 0.030);  // under the target with a tenth of the bound: no news
  EXPECT_EQ(control.bound(), 10'000'000);
  // Late with less than the bound: scaled down from what it carried, by target / time, but from
  // no less than half the bound.
  control.Observe(6'000'000, 0.120);
  EXPECT_EQ(control.bound(), 3'000'000);
  control.Observe(0, 0.240);  // a late step without prefill
  EXPECT_EQ(control.bound(), 375'000);
  // Bad measurements are ignored; without a target there is no bound.
  control.Observe(-1, 0.05);
  control.Observe(1e6, std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(control.bound(), 375'000);
  EXPECT_FALSE(PrefillWorkController(0, 1, 1).Bound(5).has_value());
}

}  // namespace
}  // namespace millipede
