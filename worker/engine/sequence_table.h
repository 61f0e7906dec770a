// The engine's sequences and the memory plan every rank checks before one starts.
#pragma once

#include <cstdint>
#include <map>
#include <memory>

#include "common/status.h"
#include "worker/engine/engine_context.h"
#include "worker/engine/sequence.h"
#include "worker/memory_plan.h"

namespace millipede {

class SequenceTable {
 public:
  explicit SequenceTable(EngineContext& ctx) : ctx_(ctx) {}

  // Starts sequence `id` (not running yet) with room for options.capacity positions on this rank
  // (Engine::StartSequence has the contract). `checked` is the caller's verdict on the options'
  // policy: a failure there refuses the sequence on this rank, and so on every rank.
  Status Start(SequenceId id, SequenceOptions options, const Status& checked);
  // Frees the sequence's KV stores; false when it did not exist. When no sequence is left the
  // step buffers are freed too.
  bool End(SequenceId id);

  const Sequence* Find(SequenceId id) const;
  Sequence* FindMutable(SequenceId id);
  int64_t size() const { return static_cast<int64_t>(sequences_.size()); }
  // Bytes held by every sequence's KV stores on this rank (both tiers), and in the host tier.
  int64_t KvBytes() const;
  int64_t HostKvBytes() const;
  // The plan Start checks, for this rank (ring rows: the widest rank's step).
  StatusOr<SequenceMemoryPlan> Plan(const SequenceOptions& options, int64_t ring_rows) const;
  // The most positions this rank could hold in one dense sequence if the engine were empty.
  StatusOr<int64_t> MaxPositionsNow();

 private:
  // This rank's plan for `*options` (a kAuto tier for selected layers resolved), what it needs
  // of the backend's memory and of pinned host memory, and what each has free: need_free =
  // {device need, device free, host need, host free} (on the CPU backend, one memory: the host
  // tier counts in the device's).
  Status PlanLocal(SequenceOptions* options, int64_t ring_rows, SequenceMemoryPlan* plan,
                   int64_t need_free[4]);
  // Every rank's verdict and numbers (`all`: 5 per rank) checked: the first refusal, as an error.
  Status CheckRanks(const std::vector<int64_t>& all, const SequenceOptions& options,
                    const SequenceMemoryPlan& plan) const;
  // Allocates the step buffers and the sequence; every rank keeps it or none does.
  Status Allocate(SequenceId id, SequenceOptions options, int64_t ring_rows);

  EngineContext& ctx_;
  std::map<SequenceId, std::unique_ptr<Sequence>> sequences_;
};

}  // namespace millipede
