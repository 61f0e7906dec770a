#include "rpc/rpc_server.h"

#include <capnp/rpc-twoparty.h>
#include <capnp/rpc.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "rpc/millipede.capnp.h"
#include "rpc/rpc_errors.h"
#include "rpc/wire_convert.h"

namespace millipede::rpc {

capnp::ReaderOptions RpcReaderOptions() {
  capnp::ReaderOptions options;
  options.traversalLimitInWords = kMaxMessageBytes / sizeof(capnp::word);
  options.nestingLimit = kMaxNesting;
  return options;
}

namespace {

template <typename T>
T ValueOrThrow(StatusOr<T> s) {
  if (!s.ok()) ThrowStatus(s.status());
  return std::move(s).value();
}

void OkOrThrow(const Status& s) {
  if (!s.ok()) ThrowStatus(s);
}

// Cancels job `id` (a no-op for a job that already ended) and answers with the job's status as
// the cancel found it, when the service still knows it (an ended job's final status is kept for
// a while); a refused cancel (an id never issued) is thrown.
template <typename Results>
void CancelAndReport(JobService& service, JobId id, Results results) {
  OkOrThrow(service.Cancel(id));
  // Read after the cancel: a job still queued or running now has its cancel requested; one that
  // ended first (even between a read and the cancel) shows how it ended.
  StatusOr<JobStatusInfo> after = service.GetStatus(id);
  if (after.ok()) FillStatus(after.value(), results.initStatus());
}

// Sends one job's events to the client's JobCallback, on the loop thread, in order. A failed
// callback call means the client is gone: the job is cancelled. The service may drop its last
// reference on its own thread, so the capability (which belongs to the loop thread) is only
// ever touched, and finally released, on the loop thread.
class CallbackObserver final : public JobObserver,
                               public std::enable_shared_from_this<CallbackObserver> {
 public:
  CallbackObserver(JobService& service, EventPump& pump, kj::TaskSet& tasks,
                   JobCallback::Client callback)
      : service_(service),
        pump_(pump),
        tasks_(tasks),
        callback_(new JobCallback::Client(kj::mv(callback))) {}
  ~CallbackObserver() override {
    JobCallback::Client* callback = callback_;
    pump_.Post([callback] { delete callback; });
  }

  void set_id(JobId id) { id_.store(id); }

  void OnProgress(int64_t done, int64_t total) override {
    Post([done, total](JobCallback::Client& c) {
      auto req = c.progressRequest();
      req.setTokensDone(done);
      req.setTokensTotal(total);
      return req.send().ignoreResult();
    });
  }
  void OnToken(const SampledToken& token, std::string_view text) override {
    Post([token, text = std::string(text)](JobCallback::Client& c) {
      auto req = c.tokenRequest();
      req.setId(token.id);
      req.setText(kj::StringPtr(text.c_str(), text.size()));
      req.setLogprob(token.logprob);
      auto top = req.initTop(static_cast<unsigned>(token.top.size()));
      for (size_t i = 0; i < token.top.size(); ++i) {
        top[static_cast<unsigned>(i)].setId(token.top[i].id);
        top[static_cast<unsigned>(i)].setLogprob(token.top[i].logprob);
      }
      return req.send().ignoreResult();
    });
  }
  void OnComplete(const JobCompletion& done) override {
    Post([done](JobCallback::Client& c) {
      auto req = c.completeRequest();
      auto b = req.initCompletion();
      b.setFinishReason(done.finish_reason);
      auto ids = b.initIds(static_cast<unsigned>(done.ids.size()));
      for (size_t i = 0; i < done.ids.size(); ++i) ids.set(static_cast<unsigned>(i), done.ids[i]);
      b.setText(kj::StringPtr(done.text.c_str(), done.text.size()));
      b.setPromptTokens(done.prompt_tokens);
      b.setQueueS(done.queue_s);
      b.setTtftS(done.ttft_s);
      b.setE2eS(done.e2e_s);
      b.setPrefillTokensPerS(done.prefill_tokens_per_s);
      b.setDecodeTokensPerS(done.decode_tokens_per_s);
      b.setPrefillDensity(done.PrefillDensity());
      b.setCachedTokens(done.cached_tokens);
      b.setCacheEntry(done.cache_entry);
      return req.send().ignoreResult();
    });
  }
  void OnError(const Status& error) override {
    Post([error](JobCallback::Client& c) {
      auto req = c.errorRequest();
      auto e = req.initError();
      e.setCode(StatusCodeName(error.code()));
      e.setMessage(kj::StringPtr(error.message().c_str(), error.message().size()));
      return req.send().ignoreResult();
    });
  }

 private:
  template <typename F>
  void Post(F send) {
    pump_.Post([send = std::move(send), self = shared_from_this()]() mutable {
      JobService& service = self->service_;
      const JobId id = self->id_.load();
      self->tasks_.add(send(*self->callback_).catch_([&service, id](kj::Exception&&) {
        if (id != 0) service.Cancel(id).IgnoreError();
      }));
    });
  }

  JobService& service_;
  EventPump& pump_;
  kj::TaskSet& tasks_;
  JobCallback::Client* const callback_;
  std::atomic<JobId> id_{0};
};

// The client's handle on one job: dropping it (or the connection) cancels the job.
class JobImpl final : public Job::Server {
 public:
  JobImpl(JobService& service, JobId id) : service_(service), id_(id) {}
  // A no-op when the job already ended.
  ~JobImpl() { service_.Cancel(id_).IgnoreError(); }

