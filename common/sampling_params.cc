#include "common/sampling_params.h"

#include <cmath>

namespace millipede {

Status CheckSamplingParams(const SamplingParams& params) {
  MP_REQUIRE(std::isfinite(params.temperature) && params.temperature >= 0.0f,
             "sampling: temperature ", params.temperature, " must be finite and >= 0");
  MP_REQUIRE(params.top_k >= 0, "sampling: top_k ", params.top_k, " must be >= 0 (0 = off)");
  MP_REQUIRE(params.top_p > 0.0f && params.top_p <= 1.0f, "sampling: top_p ", params.top_p,
             " must lie in (0, 1] (1 = off)");
  return OkStatus();
}

}  // namespace millipede
