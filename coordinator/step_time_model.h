// How long an engine step takes, learnt from the steps the workers ran, and the prefill work a
// step may carry to stay within an inter-token latency target (`--itl-target-ms`). Pure code: the
// caller measures the steps.
//
// A step's time is modelled as a + b x tokens + c x work: a the fixed cost of a step (launches,
// the weights read once), b per token of the step (decode tokens and prefill chunks: the
// projections and the MLP), c per pair of prefill attention work (StepScheduler's count per rank:
// a chunk of n positions after D attends to about n x (D + n) pairs). The coefficients are fitted
// by recursive least squares with exponential forgetting, so the model follows a service whose
// steps change (a long prompt's chunks grow deeper; another model or GPU). Only steps that
// computed alone are observed: a step that also starts, ends or moves KV spends time the model
// does not describe.
#pragma once

#include <array>
#include <cstdint>
#include <optional>

namespace millipede {

class StepTimeModel {
 public:
  // `forgetting` in (0, 1]: the weight of an observation falls by this factor per later one (0.98:
  // the last ~50 steps count most).
  explicit StepTimeModel(double forgetting = 0.98);

  // A step of `tokens` tokens and `work` pairs of prefill work per rank took `seconds`.
  void Observe(double tokens, double work, double seconds);
  int64_t observations() const { return observations_; }

  // Whether the model can be used: enough steps observed, with and without prefill work, and
  // every coefficient non-negative with a positive cost per pair.
  bool fitted() const;
  // Predicted seconds of a step (nullopt until fitted()).
  std::optional<double> Predict(double tokens, double work) const;
  // The most prefill work per rank a step of `tokens` tokens may carry to take at most `seconds`
  // (0 when even none would: the step's other work alone exceeds it); nullopt until fitted().
  std::optional<int64_t> WorkWithin(double seconds, double tokens) const;
  // The coefficients: seconds per step, per token, per pair (for logs and tests).
  std::array<double, 3> coefficients() const;

 private:
  // Features are scaled to similar magnitudes (tokens in thousands, work in 1e8 pairs) so that the
  // fit's matrix stays well conditioned.
  static std::array<double, 3> Features(double tokens, double work);

  double forgetting_;
  std::array<double, 3> theta_{};
  std::array<std::array<double, 3>, 3> p_{};  // the inverse information matrix
  int64_t observations_ = 0;
  int64_t with_work_ = 0, without_work_ = 0;
};

// The prefill work bound per rank for a step that decodes `decode_tokens` tokens beside prefill
// chunks of about `chunk_tokens` tokens, to keep the step within `target_s`: the model's
// WorkWithin, or nullopt (no bound from the target) while it is not fitted or no job decodes.
std::optional<int64_t> PrefillWorkForTarget(const StepTimeModel& model, double target_s,
                                            int64_t decode_tokens, int64_t chunk_tokens);

}  // namespace millipede