 protected:
  kj::Promise<void> status(StatusContext context) override {
    FillStatus(ValueOrThrow(service_.GetStatus(id_)), context.getResults().initStatus());
    return kj::READY_NOW;
  }
  kj::Promise<void> cancel(CancelContext context) override {
    CancelAndReport(service_, id_, context.getResults());
    return kj::READY_NOW;
  }

 private:
  JobService& service_;
  const JobId id_;
};

// Threads that run JobService::Submit (tokenizing a long prompt takes a while) off the event
// loop, so that other jobs' events keep flowing meanwhile.
class SubmitPool {
 public:
  explicit SubmitPool(int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
  }
  ~SubmitPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    ready_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  void Run(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back(std::move(task));
    }
    ready_.notify_one();
  }

 private:
  void Loop() {
    while (true) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        ready_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
        if (tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }

  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

class MillipedeImpl final : public Millipede::Server {
 public:
  MillipedeImpl(JobService& service, EventPump& pump, kj::TaskSet& tasks, SubmitPool& pool)
      : service_(service), pump_(pump), tasks_(tasks), pool_(pool) {}

 protected:
  kj::Promise<void> submit(SubmitContext context) override {
    auto params = context.getParams();
    JobRequest request = JobRequestFromWire(params.getSpec());

    auto observer =
        std::make_shared<CallbackObserver>(service_, pump_, tasks_, params.getCallback());
    auto submitted = kj::newPromiseAndCrossThreadFulfiller<StatusOr<JobId>>();
    auto fulfiller = std::make_shared<kj::Own<kj::CrossThreadPromiseFulfiller<StatusOr<JobId>>>>(
        kj::mv(submitted.fulfiller));
    auto shared_request = std::make_shared<JobRequest>(std::move(request));
    // If the caller cancels this call before the answer, nobody will hold the job: cancel it.
    struct Pending {
      std::atomic<JobId> id{0};
      std::atomic<bool> abandoned{false};
      bool answered = false;  // loop thread only
    };
    auto pending = std::make_shared<Pending>();
    JobService& service = service_;
    pool_.Run([&service, shared_request, observer, fulfiller, pending] {
      StatusOr<JobId> id = InternalError("the job was not submitted");
      try {
        id = service.Submit(std::move(*shared_request), observer);
      } catch (const std::exception& e) {
        // The job service's own catch-all failed too: this submission fails, the server goes on.
        id = InternalError(std::string("internal error while submitting the job: ") + e.what());
      }
      if (id.ok()) {
        // The id lets a failed callback cancel the job. (An event that races ahead of this,
        // with id 0, cancels nothing if its call fails; the next one will.)
        observer->set_id(*id);
        pending->id.store(*id);
        if (pending->abandoned.load()) service.Cancel(*id).IgnoreError();
      }
      (*fulfiller)->fulfill(std::move(id));
    });
    auto on_drop = kj::defer([&service, pending] {
      if (pending->answered) return;
      pending->abandoned.store(true);
      const JobId id = pending->id.load();
      if (id != 0) service.Cancel(id).IgnoreError();
    });
    return submitted.promise
        .then([this, context, observer, pending](StatusOr<JobId> id) mutable {
          pending->answered = true;
          const JobId job = ValueOrThrow(std::move(id));
          auto results = context.getResults();
          results.setJob(kj::heap<JobImpl>(service_, job));
          results.setId(job);
          StatusOr<JobStatusInfo> info = service_.GetStatus(job);
          if (info.ok()) results.setPromptTokens(info->prompt_tokens);
        })
        .attach(kj::mv(on_drop));
  }
  kj::Promise<void> status(StatusContext context) override {
    FillStatus(ValueOrThrow(service_.GetStatus(context.getParams().getId())),
               context.getResults().initStatus());
    return kj::READY_NOW;
  }
  kj::Promise<void> cancel(CancelContext context) override {
    CancelAndReport(service_, context.getParams().getId(), context.getResults());
    return kj::READY_NOW;
  }
  kj::Promise<void> modelInfo(ModelInfoContext context) override {
    const ::millipede::ModelInfo m = service_.GetModelInfo();
    auto b = context.getResults().initInfo();
    b.setId(m.id);
    b.setContextLimit(m.context_limit);
    b.setKvCapacityTokens(m.kv_capacity_tokens);
    b.setVocabSize(m.vocab_size);
    b.setNumWorkers(m.num_workers);
    b.setChatFormat(m.chat_format);
    b.setMaxModelLen(m.max_model_len);
    return kj::READY_NOW;
  }
  kj::Promise<void> health(HealthContext context) override {
    const HealthInfo h = service_.GetHealth();
    auto b = context.getResults().initHealth();
    b.setAlive(h.alive);
    b.setAccepting(h.accepting);
    b.setRunning(h.running);
    b.setWaiting(h.waiting);
    b.setSecondsSinceLastToken(h.seconds_since_last_token);
    b.setDetail(h.detail);
    return kj::READY_NOW;
  }
  kj::Promise<void> workers(WorkersContext context) override {
    const std::vector<::millipede::RankStats> stats = service_.GetWorkerStats();
    auto list = context.getResults().initRanks(static_cast<unsigned>(stats.size()));
    for (size_t i = 0; i < stats.size(); ++i) {
      auto b = list[static_cast<unsigned>(i)];
      b.setRank(stats[i].rank);
      b.setKvBytesGpu(stats[i].kv_bytes_gpu);
      b.setKvBytesHost(stats[i].kv_bytes_host);
      b.setAttentionS(stats[i].attention_s);
      b.setCommS(stats[i].comm_s);
      b.setCommBytes(stats[i].comm_bytes);
    }
    return kj::READY_NOW;
  }
  kj::Promise<void> cacheList(CacheListContext context) override {
    const std::vector<CacheEntryInfo> entries = ValueOrThrow(service_.ListCache());
    auto list = context.getResults().initEntries(static_cast<unsigned>(entries.size()));
    for (size_t i = 0; i < entries.size(); ++i) {
      auto b = list[static_cast<unsigned>(i)];
      b.setId(entries[i].id);
      b.setTokens(entries[i].tokens);
      b.setKvPositions(entries[i].kv_positions);
      b.setPinned(entries[i].pinned);
      b.setHits(entries[i].hits);
      b.setHolders(entries[i].holders);
      b.setTier(entries[i].tier);
    }
    return kj::READY_NOW;
  }
  kj::Promise<void> cachePin(CachePinContext context) override {
    const Status pinned =
        service_.PinCacheEntry(context.getParams().getId(), context.getParams().getPinned());
    OkOrThrow(pinned);
    return kj::READY_NOW;
  }
  kj::Promise<void> cacheDrop(CacheDropContext context) override {
    const Status dropped = service_.DropCacheEntry(context.getParams().getId());
    OkOrThrow(dropped);
    return kj::READY_NOW;
  }

 private:
  JobService& service_;
  EventPump& pump_;
  kj::TaskSet& tasks_;
  SubmitPool& pool_;
};

// One client connection: its transport, with our message limits, and its RPC system.
struct Connection {
  Connection(kj::Own<kj::AsyncIoStream>&& s, capnp::Capability::Client bootstrap)
      : stream(kj::mv(s)),
        network(*stream, capnp::rpc::twoparty::Side::SERVER, RpcReaderOptions()),
        rpc(capnp::makeRpcServer(network, kj::mv(bootstrap))) {}
  kj::Own<kj::AsyncIoStream> stream;
  capnp::TwoPartyVatNetwork network;
  capnp::RpcSystem<capnp::rpc::twoparty::VatId> rpc;
};

class LogErrors final : public kj::TaskSet::ErrorHandler {
 public:
  void taskFailed(kj::Exception&& exception) override {}
};

}  // namespace

class RpcServer::Impl {
 public:
  explicit Impl(JobService& service) : callbacks_(errors_), connections_(errors_) {
    bootstrap_ = kj::heap<MillipedeImpl>(service, pump_, callbacks_, pool_);
  }

