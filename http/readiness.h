// /ready: the service is alive, accepting jobs, and produces tokens: one was produced recently,
// or a one-token canary job submitted now completes within the time limit. Concurrent checks
// share one canary.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "api/job_service.h"

namespace millipede {

class Readiness : public std::enable_shared_from_this<Readiness> {
 public:
  // `done(ready, detail)`; called exactly once, from an event-loop or a service thread, so it
  // must only post the result on.
  using Callback = std::function<void(bool ready, const std::string& detail)>;

  // The canary's timer runs on `timer_executor`.
  Readiness(JobService& service, boost::asio::any_io_executor timer_executor, double recent_s,
            double canary_timeout_s);

  void Check(Callback done);
  // Fails the waiting checks and cancels a canary in flight (server shutdown).
  void Shutdown();

 private:
  class CanaryObserver;
  // Ends canary `generation` (if it is the one in flight) and answers every waiter.
  void Finish(uint64_t generation, bool ready, const std::string& detail);

  JobService& service_;
  boost::asio::any_io_executor timer_executor_;
  const double recent_s_;
  const double canary_timeout_s_;

  std::mutex mutex_;  // guards the fields below
  std::vector<Callback> waiters_;
  bool in_flight_ = false;
  bool shut_down_ = false;
  uint64_t generation_ = 0;
  JobId canary_id_ = 0;
  bool canary_id_known_ = false;
  std::chrono::steady_clock::time_point last_success_{};
  bool succeeded_once_ = false;
};

}  // namespace millipede
