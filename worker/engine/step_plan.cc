#include "worker/engine/step_plan.h"

namespace millipede {

StatusOr<SequenceStep> ShardedPrefill(SequenceId sequence, int64_t begin,
                                      std::span<const int32_t> all_ids, int rank,
                                      int num_ranks) {
  const int64_t count = static_cast<int64_t>(all_ids.size());
  MP_ASSIGN_OR_RETURN(ShardPlan plan, ShardPlan::Create(count, num_ranks));
  SequenceStep s;
  s.sequence = sequence;
  s.kind = StepKind::kPrefill;
  for (const TokenRange& r : plan.RankPromptRanges(rank)) {
    if (r.empty()) continue;
    s.ranges.push_back({begin + r.begin, begin + r.end});
    s.ids.insert(s.ids.end(), all_ids.begin() + r.begin, all_ids.begin() + r.end);
  }
  return s;
}

SequenceStep DecodeStep(SequenceId sequence, int32_t id) {
  SequenceStep s;
  s.sequence = sequence;
  s.kind = StepKind::kDecode;
  s.ids = {id};
  return s;
}

}  // namespace millipede
