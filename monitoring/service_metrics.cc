// ServiceMetrics on prometheus-cpp: one Registry exposed by one Exposer (civetweb) at /metrics.
#include "monitoring/service_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "monitoring/metric_buckets.h"

namespace millipede {
namespace {

using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;
using prometheus::Histogram;

// Label values are fixed sets so that no label carries a per-job or client-chosen value.
const char* const kFinishReasons[] = {"stop", "length", "cancelled", "error"};
const char* const kErrorReasons[] = {"invalid",
                                     "too_long",
                                     "too_large",
                                     "unsupported",
                                     "unauthorized",
                                     "not_found",
                                     "method_not_allowed",
                                     "unsupported_media_type",
                                     "queue_full",
                                     "draining",
                                     "unavailable",
                                     "worker",
                                     "internal"};
// Ranks beyond this are refused (a bound on the number of label values).
constexpr int kMaxRank = 4096;

// Splits "HOST:PORT" (HOST may be "[v6]") and checks the port; returns the port or -1.
int ParsePort(const std::string& bind_address) {
  size_t colon = bind_address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == bind_address.size()) return -1;
  std::string port = bind_address.substr(colon + 1);
  if (port.size() > 5 || !std::all_of(port.begin(), port.end(), ::isdigit)) return -1;
  int value = std::atoi(port.c_str());
  return value <= 65535 ? value : -1;
}

// Adds the cumulative `value` to `counter`, which holds the previous cumulative value: counters
// only go up, so a smaller value (a restarted worker) starts counting again from it.
void AdvanceCounter(Counter* counter, double value) {
  double previous = counter->Value();
  counter->Increment(value >= previous ? value - previous : value);
}

class PrometheusServiceMetrics final : public ServiceMetrics {
 public:
  PrometheusServiceMetrics(std::unique_ptr<prometheus::Exposer> exposer, std::string host)
      : registry_(std::make_shared<prometheus::Registry>()),
        exposer_(std::move(exposer)),
        host_(std::move(host)) {
    auto histogram = [&](const char* name, const char* help,
                         const std::vector<double>& buckets) -> Histogram& {
      return prometheus::BuildHistogram()
          .Name(name)
          .Help(help)
          .Register(*registry_)
          .Add({}, buckets);
    };
    ttft_ = &histogram("millipede_time_to_first_token_seconds",
                       "Seconds from submission to the first generated token.", TtftBuckets());
    tpot_ = &histogram("millipede_time_per_output_token_seconds",
                       "Seconds between consecutive generated tokens of a job.", TpotBuckets());
    e2e_ = &histogram("millipede_e2e_request_latency_seconds",
                      "Seconds from submission to the end of a job (any reason).",
                      RequestLatencyBuckets());
    queue_ = &histogram("millipede_queue_time_seconds",
                        "Seconds a job waited in the queue before its prefill started.",
                        RequestLatencyBuckets());
    prefill_tput_ =
        &histogram("millipede_prefill_throughput_tokens_per_second",
                   "Per job: prompt tokens divided by prefill seconds.", ThroughputBuckets());
    decode_tput_ =
        &histogram("millipede_decode_throughput_tokens_per_second",
                   "Per job: generated tokens per second of decode.", ThroughputBuckets());
    prefill_density_ = &histogram(
        "millipede_prefill_attention_density",
        "Per job: the share of the causal query-key pairs its prefill attention computed "
        "(1 for dense attention; sparse and A-shape heads compute fewer).",
        {0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.99, 1});
    batch_size_ = &histogram("millipede_batch_size",
                             "Per engine step: decode tokens (jobs decoding together).",
                             {1, 2, 4, 8, 16, 32, 64, 128, 256, 512});
    chunk_tokens_ =
        &histogram("millipede_prefill_chunk_tokens", "Per engine step: prompt tokens prefilled.",
                   {0, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576});
    decode_batch_family_ = &prometheus::BuildHistogram()
                                .Name("millipede_decode_batch_size")
                                .Help(
                                    "Per engine step and decode strategy of the jobs' policies "
                                    "(full, omnikv, static-eviction, duoattention): the jobs of "
                                    "that strategy decoding together.")
                                .Register(*registry_);
    decode_step_s_ = &histogram(
        "millipede_decode_step_seconds",
        "Per engine step that decoded tokens: seconds from its plan sent to its results back (the "
        "inter-token latency it gave its jobs).",
        TpotBuckets());

    auto counter = [&](const char* name, const char* help) -> Family<Counter>& {
      return prometheus::BuildCounter().Name(name).Help(help).Register(*registry_);
    };
    prompt_tokens_ = &counter("millipede_prompt_tokens_total", "Prompt tokens prefilled.").Add({});
    generation_tokens_ = &counter("millipede_generation_tokens_total", "Tokens generated.").Add({});
    auto& finished = counter("millipede_request_finished_total",
                             "Jobs that ended, by reason (stop, length, cancelled, error).");
    for (const char* reason : kFinishReasons)
      finished_[reason] = &finished.Add({{"reason", reason}});
    auto& errors = counter("millipede_request_errors_total",
                           "Refused requests, on every front end (invalid, too_long, too_large, "
                           "unsupported, unauthorized, not_found, method_not_allowed, "
                           "unsupported_media_type, queue_full, draining, unavailable), and "
                           "failed jobs (worker, internal).");
    for (const char* reason : kErrorReasons) errors_[reason] = &errors.Add({{"reason", reason}});
    other_finished_ = &finished.Add({{"reason", "other"}});
    other_error_ = &errors.Add({{"reason", "other"}});
    attention_s_ = &counter("millipede_attention_seconds_total",
                            "Seconds each worker rank spent in attention kernels.");
    comm_s_ = &counter("millipede_communication_seconds_total",
                       "Seconds each worker rank waited on the data plane.");
    comm_bytes_ = &counter("millipede_communication_bytes_total",
                           "Bytes each worker rank sent over the data plane.");
    itl_misses_ = &counter("millipede_itl_target_misses_total",
                           "Engine steps that decoded tokens and took longer than the inter-token "
                           "latency target (--itl-target-ms).")
                       .Add({});
    prefill_wait_s_ = &counter("millipede_decode_prefill_wait_seconds_total",
                               "Seconds decode tokens waited for the prefill chunks of their step "
                               "(the step's time beyond the step time model's estimate of a "
                               "decode-only step).")
                           .Add({});
    kv_waits_ = &counter("millipede_kv_admission_waits_total",
                         "Jobs that had to wait for running jobs to free KV before they could "
                         "start (the running jobs' reservations left no room, or the workers' "
                         "memory plan refused the start); each job counted once.")
                     .Add({});

    auto gauge = [&](const char* name, const char* help) -> Family<Gauge>& {
      return prometheus::BuildGauge().Name(name).Help(help).Register(*registry_);
    };
    running_ = &gauge("millipede_requests_running", "Jobs in prefill or decode.").Add({});
    waiting_ = &gauge("millipede_requests_waiting", "Jobs queued, not started.").Add({});
    progress_ = &gauge("millipede_prefill_progress_ratio",
                       "Prefilled fraction (0..1) of the longest prompt in prefill.")
                     .Add({});
    kv_bytes_ = &gauge("millipede_kv_cache_bytes", "KV cache bytes held, by tier and rank.");
    kv_reserved_ = &gauge("millipede_kv_reserved_positions",
                          "KV positions the running jobs reserve on the busiest worker rank.")
                        .Add({});
    work_bound_ = &gauge("millipede_prefill_work_bound_pairs",
                         "The prefill attention work per worker rank, in (query, key) pairs, that "
                         "the inter-token latency target allows the next step (0: no bound from "
                         "the target).")
                       .Add({});
    cache_bytes_ = &gauge("millipede_prefix_cache_bytes",
                          "KV bytes the prefix cache's entries hold, by tier and rank.");
    cache_seconds_ = &counter("millipede_prefix_cache_seconds_total",
                              "Seconds each worker spent moving prefix-cache entries: saving them "
                              "to host memory (op save, in its steps), writing them to disk (op "
                              "write, on a thread of its own), restoring jobs from either (op load).");
    cache_entries_ = &gauge("millipede_prefix_cache_entries",
                            "Ended jobs' KV kept for later prompts that start with their tokens.")
                          .Add({});
    cache_reserved_ = &gauge("millipede_prefix_cache_reserved_positions",
                             "KV positions the prefix cache's entries hold on the busiest worker "
                             "rank (part of kv_reserved_positions' budget, reclaimed for jobs).")
                           .Add({});
    cache_hits_ = &counter("millipede_prefix_cache_hit_tokens_total",
                           "Prompt tokens whose KV came from the prefix cache (not prefilled).")
                       .Add({});
    cache_misses_ = &counter("millipede_prefix_cache_miss_tokens_total",
                             "Prompt tokens of jobs that looked the prefix cache up and were "
                             "prefilled.")
                         .Add({});
    cache_evictions_ = &counter("millipede_prefix_cache_evictions_total",
                                "Prefix-cache entries dropped to make room for jobs.")
                           .Add({});
    cache_host_entries_ = &gauge("millipede_prefix_cache_host_entries",
                                 "Prefix-cache entries in the workers' host memory (the host "
                                 "tier; counted in prefix_cache_entries too).")
                               .Add({});
    cache_demotions_ = &counter("millipede_prefix_cache_demotions_total",
                                "Prefix-cache entries moved from the workers' KV memory to their "
                                "host memory to make room for jobs.")
                           .Add({});
    cache_host_hits_ = &counter("millipede_prefix_cache_host_hits_total",
                                "Jobs that started from a prefix-cache entry in host memory (its "
                                "KV copied back).")
                           .Add({});
    cache_disk_entries_ = &gauge("millipede_prefix_cache_disk_entries",
                                 "Prefix-cache entries on the workers' local disks (the disk tier; "
                                 "counted in prefix_cache_entries too).")
                               .Add({});
    cache_spills_ = &counter("millipede_prefix_cache_spills_total",
                             "Prefix-cache entries written to the workers' disks to make room.")
                        .Add({});
    cache_disk_hits_ = &counter("millipede_prefix_cache_disk_hits_total",
                                "Jobs that started from a prefix-cache entry on disk (its KV read "
                                "back and checked).")
                           .Add({});

    cache_waits_ = &counter("millipede_prefix_cache_waits_total",
                            "Jobs that waited for a queued or running job sharing their prompt's "
                            "start, to start from its KV instead of prefilling it beside it.")
                        .Add({});

    cache_promotions_ = &counter("millipede_prefix_cache_promotions_total",
                                 "Prefix-cache entries read back from the workers' disks into "
                                 "their host memory for a hit (in the background; the jobs "
                                 "wait).")
                             .Add({});
    cache_shared_starts_ = &counter("millipede_prefix_cache_shared_starts_total",
                                    "Jobs that started from a prefix-cache entry in the workers' "
                                    "KV memory by sharing its blocks (mapped, not copied).")
                                .Add({});

    exposer_->RegisterCollectable(registry_);
  }

