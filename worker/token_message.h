// A sampled token as the rank that drew it broadcasts it to the others: fixed size, so one host
// broadcast carries it (or an array of them).
#pragma once

#include <algorithm>
#include <cstdint>

#include "common/sampling_params.h"

namespace millipede {

struct TokenMessage {
  int32_t id = 0;
  float logprob = 0.0f;
  int32_t num_top = 0;
  // Non-zero: the draw failed on the sampling rank (a StatusCode; that rank logs the message).
  int32_t status_code = 0;
  int32_t top_ids[kMaxTopLogprobs] = {};
  float top_logprobs[kMaxTopLogprobs] = {};

  static TokenMessage From(const SampledToken& t) {
    TokenMessage m;
    m.id = t.id;
    m.logprob = t.logprob;
    m.num_top = static_cast<int32_t>(std::min<size_t>(t.top.size(), kMaxTopLogprobs));
    for (int32_t i = 0; i < m.num_top; ++i) {
      m.top_ids[i] = t.top[i].id;
      m.top_logprobs[i] = t.top[i].logprob;
    }
    return m;
  }
  SampledToken ToToken() const {
    SampledToken t{id, logprob, {}};
    for (int32_t i = 0; i < std::clamp(num_top, 0, kMaxTopLogprobs); ++i)
      t.top.push_back({top_ids[i], top_logprobs[i]});
    return t;
  }
};

}  // namespace millipede
