#include "loadgen/runner.h"

namespace millipede::loadgen {

bool CancelDue(const PlannedRequest& plan, bool prefill_started, int64_t outputs) {
  if (!plan.cancel_after_tokens) return false;
  if (*plan.cancel_after_tokens == 0) return prefill_started || outputs > 0;
  return outputs >= *plan.cancel_after_tokens;
}

RequestRecord RecordFor(const PlannedRequest& plan) {
  RequestRecord r;
  r.index = plan.index;
  r.placed = plan.placed;
  r.prompt_tokens = plan.prompt_tokens;
  r.requested_output_tokens = plan.output_tokens;
  r.cancel_after_tokens = plan.cancel_after_tokens;
  r.document = plan.document;
  return r;
}

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace millipede::loadgen
