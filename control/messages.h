// The control plane's messages between the coordinator (world rank 0) and the workers (world
// ranks 1..N), each sent as one MPI message of bytes on MPI_COMM_WORLD with its own tag.
//
// Protocol:
//  - at start every worker sends kHello (its engine came up, or why not); the coordinator waits
//    for all of them before serving;
//  - the coordinator runs the engine step by step: it sends kStep (a StepPlan: sequences to free,
//    jobs to start with their descriptors, and the entries to run — prefill chunks and decode
//    tokens of many jobs) to every worker and waits for the leader's kStepDone before it plans
//    the next one; kCancel goes to the worker leader (world rank 1) only, to stop the step in
//    flight when it holds a prefill chunk of a cancelled job; kPing to every worker about once
//    a second (liveness), kShutdown to every worker to stop after a drain (all ranks then
//    finalize MPI), kAbort when it is about to fail (the workers exit at once without
//    finalizing);
//  - the worker leader sends kProgress after each layer of a step with prefill chunks, and
//    kStepDone with each job's outcome (its chunk done, the token it sampled, finished, failed);
//  - every worker sends kStats about twice a second while idle, now and then during a step and
//    after each step (the numbers for the metrics), and kHeartbeat (no payload) every half second
//    from a thread of its own, whatever its main thread is doing: the coordinator's liveness
//    check (a worker silent past the timeout is dead) does not depend on compute progress.
// A cancel inside a step is decided by the leader alone and agreed by the workers over their own
// communicator (the engine's per-layer agreement), so every rank stops at the same layer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/sampling_params.h"
#include "common/status.h"
#include "policy/attention_policy.h"

