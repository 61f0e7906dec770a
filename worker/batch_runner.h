// Many jobs on one engine, step by step: the engine's one driver, run by the service's workers
// (continuous batching, worker/control/worker_loop.h) and, with one job, by Generate (offline
// runs, generate.h), so the stop rules, the sampling rank and the draws' broadcast are written
// once, here. Each job is a sequence of the engine with its own sampler (penalty history, seed)
// and stop rules; a step plan (control/messages.h) frees finished or cancelled jobs, starts new
// ones (the ranks' memory plans checked together; a job may start from a prefix-cache entry,
// and a job that ends may leave its KV as one), and runs the prefill chunks and decode tokens
// of many jobs in one Engine::RunStep; then each job whose prompt is complete, or that decoded,
// samples its next token on one rank (a decode token's on rank 0, a prompt's first on the rank
// holding its last position) and every rank learns it, so the ranks keep the same jobs in the
// same state.
//
// Every rank of the engine's communicator calls Run with the same plans in the same order. A
// job's failure (its start refused, its entry malformed, its draw failed) fails that job on
// every rank and frees it; a failed engine step fails every job in it; a step cancelled inside
// (the after_layer callback) commits nothing and changes no job.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "control/messages.h"
#include "worker/engine/engine.h"
#include "worker/token_sampler.h"

namespace millipede {

class BatchRunner {
 public:
  explicit BatchRunner(Engine& engine) : engine_(engine) {}
  // Frees every job's sequence.
  ~BatchRunner();
  BatchRunner(const BatchRunner&) = delete;
  BatchRunner& operator=(const BatchRunner&) = delete;

  // Runs one step plan (see the file comment). The result lists every job the step touched;
  // its status_code is kCancelled when after_layer stopped the step. An error return means this
  // rank could not keep in step with the others (a broken exchange): the caller must stop.
  StatusOr<control::StepDone> Run(const control::StepPlan& plan,
                                  const LayerCallback& after_layer = {});

  // Jobs holding a sequence now.
  int64_t running() const { return static_cast<int64_t>(jobs_.size()); }
  // A running job's prompt length (0 for another id).
  int64_t PromptTokens(uint64_t job_id) const;

 private:
  struct Job {
    control::JobDescriptor descriptor;
    std::unique_ptr<TokenSampler> sampler;
    int64_t generated = 0;
    int32_t last_token = 0;
    bool keep = false;  // its KV becomes a prefix-cache entry when it ends (StepStart::keep)
  };
  // An entry that made it into the engine's plan.
  struct Planned {
    const control::StepEntry* entry;
    Job* job;
  };

  Status Start(const control::StepStart& start);
  Status StartJob(const control::StepStart& start);
  void End(uint64_t job_id);
  // Ends the job, its KV kept as prefix-cache entry `job_id` (Engine::KeepSequence).
  void Keep(uint64_t job_id);
  // Moves cache entry `id` to the host tier; one that cannot be saved is freed (a later start
  // from it fails on every rank and runs uncached).
  void Demote(uint64_t id);
  // Moves cache entry `spill.entry` to the disk tier; one that cannot be is freed.
  void Spill(const control::CacheEntryFacts& spill);
  // This rank's share of an entry, or why the job cannot run it.
  StatusOr<SequenceStep> ShareOf(const control::StepEntry& entry, const Job& job) const;
  // The rank that samples after `entry`, or -1 when it samples nothing (a prompt not finished).
  StatusOr<int> SamplingRank(const control::StepEntry& entry, const Job& job) const;
  // Samples every entry that ends with a token, shares the draws, and records them.
  Status SampleAll(const std::vector<Planned>& planned, const StepOutput& output,
                   control::StepDone* done);
  // Records a token every rank now has: history, stop rules, the result; frees a finished job.
  void Accept(Job& job, uint64_t job_id, const SampledToken& token, control::StepDone* done);

  Engine& engine_;
  std::map<uint64_t, Job> jobs_;
};

}  // namespace millipede
