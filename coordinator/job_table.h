// A job in the scheduler's table (internal to the scheduler's .cc files).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/scheduler.h"
#include "coordinator/text_stream.h"

namespace millipede {

struct Scheduler::Job {
  JobId id = 0;
  control::JobDescriptor descriptor;
  std::shared_ptr<JobObserver> observer;
  std::unique_ptr<TextStream> text;
  JobState state = JobState::kQueued;
  Clock::time_point submitted, started, first_token, last_token;
  int64_t prefill_done = 0;
  // The prefill attention's query-key pairs and the causal pairs (StepJobResult), as of its
  // last chunk.
  int64_t prefill_attended_pairs = 0, prefill_causal_pairs = 0;
  std::vector<int32_t> ids;
  // A token whose text is still open (UTF-8 or stop-string prefix) is delivered with the next
  // event, so that the last one can carry the held-back text.
  std::optional<std::pair<SampledToken, std::string>> held_token;
  bool cancel_requested = false;  // by the client or the drain deadline
  bool stop_matched = false;      // a stop string ended the text; the next plan frees it
  bool stopped_by_id = false;     // the workers ended it at a stop or EOS id
};

}  // namespace millipede