namespace millipede::control {

constexpr int kCoordinatorRank = 0;
constexpr int kLeaderRank = 1;

enum Tag : int {
  kTagStep = 101,
  kTagCancel = 102,
  kTagShutdown = 103,
  kTagPing = 104,
  kTagAbort = 105,
  kTagHello = 201,
  kTagProgress = 202,
  kTagStats = 203,
  kTagStepDone = 204,
  kTagHeartbeat = 205,
};

// A job as the workers run it: already tokenized and validated by the coordinator, its attention
// policy parsed and checked there (the workers read no JSON).
struct JobDescriptor {
  uint64_t job_id = 0;
  std::vector<int32_t> prompt_ids;
  int64_t max_new_tokens = 0;
  SamplingParams sampling;
  std::vector<int32_t> stop_ids;
  bool ignore_eos = false;
  // This job's attention policy; none: the workers' own (their --policy file, or dense).
  std::optional<AttentionPolicy> policy;
};

struct JobCancel {
  uint64_t job_id = 0;
};

// What a worker tells the coordinator once its engine is up (or failed to come up).
// A prefix-cache entry in a worker's disk tier: what a worker writes with its KV (StepPlan::
// spills) and what it reports of the entries it found at start (WorkerHello::disk_entries), for
// the coordinator to index them again.
struct CacheEntryFacts {
  uint64_t entry = 0;
  uint64_t key = 0;        // PrefixKey of what changes its KV
  std::string model_key;   // the coordinator's model key
  std::vector<int32_t> tokens;  // reusable
  bool every_length = true;     // reusable at every length, else at `lengths`
  std::vector<int64_t> lengths;
  // In a hello: the entry's length and the positions this rank holds, as [begin, end) pairs.
  int64_t length = 0;
  std::vector<int64_t> stored;
};

struct WorkerHello {
  int32_t rank = 0;
  int32_t status_code = 0;  // a StatusCode; non-zero: the engine failed, `error` says why
  std::string error;
  int64_t vocab_size = 0;
  int64_t max_context = 0;
  // Positions this rank's KV budget holds for one job.
  int64_t kv_capacity_tokens = 0;
  std::vector<int32_t> eos_ids;
  std::string backend;  // "cpu" or "cuda", for the logs (what it runs is `capabilities`)
  // The model's shape and the attention this rank's engine runs, for checking attention policies
  // at admission.
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;
  PolicyCapabilities capabilities;
  // The policy of jobs that bring none (the workers' --policy file, or dense), and the KV dtype
  // ("f32", "bf16", ...): what the prefix cache keys a job's KV by.
  AttentionPolicy default_policy;
  std::string kv_dtype;
  // Whether OmniKV's selected layers may go to the host tier on this rank (--selected-kv host,
  // or auto on a GPU).
  bool selected_kv_host = false;
  // Bytes of K and V of one position over every layer in this rank's KV dtype: what the prefix
  // cache's host tier counts an entry's positions in.
  int64_t kv_position_bytes = 0;
  // The unit of the prefix cache's shared KV blocks on this rank (KvShareUnitRows; 0: its
  // backend shares none).
  int64_t kv_share_unit_rows = 0;
  // Host memory (bytes) this rank gives prefix-cache entries evicted from its KV memory
  // (--kv-cache-host-mb; 0: no host tier).
  int64_t cache_host_bytes = 0;
  // The disk tier (--kv-cache-dir): its size in bytes (0: none) and the entries found there.
  int64_t cache_disk_bytes = 0;
  std::vector<CacheEntryFacts> disk_entries;
  // What identifies this rank's weights (WeightsFingerprint): part of the prefix cache's key.
  std::string weights_fingerprint;
};

// A job starting in a step: what it runs and the KV it reserves.
struct StepStart {
  JobDescriptor job;
  // Positions this job may store on the busiest rank (its prompt share and decode share).
  int64_t capacity_per_rank = 0;
  // The most tokens one step may add on a rank (the coordinator's step budget).
  int64_t step_tokens = 0;
  // The prefix cache: when prefix_from is non-zero the job starts holding the KV of positions
  // [0, prefix_tokens) of its prompt, restored on every rank from the cache entry prefix_from
  // (each rank its own share), and its prefill continues at prefix_tokens.
  uint64_t prefix_from = 0;
  int64_t prefix_tokens = 0;
  // The job takes the entry's KV over (the entry is gone, its memory the job's, no copy)
  // rather than copying it; if that fails the workers free the entry.
  bool prefix_take = false;
  // A copy (not a take) whose whole chunks of rows the workers map from the entry rather than
  // copy (common/kv_share.h): the coordinator keeps the entry while the job runs.
  bool prefix_share = false;
  // When the workers end the job themselves (a stop id, EOS or its token budget), they keep
  // its KV as cache entry `job.job_id` rather than freeing it.
  bool keep = false;
};

enum class StepEntryKind : uint8_t { kPrefill = 1, kDecode = 2 };

// One entry of a step: positions [begin, begin + count) of the job's prompt, or its next decode
// token (begin = the sequence's length, count = 1; the token is the one the workers sampled).
struct StepEntry {
  uint64_t job_id = 0;
  StepEntryKind kind = StepEntryKind::kDecode;
  int64_t begin = 0;
  int64_t count = 1;
};

// One engine step for every worker: move the cache entries `demotes` from backend memory to
// the host tier and `spills` (from either) to the disk tier, free the cache entries `drops` (in
// either tier) and the jobs `ends`, start reading the disk-tier entries `promotes` into the host
// tier in the background (reported in WorkerStats when done), keep the jobs `keeps` as cache
// entries (each under its job id: the job ends, its KV stays), start `starts` in order, run
// `entries`.
struct StepPlan {
  uint64_t step_id = 0;
  std::vector<uint64_t> ends;
  std::vector<StepStart> starts;
  std::vector<StepEntry> entries;
  std::vector<uint64_t> drops;
  std::vector<uint64_t> keeps;
  std::vector<uint64_t> demotes;
  std::vector<CacheEntryFacts> spills;
  std::vector<uint64_t> promotes;
};

// Prefill progress of a job in the step in flight, from the worker leader after each layer.
struct JobProgress {
  uint64_t job_id = 0;
  int64_t tokens_done = 0;
  int64_t tokens_total = 0;
};

enum class StepOutcome : uint8_t {
  kPrefilled = 1,  // a prefill chunk ran; more of the prompt is to come
  kToken = 2,      // a token was sampled (after the prompt's last chunk, or a decode token)
  kFailed = 3,     // the job failed (its start was refused, or the step failed); it is freed
};

// What one step did to one job.
struct StepJobResult {
  uint64_t job_id = 0;
  StepOutcome outcome = StepOutcome::kPrefilled;
  int32_t token = 0;  // kToken
  // kToken, when the job asked for logprobs: the token's log-probability and the alternatives.
  float logprob = 0;
  std::vector<int32_t> top_ids;
  std::vector<float> top_logprobs;
  // kToken: the job ended with this token (the workers freed it): a stop or EOS id
  // (finished_by_stop) or its token budget.
  bool finished = false;
  bool finished_by_stop = false;
  int32_t status_code = 0;  // kFailed: a StatusCode
  std::string message;      // kFailed
  // A prefill entry's job (kPrefilled, or the kToken after its prompt's last chunk): the
  // query-key pairs its prefill attention computed so far over every rank, and the causal pairs
  // of the same positions (both per KV head, over every layer; attended / causal is the achieved
  // density). 0 for decode entries.
  int64_t prefill_attended_pairs = 0;
  int64_t prefill_causal_pairs = 0;
};

// The leader's report of a step. status_code kCancelled: the step stopped before committing
// anything (a cancel inside it; the jobs it started stay started, the next plan repeats the
// work); another non-zero code: the step failed and every job in it was failed and freed.
struct StepDone {
  uint64_t step_id = 0;
  int32_t status_code = 0;
  std::string message;
  std::vector<StepJobResult> jobs;
  double seconds = 0;  // the step's time on the workers
};

// One worker's counters (cumulative except the KV gauges) and its heartbeat.
struct WorkerStats {
  int32_t rank = 0;
  int64_t kv_bytes_gpu = 0;
  int64_t kv_bytes_host = 0;
  double attention_s = 0;
  double comm_s = 0;
  int64_t comm_bytes = 0;
  uint64_t steps_run = 0;
  int64_t running_jobs = 0;  // sequences holding KV
  // KV bytes the prefix cache's entries hold (not in kv_bytes_*), by tier.
  int64_t cache_bytes_gpu = 0;
  int64_t cache_bytes_host = 0;
  int64_t cache_bytes_disk = 0;
  // Seconds spent moving cache entries, cumulative: saving them to host memory, writing them to
  // disk, restoring jobs from either.
  double cache_save_s = 0, cache_write_s = 0, cache_load_s = 0;
  // Disk-tier entries this worker has read into its host tier (StepPlan::promotes) since its last
  // report, and those whose read failed (the file is removed), in order.
  std::vector<uint64_t> promoted;
  std::vector<uint64_t> promote_failed;
};

// A descriptor alone, as it travels inside a StepStart.
std::vector<char> Encode(const JobDescriptor& m);
std::vector<char> Encode(const StepPlan& m);
std::vector<char> Encode(const JobCancel& m);
std::vector<char> Encode(const WorkerHello& m);
std::vector<char> Encode(const JobProgress& m);
std::vector<char> Encode(const StepDone& m);
std::vector<char> Encode(const WorkerStats& m);

// Each fails with InvalidArgument on a truncated or oversized message or a value out of range
// (an enum, a bool); a starting job's policy must also pass ValidateAttentionPolicy for its own
// shape, its sampling parameters CheckSamplingParams, and a token's alternatives come in equal
// numbers (at most kMaxTopLogprobs).
Status Decode(const std::vector<char>& bytes, JobDescriptor* m);
Status Decode(const std::vector<char>& bytes, StepPlan* m);
Status Decode(const std::vector<char>& bytes, JobCancel* m);
Status Decode(const std::vector<char>& bytes, WorkerHello* m);
Status Decode(const std::vector<char>& bytes, JobProgress* m);
Status Decode(const std::vector<char>& bytes, StepDone* m);
Status Decode(const std::vector<char>& bytes, WorkerStats* m);

}  // namespace millipede::control
