// The control plane's messages between the coordinator (world rank 0) and the workers (world
// ranks 1..N), each sent as one MPI message of bytes on MPI_COMM_WORLD with its own tag.
//
// Protocol:
//  - at start every worker sends kHello (its engine came up, or why not); the coordinator waits
//    for all of them before serving;
//  - the coordinator sends kJob to every worker (one job at a time), kCancel to the worker leader
//    (world rank 1) only, kPing to every worker about once a second (liveness), kShutdown to
//    every worker to stop after a drain (all ranks then finalize MPI), kAbort when it is about
//    to fail (the workers exit at once without finalizing);
//  - the worker leader sends kEvent for the running job (progress, tokens, done or failed);
//  - every worker sends kStats about twice a second while idle, now and then during a job and
//    after each job: its heartbeat and the numbers for the metrics.
// Cancellation is decided by the leader alone and agreed by the workers over their own
// communicator (see worker/control/job_runner.h), so every rank stops at the same step.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/policy/attention_policy.h"
#include "common/sampling_params.h"
#include "common/status.h"

namespace millipede::control {

constexpr int kCoordinatorRank = 0;
constexpr int kLeaderRank = 1;

enum Tag : int {
  kTagJob = 101,
  kTagCancel = 102,
  kTagShutdown = 103,
  kTagPing = 104,
  kTagAbort = 105,
  kTagHello = 201,
  kTagEvent = 202,
  kTagStats = 203,
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
};

enum class JobEventKind : uint8_t { kProgress = 1, kToken = 2, kDone = 3, kFailed = 4 };

// One event of the running job, from the worker leader.
struct JobEvent {
  JobEventKind kind = JobEventKind::kProgress;
  uint64_t job_id = 0;
  int64_t tokens_done = 0;        // kProgress
  int64_t tokens_total = 0;       // kProgress
  int32_t token = 0;              // kToken
  // kToken, when the job asked for logprobs: the token's log-probability and the alternatives.
  float logprob = 0;
  std::vector<int32_t> top_ids;
  std::vector<float> top_logprobs;
  bool finished_by_stop = false;  // kDone: a stop/EOS id ended it (else the token budget)
  double ttft_s = 0;              // kDone: worker-side prefill + first sample
  double decode_s = 0;            // kDone: first to last token
  int32_t status_code = 0;        // kFailed: a StatusCode (kCancelled after a cancel)
  std::string message;            // kFailed
};

// One worker's counters (cumulative except the KV gauges) and its heartbeat.
struct WorkerStats {
  int32_t rank = 0;
  int64_t kv_bytes_gpu = 0;
  int64_t kv_bytes_host = 0;
  double attention_s = 0;
  double comm_s = 0;
  int64_t comm_bytes = 0;
  uint64_t jobs_run = 0;
  uint64_t running_job = 0;  // 0 when idle
};

std::vector<char> Encode(const JobDescriptor& m);
std::vector<char> Encode(const JobCancel& m);
std::vector<char> Encode(const WorkerHello& m);
std::vector<char> Encode(const JobEvent& m);
std::vector<char> Encode(const WorkerStats& m);

// Each fails with InvalidArgument on a truncated or oversized message or a value out of range
// (an enum, a bool); a job's policy must also pass ValidateAttentionPolicy for its own shape,
// its sampling parameters CheckSamplingParams, and a token's alternatives come in equal numbers.
Status Decode(const std::vector<char>& bytes, JobDescriptor* m);
Status Decode(const std::vector<char>& bytes, JobCancel* m);
Status Decode(const std::vector<char>& bytes, WorkerHello* m);
Status Decode(const std::vector<char>& bytes, JobEvent* m);
Status Decode(const std::vector<char>& bytes, WorkerStats* m);

}  // namespace millipede::control
