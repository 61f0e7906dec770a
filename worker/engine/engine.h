// The engine of one worker rank: a Llama-family decoder (llama, mistral, qwen2) run layer by layer
// on a backend, over any number of sequences at once.
//
// Its state: the Model (weights, backend, stateless layer pieces: model.h), Sequences (each with
// its KV stores, length, policy and attention strategies: sequence.h) and the Workspace (step
// buffers shared by every sequence: workspace.h). Its one entry point, RunStep, runs a StepPlan
// (step_plan.h): prefill chunks and decode tokens of several sequences in one pass over the
// layers — projections and the MLP over all the step's rows, attention per sequence by its
// layer's strategy (worker/attention/). The work is done by parts with one job each, sharing an
// EngineContext (engine_context.h): the SequenceTable (sequences and the memory plan every rank
// checks), the StepPreparer (a plan checked, exchanged and resolved into RankEntries), the
// LayerLoop (embedding, layers, logits, commit) and the DecodeGraphRunner (recorded decode
// steps).
//
// A sequence may be spread over the ranks of a Communicator (context parallelism; see
// common/shard_plan.h): a prefill entry is sharded, each rank running its own tokens with ring
// attention over every rank's K/V; a decode entry is replicated, every rank running the same
// token, one rank storing its K/V and only (o, lse) partials crossing ranks. With one rank both
// reduce to ordinary single-process inference. Every rank runs the same plans in the same order.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/model_config.h"
#include "common/shard_plan.h"
#include "common/status.h"
#include "policy/attention_policy.h"
#include "worker/attention/attention_env.h"
#include "worker/backend/backend.h"
#include "worker/dist/communicator.h"
#include "worker/engine/decode_graph_runner.h"
#include "worker/engine/engine_context.h"
#include "worker/engine/engine_options.h"
#include "worker/engine/layer_loop.h"
#include "worker/engine/sequence.h"
#include "worker/engine/sequence_table.h"
#include "worker/engine/step_plan.h"
#include "worker/engine/step_preparer.h"
#include "worker/memory_plan.h"

namespace millipede {

class Engine {
 public:
  // `comm` connects the ranks sharing each sequence; null means a single rank. `backend`, when
  // set, runs the engine's ops instead of CreateBackend(options.backend, options.device) (tests
  // wrap a backend to watch its ops); its kind must be options.backend.
  static StatusOr<std::unique_ptr<Engine>> Create(const EngineOptions& options,
                                                  std::unique_ptr<Communicator> comm = nullptr,
                                                  std::unique_ptr<Backend> backend = nullptr);

  const ModelConfig& config() const { return ctx_.config(); }
  const EngineOptions& options() const { return ctx_.options; }
  Backend& backend() { return *ctx_.backend; }
  Communicator& comm() { return *ctx_.comm; }
  int64_t max_context() const { return ctx_.max_context(); }
  const EngineStats& stats() const { return ctx_.stats; }
  void ResetStats() { ctx_.stats = EngineStats(); }

  // The attention policy sequences get unless they bring their own (dense/full unless set).
  const AttentionPolicy& policy() const { return policy_; }
  // The patterns and roles this engine runs, reported to the coordinator (a worker's hello).
  // Every prefill pattern and decode role on every backend, and layers that mix full and
  // streaming-head decode per KV head (DuoAttention): a streaming store keeps the rows a
  // streaming layer sees, the attention ops' per-KV-head windows serve a-shape prefill and mixed
  // layers, and static eviction and OmniKV's roles are made of backend ops.
  PolicyCapabilities capabilities() const;
  // Checks that `policy` fits the model (ValidateAttentionPolicy) and that this engine runs it:
  // a pattern or role outside capabilities() is Unimplemented naming it, the layer and the head.
  Status CheckPolicy(const AttentionPolicy& policy) const;
  // Checks `policy` (CheckPolicy), then makes it the default for sequences started afterwards;
  // on an error the default is unchanged.
  Status SetPolicy(AttentionPolicy policy);

