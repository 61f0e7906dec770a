// A step plan made ready on this rank: checked, every rank's share and outcome exchanged (so that
// a rank whose share is bad fails the step on every rank before any collective), and the entries
// resolved: rows in the step's buffers, every rank's ring blocks, logit rows.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "worker/engine/engine_context.h"
#include "worker/engine/rank_entry.h"
#include "worker/engine/sequence_table.h"
#include "worker/engine/step_plan.h"

namespace millipede {

class StepPreparer {
 public:
  StepPreparer(EngineContext& ctx, SequenceTable& sequences) : ctx_(ctx), sequences_(sequences) {}

  // The plan's entries as this rank runs them, the step buffers reserved for them. Fails on
  // every rank together.
  StatusOr<std::vector<RankEntry>> Prepare(const StepPlan& plan);

 private:
  Status CheckEntry(const SequenceStep& step, RankEntry* entry) const;
  Status ExchangeEntries(std::vector<RankEntry>* entries, const Status& local);
  Status ResolveEntries(std::vector<RankEntry>* entries, int64_t* ring_rows);
  // A prefill entry's end and, for every kind of store its layers have, every rank's ring blocks.
  Status ResolvePrefill(RankEntry* entry, int64_t* ring_rows);

  EngineContext& ctx_;
  SequenceTable& sequences_;
};

}  // namespace millipede
