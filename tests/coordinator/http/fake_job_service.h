// A scripted JobService for front-end tests: records requests, runs each job on its own thread
// (events arrive from a service thread, as from the real scheduler), can hold a job until it is
// released or cancelled, and can refuse submissions with a given status.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "api/job_service.h"
#include "common/tokenizer/bpe_trainer.h"
#include "common/tokenizer/tokenizer.h"

namespace millipede::http_test {

// What one job does: progress to the prompt length, then one token per piece (hold_after: wait
// after that many pieces until Release or Cancel), then completes or fails.
struct FakeScript {
  std::vector<std::string> pieces;
  std::string finish_reason = "length";
  int hold_after = -1;
  std::optional<Status> fail;  // OnError with this instead of OnComplete
};

// A tokenizer trained on a small corpus, with `specials` as special added tokens.
inline std::unique_ptr<Tokenizer> MakeTestTokenizer(const std::vector<std::string>& specials) {
  auto json = TrainByteLevelBpe(
      {"Hello there, how are you? The quick brown fox.", "system user assistant helpful"}, 50,
      specials);
  if (!json.ok()) return nullptr;
  auto tokenizer = Tokenizer::FromJson(*json, "test tokenizer");
  return tokenizer.ok() ? std::move(tokenizer).value() : nullptr;
}

class FakeJobService final : public JobService {
 public:
  explicit FakeJobService(std::vector<std::string> specials = {"<|begin_of_text|>",
                                                               "<|start_header_id|>",
                                                               "<|end_header_id|>", "<|eot_id|>"})
      : tokenizer_(MakeTestTokenizer(specials)) {
    info_.id = "fake-model";
    info_.context_limit = 4096;
    info_.kv_capacity_tokens = 8192;
    info_.vocab_size = tokenizer_ ? tokenizer_->vocab_size() : 0;
    info_.num_workers = 2;
  }

  ~FakeJobService() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto& [id, job] : jobs_) job.cancelled = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  // Settings (set before the server uses them).
  ModelInfo info_;
  HealthInfo health_;

  // The next Submit returns this error (once).
  void FailNextSubmit(Status status) {
    std::lock_guard<std::mutex> lock(mutex_);
    submit_errors_.push_back(std::move(status));
  }
  // Scripts for the next jobs, in order; without one a job answers "<N>" for a prompt of N
  // tokens, one piece per character, cut to max_new_tokens.
  void QueueScript(FakeScript script) {
    std::lock_guard<std::mutex> lock(mutex_);
    scripts_.push_back(std::move(script));
  }