  std::string url() const override {
    std::vector<int> ports = exposer_->GetListeningPorts();
    int port = ports.empty() ? 0 : ports.front();
    return "http://" + host_ + ":" + std::to_string(port) + "/metrics";
  }

  void JobQueued() override { waiting_->Increment(); }

  void JobStarted(double queue_s) override {
    waiting_->Decrement();
    running_->Increment();
    queue_->Observe(queue_s);
  }

  void PromptTokens(int64_t tokens) override {
    if (tokens > 0) prompt_tokens_->Increment(static_cast<double>(tokens));
  }

  void PrefillProgress(double ratio) override { progress_->Set(std::clamp(ratio, 0.0, 1.0)); }

  void StepRun(int64_t decode_tokens, int64_t prefill_tokens) override {
    if (decode_tokens > 0) batch_size_->Observe(static_cast<double>(decode_tokens));
    chunk_tokens_->Observe(static_cast<double>(prefill_tokens));
  }

  void DecodeBatch(std::string_view strategy, int64_t jobs) override {
    if (jobs <= 0) return;
    Histogram* h = nullptr;
    {
      // A series per strategy, added when first seen (the strategies are a handful of names).
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = decode_batch_.find(std::string(strategy));
      if (it == decode_batch_.end()) {
        if (decode_batch_.size() >= kMaxDecodeStrategies) return;
        it = decode_batch_
                 .emplace(std::string(strategy),
                          &decode_batch_family_->Add(
                              {{"decode", std::string(strategy)}},
                              Histogram::BucketBoundaries{1, 2, 4, 8, 16, 32, 64, 128, 256, 512}))
                 .first;
      }
      h = it->second;
    }
    h->Observe(static_cast<double>(jobs));
  }