  // ---- Sequences ----
  // Starts sequence `id` (not running yet) with room for options.capacity positions on this rank.
  // Called by every rank at once: the ranks' memory plans are checked against each GPU's (or
  // host's) free memory, and a host tier's against the host's, before anything is allocated;
  // if any rank cannot fit, every rank fails with its numbers. Selected layers whose tier is
  // kAuto (and the engine's too) go to the host tier when the device cannot hold them (GPU
  // backends). The step buffers for options.step_tokens are allocated here. With `prefix`, the
  // sequence starts holding the KV of the first prefix->length positions of the cached sequence
  // prefix->from (the prefix cache: SequenceTable::Start), so its first step continues there.
  Status StartSequence(SequenceId id, SequenceOptions options,
                       const std::optional<CachedPrefix>& prefix = std::nullopt);
  // Frees the sequence's KV stores (nothing if it does not exist). When no sequence is left the
  // step buffers are freed too.
  void EndSequence(SequenceId id);
  // The prefix cache's entries on this rank (every rank keeps its share of the same ones):
  // KeepSequence ends running sequence `id` but keeps its KV under the same id, for later
  // sequences to start from; DemoteCached moves one to the host tier (SequenceTable::Demote);
  // DropCached frees one in either tier (nothing if it does not exist).
  Status KeepSequence(SequenceId id);
  Status DemoteCached(SequenceId id);
  // Moves a cached sequence's selected layers between the host tier and the device
  // (SequenceTable::RelayoutCached): `host_layers` (-1: all) of them in the host tier.
  Status RelayoutCached(SequenceId id, int64_t host_layers) {
    return sequences_.RelayoutCached(id, host_layers);
  }
  // The disk tier (SequenceTable::Spill): moves a cached sequence there, written with `meta`.
  Status SpillCached(SequenceId id, DiskEntryMeta meta) {
    graphs_.Clear();
    return sequences_.Spill(id, std::move(meta));
  }
  // Moves a disk-tier entry up to the host tier in the background (SequenceTable::Promote,
  // CollectPromotions).
  void PromoteCached(SequenceId id) { sequences_.Promote(id); }
  SequenceTable::Promotions CollectPromotions() { return sequences_.CollectPromotions(); }
  void AttachDiskTier(std::unique_ptr<DiskTier> disk) {
    sequences_.AttachDiskTier(std::move(disk));
  }
  DiskTier* disk_tier() const { return sequences_.disk_tier(); }
  int64_t CachedDiskBytes() const { return sequences_.CachedDiskBytes(); }
  SequenceTable::CacheSeconds cache_seconds() const { return sequences_.cache_seconds(); }
  void DropCached(SequenceId id);
  const Sequence* cached_sequence(SequenceId id) const { return sequences_.FindCached(id); }
  int64_t num_cached() const { return sequences_.num_cached(); }
  // Bytes the cached sequences hold on this rank (both tiers), and in the host tier.
  int64_t CachedKvBytes() const { return sequences_.CachedKvBytes(); }
  int64_t CachedHostKvBytes() const { return sequences_.CachedHostKvBytes(); }
  // The sequence, or null.
  const Sequence* sequence(SequenceId id) const;
  int64_t num_sequences() const { return sequences_.size(); }
  // Bytes held by every sequence's KV stores on this rank (both tiers), and in the host tier.
  int64_t KvBytes() const { return sequences_.KvBytes(); }
  int64_t SharedKvBytes() const { return sequences_.SharedKvBytes(); }
  int64_t HostKvBytes() const { return sequences_.HostKvBytes(); }
  // Bytes the sparse prefill's shared buffers hold now (sparse_prefill_scratch.h).
  int64_t SparsePrefillScratchBytes() const { return ctx_.workspace->sparse.NumBytes(); }
  // The plan StartSequence checks, for this rank (ring rows: the widest rank's step).
  StatusOr<SequenceMemoryPlan> PlanSequence(const SequenceOptions& options,
                                            int64_t ring_rows) const {
    return sequences_.Plan(options, ring_rows);
  }
  // The most positions this rank could hold in one dense sequence if the engine were empty.
  StatusOr<int64_t> MaxSequencePositionsNow() { return sequences_.MaxPositionsNow(); }

  // ---- Steps ----
  // Runs one step plan, called by every rank at once with the same entries (see step_plan.h).
  // Each rank's share is checked first and the outcome exchanged, so one rank's bad input fails
  // the step on every rank before any collective. `after_layer`, when set and the plan has a
  // prefill entry, is called on every rank after each layer; if it returns false on any rank the
  // step stops on every rank with Cancelled (the answers combined by a host all-gather per
  // layer). A step that fails or is cancelled commits nothing: the sequences keep their length
  // and positions (rows the step wrote past them are overwritten by the next step).
  StatusOr<StepOutput> RunStep(const StepPlan& plan, const LayerCallback& after_layer = {});

  // For decode benchmarks: starts sequence `id` (not running yet; every rank at once) whose first
  // `length` positions are already in the cache — placed over the ranks as ShardPlan places a
  // prompt, K and V set to zero (what a decode step costs does not depend on the values) — with
  // room for `decode_positions` more, and for `more_prompt` more prompt positions (a follow-up
  // question's, placed as ShardedPrefill places a step) on top. Skips the prefill that would make
  // a real cache of that length.
  Status StartSyntheticSequence(SequenceId id, int64_t length, int64_t decode_positions,
                                int64_t more_prompt = 0);

 private:
  Engine() = default;
  Sequence* mutable_sequence(SequenceId id) { return sequences_.FindMutable(id); }

  EngineContext ctx_;
  SequenceTable sequences_{ctx_};
  LayerLoop loop_{ctx_};
  StepPreparer preparer_{ctx_, sequences_};
  DecodeGraphRunner graphs_{ctx_, loop_};
  AttentionPolicy policy_;
};

}  // namespace millipede
