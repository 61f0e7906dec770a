// How long an engine step takes, learnt from the steps the workers ran, and the prefill work a
// step may carry to stay within an inter-token latency target (`--itl-target-ms`). Pure code: the
// caller measures the steps. The bound itself comes from feedback on the steps' times
// (PrefillWorkController); the model estimates what part of a step its prefill took (the time
// decode tokens waited for it).
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

  // Whether the model can be used: enough steps observed, some with prefill work, and a positive
  // cost per pair. (Steps that all carry prefill work, beside one long prompt, leave the fixed
  // and per-token costs less certain: the model estimates the steps it sees.)
  bool fitted() const;
  // Predicted seconds of a step, at least 0 (nullopt until fitted()).
  std::optional<double> Predict(double tokens, double work) const;
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
  int64_t with_work_ = 0;
};

// The prefill work bound per rank that keeps steps with decode tokens at an inter-token latency
// target, by feedback: after each step that decoded, the bound is scaled by target / the step's
// time when the step was late (at most 4x down), by the square root of it when it was early (at
// most 2x up); a late step scales from the work it carried when that was below the bound (the
// bound was not what made it late, its chunks were), though from no less than half the bound.
// A step under the target whose prefill did not reach half the bound says nothing about it and
// leaves it. So the bound settles where such steps take the target whatever the step's fixed
// costs, falls to `floor` where even that is late (the decode tokens alone take longer), and
// grows back once they take less. No model of the step is needed, so a service that only ever
// decodes beside one long prompt (every step with prefill work) is served from its first steps.
class PrefillWorkController {
 public:
  // `initial` and `ceiling`: the bound before any step and the most it grows to (both clamped to
  // at least `floor` >= 1).
  PrefillWorkController(double target_s, int64_t initial, int64_t ceiling, int64_t floor = 1);
  // The bound for the next step while `decoding` jobs decode; nullopt when none does (a long
  // prompt alone prefills at full speed) or there is no target.
  std::optional<int64_t> Bound(int64_t decoding) const;
  // A step that decoded tokens and carried `work` pairs of prefill work per rank took `seconds`.
  void Observe(double work, double seconds);
  int64_t bound() const { return static_cast<int64_t>(bound_); }

 private:
  double target_s_, bound_, ceiling_, floor_;
};

}  // namespace millipede