  void DecodeStep(double seconds, double target_s, double prefill_wait_s) override {
    decode_step_s_->Observe(seconds);
    if (target_s > 0 && seconds > target_s) itl_misses_->Increment();
    if (prefill_wait_s > 0) prefill_wait_s_->Increment(prefill_wait_s);
  }

  void PrefillWorkBound(int64_t pairs) override {
    work_bound_->Set(static_cast<double>(std::max<int64_t>(0, pairs)));
  }

  void KvReserved(int64_t positions) override { kv_reserved_->Set(static_cast<double>(positions)); }

  void JobRequeued() override {
    running_->Decrement();
    waiting_->Increment();
  }

  void KvAdmissionWaits(int64_t jobs) override {
    if (jobs > 0) kv_waits_->Increment(static_cast<double>(jobs));
  }

  void FirstToken(double ttft_s, double prefill_tokens_per_s) override {
    ttft_->Observe(ttft_s);
    if (prefill_tokens_per_s > 0) prefill_tput_->Observe(prefill_tokens_per_s);
  }

  void PrefillDensity(double density) override { prefill_density_->Observe(density); }

  void OutputToken(double since_previous_s) override {
    generation_tokens_->Increment();
    if (since_previous_s > 0) tpot_->Observe(since_previous_s);
  }