  StatusOr<JobId> Submit(JobRequest request, std::shared_ptr<JobObserver> observer) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!submit_errors_.empty()) {
      Status error = submit_errors_.front();
      submit_errors_.pop_front();
      return error;
    }
    const int64_t prompt =
        static_cast<int64_t>(request.prompt_ids.size()) + (request.prompt_text.empty() ? 0 : 1);
    if (prompt + request.max_new_tokens > info_.context_limit) {
      return OutOfRangeError("prompt of " + std::to_string(prompt) + " tokens plus " +
                             std::to_string(request.max_new_tokens) +
                             " new tokens exceeds the context limit of " +
                             std::to_string(info_.context_limit));
    }
    FakeScript script;
    if (!scripts_.empty()) {
      script = std::move(scripts_.front());
      scripts_.pop_front();
    } else {
      std::string answer = "<" + std::to_string(prompt) + ">";
      for (char c : answer) script.pieces.push_back(std::string(1, c));
      if (static_cast<int64_t>(script.pieces.size()) > request.max_new_tokens) {
        script.pieces.resize(static_cast<size_t>(request.max_new_tokens));
      } else {
        script.finish_reason = "stop";
      }
    }
    JobId id = next_id_++;
    jobs_[id] = Job{};
    requests_.push_back(request);
    submitted_ids_.push_back(id);
    threads_.emplace_back([this, id, prompt, script = std::move(script), observer] {
      Run(id, prompt, script, *observer);
    });
    cv_.notify_all();
    return id;
  }

  Status Cancel(JobId id) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = jobs_.find(id);
    if (it == jobs_.end() || it->second.ended) return NotFoundError("no such job");
    it->second.cancelled = true;
    cancelled_.push_back(id);
    cv_.notify_all();
    return OkStatus();
  }

  StatusOr<JobStatusInfo> GetStatus(JobId id) const override {
    return UnimplementedError("not used by the HTTP server");
  }
  ModelInfo GetModelInfo() const override { return info_; }
  HealthInfo GetHealth() const override { return health_; }
  const Tokenizer& tokenizer() const override { return *tokenizer_; }

  // Lets a held job go on.
  void Release(JobId id) {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_[id].released = true;
    cv_.notify_all();
  }

  std::vector<JobRequest> requests() {
    std::lock_guard<std::mutex> lock(mutex_);
    return requests_;
  }
  std::vector<JobId> submitted() {
    std::lock_guard<std::mutex> lock(mutex_);
    return submitted_ids_;
  }
  std::vector<JobId> cancelled() {
    std::lock_guard<std::mutex> lock(mutex_);
    return cancelled_;
  }
  // Waits until `n` jobs were submitted; false after `timeout`.
  bool WaitForSubmitted(size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock<std::mutex> lock(mutex_);
    return cv_.wait_for(lock, timeout, [&] { return submitted_ids_.size() >= n; });
  }
  // Waits until job `id` was cancelled.
  bool WaitForCancel(JobId id, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock<std::mutex> lock(mutex_);
    return cv_.wait_for(lock, timeout, [&] { return jobs_.count(id) && jobs_[id].cancelled; });
  }
  // Waits until job `id` has delivered its last event.
  bool WaitForEnd(JobId id, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock<std::mutex> lock(mutex_);
    return cv_.wait_for(lock, timeout, [&] { return jobs_.count(id) && jobs_[id].ended; });
  }

 private:
  struct Job {
    bool cancelled = false;
    bool released = false;
    bool ended = false;
  };

  void Run(JobId id, int64_t prompt, const FakeScript& script, JobObserver& observer) {
    observer.OnProgress(prompt / 2, prompt);
    observer.OnProgress(prompt, prompt);
    JobCompletion completion;
    completion.prompt_tokens = prompt;
    bool cancelled = false;
    for (size_t i = 0; i < script.pieces.size() && !cancelled; ++i) {
      if (static_cast<int>(i) == script.hold_after) cancelled = !Hold(id);
      if (cancelled) break;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        cancelled = jobs_[id].cancelled;
      }
      if (cancelled) break;
      int32_t token = static_cast<int32_t>(100 + i);
      observer.OnToken(SampledToken{token, 0.0f, {}}, script.pieces[i]);
      completion.ids.push_back(token);
      completion.text += script.pieces[i];
    }
    if (!cancelled && script.hold_after >= static_cast<int>(script.pieces.size())) {
      cancelled = !Hold(id);
    }
    if (cancelled) {
      observer.OnError(CancelledError("job cancelled"));
    } else if (script.fail) {
      observer.OnError(*script.fail);
    } else {
      completion.finish_reason = script.finish_reason;
      observer.OnComplete(completion);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_[id].ended = true;
    cv_.notify_all();
  }

  // Waits for Release (true) or Cancel (false).
  bool Hold(JobId id) {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return jobs_[id].released || jobs_[id].cancelled; });
    return !jobs_[id].cancelled;
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<JobId, Job> jobs_;
  std::deque<Status> submit_errors_;
  std::deque<FakeScript> scripts_;
  std::vector<JobRequest> requests_;
  std::vector<JobId> submitted_ids_;
  std::vector<JobId> cancelled_;
  std::vector<std::thread> threads_;
  JobId next_id_ = 1;
};

}  // namespace millipede::http_test
