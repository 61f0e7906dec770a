#include "coordinator/step_time_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace millipede {
namespace {

constexpr double kTokenScale = 1e3;
constexpr double kWorkScale = 1e8;
// The initial uncertainty of each coefficient (large: the first steps decide).
constexpr double kPrior = 1e4;
// Steps observed before the model is used, and of them with prefill work.
constexpr int64_t kMinObservations = 8;
constexpr int64_t kMinWithWork = 2;

}  // namespace

StepTimeModel::StepTimeModel(double forgetting) : forgetting_(std::clamp(forgetting, 0.5, 1.0)) {
  for (int i = 0; i < 3; ++i) p_[i][i] = kPrior;
}

std::array<double, 3> StepTimeModel::Features(double tokens, double work) {
  return {1.0, tokens / kTokenScale, work / kWorkScale};
}

void StepTimeModel::Observe(double tokens, double work, double seconds) {
  if (!(tokens >= 0 && work >= 0 && seconds >= 0) || !std::isfinite(tokens + work + seconds))
    return;
  const std::array<double, 3> x = Features(tokens, work);
  // Recursive least squares: gain k = P x / (lambda + x' P x), theta += k (y - x' theta),
  // P = (P - k x' P) / lambda.
  std::array<double, 3> px{};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) px[i] += p_[i][j] * x[j];
  double denominator = forgetting_;
  for (int i = 0; i < 3; ++i) denominator += x[i] * px[i];
  std::array<double, 3> gain{};
  for (int i = 0; i < 3; ++i) gain[i] = px[i] / denominator;
  double error = seconds;
  for (int i = 0; i < 3; ++i) error -= x[i] * theta_[i];
  for (int i = 0; i < 3; ++i) theta_[i] += gain[i] * error;
  // P is symmetric, so x' P = (P x)'.
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) p_[i][j] = (p_[i][j] - gain[i] * px[j]) / forgetting_;
  // Forgetting lets P grow without bound while the steps do not change: capped at the prior.
  for (int i = 0; i < 3; ++i)
    if (p_[i][i] > kPrior) {
      const double s = kPrior / p_[i][i];
      for (int j = 0; j < 3; ++j) {
        p_[i][j] *= std::sqrt(s);
        p_[j][i] *= std::sqrt(s);
      }
    }
  ++observations_;
  if (work > 0) ++with_work_;
}

bool StepTimeModel::fitted() const {
  return observations_ >= kMinObservations && with_work_ >= kMinWithWork && theta_[2] > 0;
}

std::optional<double> StepTimeModel::Predict(double tokens, double work) const {
  if (!fitted()) return std::nullopt;
  const std::array<double, 3> x = Features(tokens, work);
  return std::max(0.0, theta_[0] * x[0] + theta_[1] * x[1] + theta_[2] * x[2]);
}

std::array<double, 3> StepTimeModel::coefficients() const {
  return {theta_[0], theta_[1] / kTokenScale, theta_[2] / kWorkScale};
}

PrefillWorkController::PrefillWorkController(double target_s, int64_t initial, int64_t ceiling,
                                             int64_t floor)
    : target_s_(target_s), floor_(static_cast<double>(std::max<int64_t>(1, floor))) {
  ceiling_ = std::max(floor_, static_cast<double>(ceiling));
  bound_ = std::clamp(static_cast<double>(initial), floor_, ceiling_);
}

std::optional<int64_t> PrefillWorkController::Bound(int64_t decoding) const {
  if (target_s_ <= 0 || decoding <= 0) return std::nullopt;
  return static_cast<int64_t>(bound_);
}

void PrefillWorkController::Observe(double work, double seconds) {
  if (target_s_ <= 0 || !(work >= 0 && seconds > 0) || !std::isfinite(work + seconds)) return;
  const bool late = seconds > target_s_;
  if (!late && work < 0.5 * bound_) return;
  // A late step that carried less than the bound: its chunks, not the bound, made it late; but
  // one such step (a decode-only step slowed by anything at all) halves the bound at most.
  const double from = late ? std::min(bound_, std::max({work, 0.5 * bound_, floor_})) : bound_;
  // Down at once, up by half the ratio (in logarithms): a late step is a miss already, and
  // growing cautiously keeps the bound from overshooting into the next one.
  const double ratio = std::clamp(target_s_ / seconds, 0.25, 4.0);
  bound_ = std::clamp(from * (late ? ratio : std::sqrt(ratio)), floor_, ceiling_);
}

}  // namespace millipede
