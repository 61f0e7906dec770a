#include "http/readiness.h"

#include <boost/asio/steady_timer.hpp>
#include <cstdio>

#include "tokenizer/tokenizer.h"

namespace millipede {

// Reports the canary's end to the Readiness that started it (if it still exists).
class Readiness::CanaryObserver final : public JobObserver {
 public:
  CanaryObserver(std::weak_ptr<Readiness> owner, uint64_t generation)
      : owner_(std::move(owner)), generation_(generation) {}
  void OnProgress(int64_t, int64_t) override {}
  void OnToken(const SampledToken&, std::string_view) override {}
  void OnComplete(const JobCompletion&) override {
    if (auto owner = owner_.lock()) owner->Finish(generation_, true, "canary job completed");
  }
  void OnError(const Status& error) override {
    if (auto owner = owner_.lock()) {
      owner->Finish(generation_, false, "canary job failed: " + error.ToString());
    }
  }

 private:
  std::weak_ptr<Readiness> owner_;
  uint64_t generation_;
};

Readiness::Readiness(JobService& service, boost::asio::any_io_executor timer_executor,
                     double recent_s, double canary_timeout_s)
    : service_(service),
      timer_executor_(std::move(timer_executor)),
      recent_s_(recent_s),
      canary_timeout_s_(canary_timeout_s) {}

void Readiness::Check(Callback done) {
  HealthInfo health = service_.GetHealth();
  if (!health.alive) return done(false, "not alive: " + health.detail);
  if (!health.accepting) return done(false, "not accepting jobs: " + health.detail);
  if (health.seconds_since_last_token >= 0 && health.seconds_since_last_token <= recent_s_) {
    char detail[80];
    std::snprintf(detail, sizeof(detail), "last token %.1f s ago", health.seconds_since_last_token);
    return done(true, detail);
  }
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (shut_down_) return done(false, "server shutting down");
    auto since_success =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - last_success_).count();
    if (succeeded_once_ && since_success <= recent_s_) return done(true, "recent canary succeeded");
    waiters_.push_back(std::move(done));
    if (in_flight_) return;
    in_flight_ = true;
    canary_id_known_ = false;
    generation = ++generation_;
  }

  JobRequest canary;
  canary.prompt_ids = {service_.tokenizer().bos_id().value_or(0)};
  canary.max_new_tokens = 1;
  canary.ignore_eos = true;
  auto id = service_.Submit(std::move(canary),
                            std::make_shared<CanaryObserver>(weak_from_this(), generation));
  if (!id.ok()) return Finish(generation, false, "canary job refused: " + id.status().ToString());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (in_flight_ && generation_ == generation) {
      canary_id_ = *id;
      canary_id_known_ = true;
    }
  }
  auto timer = std::make_shared<boost::asio::steady_timer>(
      timer_executor_, std::chrono::milliseconds(static_cast<int64_t>(canary_timeout_s_ * 1e3)));
  timer->async_wait([timer, weak = weak_from_this(), generation](boost::system::error_code ec) {
    auto self = weak.lock();
    if (ec || !self) return;
    std::optional<JobId> to_cancel;
    {
      std::lock_guard<std::mutex> lock(self->mutex_);
      if (!self->in_flight_ || self->generation_ != generation) return;
      if (self->canary_id_known_) to_cancel = self->canary_id_;
    }
    self->Finish(generation, false, "canary job produced no token in time");
    if (to_cancel) self->service_.Cancel(*to_cancel).IgnoreError();
  });
}

void Readiness::Shutdown() {
  std::optional<JobId> to_cancel;
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    shut_down_ = true;
    generation = generation_;
    if (in_flight_ && canary_id_known_) to_cancel = canary_id_;
  }
  Finish(generation, false, "server shutting down");
  if (to_cancel) service_.Cancel(*to_cancel).IgnoreError();
}

void Readiness::Finish(uint64_t generation, bool ready, const std::string& detail) {
  std::vector<Callback> waiters;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!in_flight_ || generation != generation_) return;
    in_flight_ = false;
    if (ready) {
      succeeded_once_ = true;
      last_success_ = std::chrono::steady_clock::now();
    }
    waiters.swap(waiters_);
  }
  for (Callback& done : waiters) done(ready, detail);
}

}  // namespace millipede
