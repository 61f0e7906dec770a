// A scripted JobService for front-end tests: records requests, runs each job on its own thread
// (events arrive from a service thread, as from the real scheduler), can hold a job until it is
// released or cancelled, and can refuse submissions with a given status.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "api/job_service.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/tokenizer.h"

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
    info_.max_model_len = 3000;  // below the context limit: a KV budget that holds less
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
  // The Submit call number `call` from now (0 = the next) returns this error.
  void FailSubmitCall(size_t call, Status status) {
    std::lock_guard<std::mutex> lock(mutex_);
    fail_call_.emplace(submit_calls_ + call, std::move(status));
  }
  // Scripts for the next jobs, in order; without one a job answers "<N>" for a prompt of N
  // tokens, one piece per character, cut to max_new_tokens.
  void QueueScript(FakeScript script) {
    std::lock_guard<std::mutex> lock(mutex_);
    scripts_.push_back(std::move(script));
  }

  StatusOr<JobId> Submit(JobRequest request, std::shared_ptr<JobObserver> observer) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (fail_call_ && fail_call_->first == submit_calls_++) {
      Status error = fail_call_->second;
      fail_call_.reset();
      return error;
    }
    if (!submit_errors_.empty()) {
      Status error = submit_errors_.front();
      submit_errors_.pop_front();
      return error;
    }
    // As the coordinator's admission does: text is tokenized (with the BOS when asked for), and
    // a request for the rest of the context gets what the prompt leaves.
    int64_t prompt = static_cast<int64_t>(request.prompt_ids.size());
    if (!request.prompt_text.empty()) {
      auto ids = tokenizer_->Encode(request.prompt_text);
      if (!ids.ok()) return ids.status();
      prompt = static_cast<int64_t>(ids->size()) +
               (request.add_bos && tokenizer_->bos_id().has_value() ? 1 : 0);
    }
    if (request.max_new_tokens_to_limit) {
      const int64_t left = std::max<int64_t>(1, info_.context_limit - prompt);
      request.max_new_tokens =
          request.max_new_tokens >= 1 ? std::min(left, request.max_new_tokens) : left;
    }
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
    jobs_[id].prompt_tokens = prompt;
    requests_.push_back(request);
    submitted_ids_.push_back(id);
    threads_.emplace_back(
        [this, id, prompt, script = std::move(script), observer, k = request.sampling.logprobs] {
          Run(id, prompt, script, k, *observer);
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
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return NotFoundError("no such job");
    JobStatusInfo info;
    info.id = id;
    info.prompt_tokens = it->second.prompt_tokens;
    return info;
  }
  void CountRefusal(std::string_view reason) override {
    std::lock_guard<std::mutex> lock(mutex_);
    refusals_.emplace_back(reason);
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
  // The reasons of the refusals the front end counted, in order.
  std::vector<std::string> refusals() {
    std::lock_guard<std::mutex> lock(mutex_);
    return refusals_;
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
    int64_t prompt_tokens = 0;
  };

  // Token i is id 100 + i with log-probability -0.5 - i / 10; its alternatives (`logprobs` of
  // them, when >= 0) are ids 100 + i + j with log-probability -0.5 - i / 10 - j.
  void Run(JobId id, int64_t prompt, const FakeScript& script, int32_t logprobs,
           JobObserver& observer) {
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
      SampledToken sampled{token, 0.0f, {}};
      if (logprobs >= 0) sampled.logprob = -0.5f - 0.1f * static_cast<float>(i);
      for (int32_t j = 0; j < logprobs; ++j)
        sampled.top.push_back({token + j, sampled.logprob - static_cast<float>(j)});
      observer.OnToken(sampled, script.pieces[i]);
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
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::map<JobId, Job> jobs_;
  std::deque<Status> submit_errors_;
  std::optional<std::pair<size_t, Status>> fail_call_;
  size_t submit_calls_ = 0;
  std::deque<FakeScript> scripts_;
  std::vector<JobRequest> requests_;
  std::vector<JobId> submitted_ids_;
  std::vector<JobId> cancelled_;
  std::vector<std::string> refusals_;
  std::vector<std::thread> threads_;
  JobId next_id_ = 1;
};

}  // namespace millipede::http_test