  kj::Promise<void> Accept() {
    return listener_->accept().then([this](kj::Own<kj::AsyncIoStream>&& stream) {
      auto conn = kj::heap<Connection>(kj::mv(stream), bootstrap_);
      auto done = conn->network.onDisconnect();
      connections_.add(done.attach(kj::mv(conn)));
      return Accept();
    });
  }

  EventPump pump_;
  SubmitPool pool_{2};
  LogErrors errors_;
  kj::TaskSet callbacks_;
  kj::TaskSet connections_;
  capnp::Capability::Client bootstrap_ = nullptr;
  kj::Own<kj::ConnectionReceiver> listener_;
  kj::Promise<void> accepting_ = nullptr;
  kj::Promise<void> pumping_ = nullptr;
};

StatusOr<std::unique_ptr<RpcServer>> RpcServer::Start(JobService& service, kj::AsyncIoContext& io,
                                                      const std::string& bind_address) {
  const size_t colon = bind_address.rfind(':');
  MP_REQUIRE(colon != std::string::npos && colon > 0, "--rpc wants HOST:PORT, got \"", bind_address,
             "\"");
  auto impl = std::make_unique<Impl>(service);
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([&] {
                 auto address = io.provider->getNetwork()
                                    .parseAddress(bind_address.c_str())
                                    .wait(io.waitScope);
                 impl->listener_ = address->listen();
               })) {
    return IoError("cannot listen on " + bind_address + ": " + e->getDescription().cStr());
  }
  impl->accepting_ = impl->Accept().eagerlyEvaluate(nullptr);
  impl->pumping_ = impl->pump_.Run().eagerlyEvaluate(nullptr);
  return std::unique_ptr<RpcServer>(new RpcServer(std::move(impl)));
}

RpcServer::RpcServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RpcServer::~RpcServer() { impl_->pump_.Close(); }
int RpcServer::port() const { return static_cast<int>(impl_->listener_->getPort()); }
EventPump& RpcServer::pump() { return impl_->pump_; }
kj::Promise<void> RpcServer::OnCallbacksDone() { return impl_->callbacks_.onEmpty(); }

}  // namespace millipede::rpc
