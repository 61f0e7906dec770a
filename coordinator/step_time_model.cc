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
// Steps observed before the model is used, of each kind (with and without prefill work).
constexpr int64_t kMinObservations = 8;
constexpr int64_t kMinOfEachKind = 2;

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
  (work > 0 ? with_work_ : without_work_) += 1;
}

bool StepTimeModel::fitted() const {
  return observations_ >= kMinObservations && with_work_ >= kMinOfEachKind &&
         without_work_ >= kMinOfEachKind && theta_[0] >= 0 && theta_[1] >= 0 && theta_[2] > 0;
}

std::optional<double> StepTimeModel::Predict(double tokens, double work) const {
  if (!fitted()) return std::nullopt;
  const std::array<double, 3> x = Features(tokens, work);
  return theta_[0] * x[0] + theta_[1] * x[1] + theta_[2] * x[2];
}

std::optional<int64_t> StepTimeModel::WorkWithin(double seconds, double tokens) const {
  if (!fitted()) return std::nullopt;
  const double left = seconds - theta_[0] - theta_[1] * tokens / kTokenScale;
  if (left <= 0) return 0;
  const double work = left / theta_[2] * kWorkScale;
  return static_cast<int64_t>(std::min(work, static_cast<double>(int64_t{1} << 52)));
}

std::array<double, 3> StepTimeModel::coefficients() const {
  return {theta_[0], theta_[1] / kTokenScale, theta_[2] / kWorkScale};
}

std::optional<int64_t> PrefillWorkForTarget(const StepTimeModel& model, double target_s,
                                            int64_t decode_tokens, int64_t chunk_tokens) {
  if (target_s <= 0 || decode_tokens <= 0) return std::nullopt;
  return model.WorkWithin(target_s, static_cast<double>(decode_tokens + chunk_tokens));
}

}  // namespace millipede
