// The service's Prometheus metrics: names (prefix millipede_, vLLM's meanings so dashboards port),
// buckets and the /metrics endpoint, behind calls the coordinator makes as jobs move. No label
// carries a per-job value. The coordinator is the one scrape target: workers' numbers arrive over
// MPI and are recorded here with UpdateRank.
//
// Thread-safe. This header compiles without prometheus-cpp (the registry lives in the .cc).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace millipede {

// One worker rank's counters, cumulative since the worker started (except the KV gauges).
struct RankStats {
  int rank = 0;              // worker rank (1..N in the MPMD launch)
  int64_t kv_bytes_gpu = 0;  // KV cache bytes held now, by tier
  int64_t kv_bytes_host = 0;
  double attention_s = 0;  // time in attention kernels
  double comm_s = 0;       // time waiting for the data plane (ring transfers, merges)
  int64_t comm_bytes = 0;  // bytes sent over the data plane
  // Of the KV bytes, those the prefix cache's entries hold (not in kv_bytes_*), by tier.
  int64_t cache_bytes_gpu = 0;
  int64_t cache_bytes_host = 0;
  int64_t cache_bytes_disk = 0;  // of the disk tier's entries (files and those being written)
  // Seconds moving cache entries, cumulative: saved to host memory, written to disk, restored.
  double cache_save_s = 0, cache_write_s = 0, cache_load_s = 0;
};

// The prefix cache's numbers on the coordinator (counters cumulative since the start).
struct PrefixCacheCounts {
  int64_t hit_tokens = 0;   // prompt tokens whose KV came from the cache
  int64_t miss_tokens = 0;  // prompt tokens of jobs that looked the cache up, not found there
  int64_t entries = 0;             // in every tier
  int64_t reserved_positions = 0;  // KV positions the device-tier entries hold on the busiest rank
  int64_t evictions = 0;           // entries dropped
  int64_t host_entries = 0;        // entries in the workers' host memory
  int64_t demotions = 0;           // entries moved from KV memory to host memory
  int64_t host_hits = 0;           // jobs that started from a host-tier entry
  int64_t disk_entries = 0;        // entries on the workers' disks
  int64_t spills = 0;              // entries moved to disk
  int64_t disk_hits = 0;           // jobs that started from a disk-tier entry
  int64_t prefix_waits = 0;        // jobs that waited for another job's prefix to be cached
  int64_t promotions = 0;          // entries moved from disk to host memory for a hit
  int64_t shared_starts = 0;       // jobs that started mapping an entry's blocks, not copying
};

class ServiceMetrics {
 public:
  // Serves /metrics on `bind_address` ("HOST:PORT"; port 0 picks a free one).
  static StatusOr<std::unique_ptr<ServiceMetrics>> Create(const std::string& bind_address);
  virtual ~ServiceMetrics() = default;
  // "http://HOST:PORT/metrics" with the port actually bound.
  virtual std::string url() const = 0;

  // requests_waiting +1.
  virtual void JobQueued() = 0;
  // requests_waiting -1, requests_running +1, queue_time_seconds observed.
  virtual void JobStarted(double queue_s) = 0;
  // prompt_tokens_total += tokens (a prefill chunk committed).
  virtual void PromptTokens(int64_t tokens) = 0;
  // prefill_progress_ratio (0..1): the prefilled fraction of the longest prompt in prefill (0
  // when none is).
  virtual void PrefillProgress(double ratio) = 0;
  // One engine step: batch_size (decode tokens) and prefill_chunk_tokens (prompt tokens).
  virtual void StepRun(int64_t decode_tokens, int64_t prefill_tokens) = 0;
  // decode_batch_size{decode=strategy}: in one engine step, `jobs` jobs (> 0) of decode strategy
  // `strategy` (DecodeStrategyName) decoded together.
  virtual void DecodeBatch(std::string_view strategy, int64_t jobs) = 0;
  // A step that decoded tokens took `seconds` (from its plan sent to its results back):
  // decode_step_seconds observed; itl_target_misses_total +1 when `target_s` > 0 and it took
  // longer; decode_prefill_wait_seconds_total += `prefill_wait_s`, the part of the step its
  // prefill chunks are estimated to have taken (the decode tokens waited that long for them).
  virtual void DecodeStep(double seconds, double target_s, double prefill_wait_s) = 0;
  // prefill_work_bound_pairs: the prefill work per rank the inter-token latency target allows the
  // next step (0: no bound from the target).
  virtual void PrefillWorkBound(int64_t pairs) = 0;
  // kv_reserved_positions: what the running jobs reserve on the busiest rank.
  virtual void KvReserved(int64_t positions) = 0;
  // A started job goes back to the queue because the workers' memory plan refused it:
  // requests_running -1, requests_waiting +1.
  virtual void JobRequeued() = 0;
  // kv_admission_waits_total += jobs: jobs that began waiting for KV to be freed (each job is
  // counted once, StepScheduler::jobs_waited_for_kv).
  virtual void KvAdmissionWaits(int64_t jobs) = 0;
  // time_to_first_token_seconds, prefill throughput (prompt tokens / prefill seconds).
  virtual void FirstToken(double ttft_s, double prefill_tokens_per_s) = 0;
  // prefill_attention_density: the share of the causal query-key pairs a job's prefill attention
  // computed (1 for dense attention), observed once per job at its first token.
  virtual void PrefillDensity(double density) = 0;
  // generation_tokens_total +1 and time_per_output_token_seconds (0 for the first token: not
  // observed).
  virtual void OutputToken(double since_previous_s) = 0;
  // requests_running -1 (if it had started; requests_waiting -1 if it had not),
  // request_finished_total{reason} with reason stop|length|cancelled|error,
  // e2e_request_latency_seconds, decode throughput of the job.
  virtual void JobFinished(std::string_view reason, bool started, double e2e_s,
                           double decode_tokens_per_s) = 0;
  // request_errors_total{reason}: a refused request, on any front end (reason: invalid |
  // too_long (the prompt and its tokens exceed the context or the KV budget) | too_large (the
  // body exceeds the front end's limit) | unsupported (a parameter or feature the service does
  // not implement) | unauthorized | not_found (route or model) | method_not_allowed |
  // unsupported_media_type | queue_full | draining | unavailable (a worker is silent)), or a
  // failed job (reason: worker | internal).
  // Another reason is counted as "other".
  virtual void RequestError(std::string_view reason) = 0;
  // kv_cache_bytes{tier,rank}, prefix_cache_bytes{tier,rank}, attention/communication seconds
  // and bytes per rank.
  virtual void UpdateRank(const RankStats& stats) = 0;
  // prefix_cache_hit_tokens_total, prefix_cache_miss_tokens_total, prefix_cache_entries,
  // prefix_cache_reserved_positions, prefix_cache_evictions_total, prefix_cache_host_entries,
  // prefix_cache_demotions_total, prefix_cache_host_hits_total, prefix_cache_disk_entries,
  // prefix_cache_spills_total, prefix_cache_disk_hits_total, prefix_cache_waits_total,
  // prefix_cache_promotions_total, prefix_cache_shared_starts_total.
  virtual void PrefixCache(const PrefixCacheCounts& counts) = 0;
};

}  // namespace millipede