  void JobFinished(std::string_view reason, bool started, double e2e_s,
                   double decode_tokens_per_s) override {
    (started ? running_ : waiting_)->Decrement();
    auto it = finished_.find(std::string(reason));
    (it == finished_.end() ? other_finished_ : it->second)->Increment();
    e2e_->Observe(e2e_s);
    if (decode_tokens_per_s > 0) decode_tput_->Observe(decode_tokens_per_s);
  }

  void RequestError(std::string_view reason) override {
    auto it = errors_.find(std::string(reason));
    (it == errors_.end() ? other_error_ : it->second)->Increment();
  }

  void UpdateRank(const RankStats& stats) override {
    if (stats.rank < 0 || stats.rank > kMaxRank) return;
    std::lock_guard<std::mutex> lock(mutex_);
    RankSeries& series = RankSeriesLocked(stats.rank);
    series.kv_gpu->Set(static_cast<double>(stats.kv_bytes_gpu));
    series.kv_host->Set(static_cast<double>(stats.kv_bytes_host));
    AdvanceCounter(series.attention_s, stats.attention_s);
    AdvanceCounter(series.comm_s, stats.comm_s);
    AdvanceCounter(series.comm_bytes, static_cast<double>(stats.comm_bytes));
    series.cache_gpu->Set(static_cast<double>(stats.cache_bytes_gpu));
    series.cache_host->Set(static_cast<double>(stats.cache_bytes_host));
    series.cache_disk->Set(static_cast<double>(stats.cache_bytes_disk));
    AdvanceCounter(series.cache_save_s, stats.cache_save_s);
    AdvanceCounter(series.cache_write_s, stats.cache_write_s);
    AdvanceCounter(series.cache_load_s, stats.cache_load_s);
  }

  void PrefixCache(const PrefixCacheCounts& c) override {
    std::lock_guard<std::mutex> lock(mutex_);
    AdvanceCounter(cache_hits_, static_cast<double>(c.hit_tokens));
    AdvanceCounter(cache_misses_, static_cast<double>(c.miss_tokens));
    AdvanceCounter(cache_evictions_, static_cast<double>(c.evictions));
    AdvanceCounter(cache_demotions_, static_cast<double>(c.demotions));
    AdvanceCounter(cache_host_hits_, static_cast<double>(c.host_hits));
    AdvanceCounter(cache_spills_, static_cast<double>(c.spills));
    AdvanceCounter(cache_disk_hits_, static_cast<double>(c.disk_hits));
    AdvanceCounter(cache_waits_, static_cast<double>(c.prefix_waits));
    AdvanceCounter(cache_promotions_, static_cast<double>(c.promotions));
    AdvanceCounter(cache_shared_starts_, static_cast<double>(c.shared_starts));
    cache_disk_entries_->Set(static_cast<double>(c.disk_entries));
    cache_entries_->Set(static_cast<double>(c.entries));
    cache_host_entries_->Set(static_cast<double>(c.host_entries));
    cache_reserved_->Set(static_cast<double>(c.reserved_positions));
  }

