#include "api/job_service.h"

namespace millipede {

const char* JobStateName(JobState state) {
  switch (state) {
    case JobState::kQueued:
      return "queued";
    case JobState::kPrefill:
      return "prefill";
    case JobState::kDecode:
      return "decode";
    case JobState::kFinished:
      return "finished";
    case JobState::kCancelled:
      return "cancelled";
    case JobState::kFailed:
      return "failed";
  }
  return "unknown";
}

}  // namespace millipede
