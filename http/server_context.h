// State the HTTP server's connections share: the job service, options, the served model, the
// gate that carries job events onto connection strands, and the jobs in flight.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>

#include "api/job_service.h"
#include "http/openai_protocol.h"
#include "http/openai_server.h"

namespace millipede {

class Readiness;

// Job events arrive on service threads; they are posted to the server's event loop through the
// gate. Once the server shuts down the gate is closed and nothing more is posted, so no event
// reaches an event loop that is being destroyed. Nothing posted holds an executor of the loop
// beyond the loop's life (a strand's executor outliving its io_context is undefined).
class EventGate {
 public:
  void Open(boost::asio::io_context* ioc) {
    std::lock_guard<std::mutex> lock(mutex_);
    ioc_ = ioc;
  }
  // Posts `fn` to the event loop; false (and `fn` is dropped) once closed.
  template <typename Fn>
  bool Post(Fn&& fn) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (ioc_ == nullptr) return false;
    boost::asio::post(*ioc_, std::forward<Fn>(fn));
    return true;
  }
  void Close() {
    std::lock_guard<std::mutex> lock(mutex_);
    ioc_ = nullptr;
  }

 private:
  std::mutex mutex_;
  boost::asio::io_context* ioc_ = nullptr;
};

// Ids of the jobs HTTP requests have submitted and not yet seen end; cancelled at shutdown.
class JobRegistry {
 public:
  void Add(JobId id) {
    std::lock_guard<std::mutex> lock(mutex_);
    ids_.insert(id);
  }
  void Remove(JobId id) {
    std::lock_guard<std::mutex> lock(mutex_);
    ids_.erase(id);
  }
  std::unordered_set<JobId> Take() {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::exchange(ids_, {});
  }

 private:
  std::mutex mutex_;
  std::unordered_set<JobId> ids_;
};

struct ServerContext {
  ServerContext(JobService& service_in, const OpenAiServerOptions& options_in)
      : service(service_in),
        options(options_in),
        submit_pool(static_cast<size_t>(options_in.submit_threads)) {}

  JobService& service;
  const OpenAiServerOptions options;
  ServedModel model;
  int64_t max_model_len = 0;       // ModelInfo::max_model_len (/v1/models, /tokenize)
  int64_t created_unix = 0;        // server start, shown as the model's "created"
  EventGate gate;
  JobRegistry jobs;
  // Tokenizing and submitting run here, off the event loop (long prompts take a while).
  boost::asio::thread_pool submit_pool;
  std::shared_ptr<Readiness> readiness;
  std::atomic<uint64_t> next_request = 1;
};

}  // namespace millipede