 private:
  struct RankSeries {
    Gauge* kv_gpu;
    Gauge* kv_host;
    Counter* attention_s;
    Counter* comm_s;
    Counter* comm_bytes;
    Gauge* cache_gpu;
    Gauge* cache_host;
    Gauge* cache_disk;
    Counter* cache_save_s;
    Counter* cache_write_s;
    Counter* cache_load_s;
  };

  RankSeries& RankSeriesLocked(int rank) {
    auto it = ranks_.find(rank);
    if (it != ranks_.end()) return it->second;
    std::string r = std::to_string(rank);
    RankSeries series{&kv_bytes_->Add({{"tier", "gpu"}, {"rank", r}}),
                      &kv_bytes_->Add({{"tier", "host"}, {"rank", r}}),
                      &attention_s_->Add({{"rank", r}}), &comm_s_->Add({{"rank", r}}),
                      &comm_bytes_->Add({{"rank", r}}),
                      &cache_bytes_->Add({{"tier", "gpu"}, {"rank", r}}),
                      &cache_bytes_->Add({{"tier", "host"}, {"rank", r}}),
                      &cache_bytes_->Add({{"tier", "disk"}, {"rank", r}}),
                      &cache_seconds_->Add({{"op", "save"}, {"rank", r}}),
                      &cache_seconds_->Add({{"op", "write"}, {"rank", r}}),
                      &cache_seconds_->Add({{"op", "load"}, {"rank", r}})};
    return ranks_.emplace(rank, series).first->second;
  }

  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::string host_;

  Histogram* ttft_;
  Histogram* tpot_;
  Histogram* e2e_;
  Histogram* queue_;
  Histogram* prefill_tput_;
  Histogram* decode_tput_;
  Histogram* prefill_density_;
  Histogram* batch_size_;
  Histogram* decode_step_s_;
  Family<Histogram>* decode_batch_family_;
  Counter* itl_misses_;
  Counter* prefill_wait_s_;
  Gauge* work_bound_;
  Histogram* chunk_tokens_;
  Counter* prompt_tokens_;
  Counter* kv_waits_;
  Counter* generation_tokens_;
  std::map<std::string, Counter*> finished_;
  std::map<std::string, Counter*> errors_;
  Counter* other_finished_;
  Counter* other_error_;
  Gauge* running_;
  Gauge* waiting_;
  Gauge* progress_;
  Gauge* kv_reserved_;
  Family<Gauge>* kv_bytes_;
  Family<Gauge>* cache_bytes_;
  Family<Counter>* cache_seconds_;
  Gauge* cache_entries_;
  Gauge* cache_reserved_;
  Counter* cache_hits_;
  Counter* cache_misses_;
  Counter* cache_evictions_;
  Gauge* cache_host_entries_;
  Counter* cache_demotions_;
  Counter* cache_host_hits_;
  Gauge* cache_disk_entries_;
  Counter* cache_spills_;
  Counter* cache_disk_hits_;
  Counter* cache_waits_;
  Counter* cache_promotions_;
  Counter* cache_shared_starts_;
  Family<Counter>* attention_s_;
  Family<Counter>* comm_s_;
  Family<Counter>* comm_bytes_;

  std::mutex mutex_;  // guards the fields below
  static constexpr size_t kMaxDecodeStrategies = 8;
  std::map<std::string, Histogram*> decode_batch_;  // by decode strategy
  std::map<int, RankSeries> ranks_;
};

}  // namespace

StatusOr<std::unique_ptr<ServiceMetrics>> ServiceMetrics::Create(const std::string& bind_address) {
  if (ParsePort(bind_address) < 0) {
    return InvalidArgumentError("metrics address must be HOST:PORT, got \"" + bind_address + "\"");
  }
  std::string host = bind_address.substr(0, bind_address.rfind(':'));
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    // civetweb throws when it cannot bind.
    exposer = std::make_unique<prometheus::Exposer>(bind_address, 2);
  } catch (const std::exception& e) {
    return IoError("cannot serve metrics on " + bind_address + ": " + e.what());
  }
  if (exposer->GetListeningPorts().empty()) {
    return IoError("cannot serve metrics on " + bind_address + ": no listening port");
  }
  return std::unique_ptr<ServiceMetrics>(
      new PrometheusServiceMetrics(std::move(exposer), std::move(host)));
}

}  // namespace millipede
