#include "worker/attention/attended_pairs.h"

#include <algorithm>

namespace millipede {
namespace {

// Sum of t over t in [u, v) (0 when v <= u).
int64_t SumRange(int64_t u, int64_t v) { return v > u ? (v * (v - 1) - u * (u - 1)) / 2 : 0; }

// Sum over p in [a, b) of clamp(p + shift, 0, cap), cap >= 0.
int64_t SumClamped(int64_t a, int64_t b, int64_t shift, int64_t cap) {
  if (b <= a) return 0;
  const int64_t u = a + shift, v = b + shift;  // the clamped values t run over [u, v)
  // t <= 0 adds 0; 0 < t < cap adds t; t >= cap adds cap.
  const int64_t ramp = SumRange(std::clamp<int64_t>(u, 1, cap), std::clamp<int64_t>(v, 1, cap));
  const int64_t full = std::max<int64_t>(0, v - std::max(u, cap));
  return ramp + full * cap;
}

}  // namespace

int64_t CausalPairs(std::span<const TokenRange> queries) {
  int64_t pairs = 0;
  for (const TokenRange& q : queries) pairs += SumRange(q.begin + 1, q.end + 1);
  return pairs;
}

int64_t WindowPairs(std::span<const TokenRange> queries, int64_t sink, int64_t window) {
  // Query p sees min(p + 1, window) keys of its window and, before the window, the sinks:
  // min(sink, max(0, p + 1 - window)).
  int64_t pairs = 0;
  for (const TokenRange& q : queries)
    pairs += SumClamped(q.begin, q.end, 1, window) + SumClamped(q.begin, q.end, 1 - window, sink);
  return pairs;
}

}  // namespace millipede
