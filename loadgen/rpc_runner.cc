// RunRpc: every request of the plan on one Cap'n Proto connection, driven by the connection's
// event loop on this thread: a timer per send time, a JobCallback per request stamping its
// events as they arrive, Job.cancel at the planned point. Requests end by plain calls (End),
// which start the next waiting request and end the run after the last one.
#include <algorithm>
#include <deque>
#include <memory>

#include "loadgen/runner.h"
#include "rpc/client_connection.h"
#include "rpc/rpc_errors.h"

namespace millipede::loadgen {
namespace {

struct RpcRequest;

// The run's shared state, on the event loop's thread.
struct RunContext {
  ClientConnection& c;
  const RunOptions& options;
  Clock::time_point t0;
  kj::TaskSet& tasks;
  int64_t in_flight = 0;
  std::deque<std::shared_ptr<RpcRequest>> waiting;  // arrived while max_concurrency were running
  size_t remaining = 0;                             // requests not ended
  kj::Own<kj::PromiseFulfiller<void>> all_ended;
};

void Start(std::shared_ptr<RpcRequest> r);
void StartNextWaiting(RunContext& ctx);

// One request's state, shared by the run and its callback (which the server may call, or hold,
// after the request ended here).
struct RpcRequest {
  RpcRequest(RunContext& ctx, const PlannedRequest& plan)
      : ctx(ctx), plan(plan), record(RecordFor(plan)) {}

  void OnOutput() {
    record.output_times_s.push_back(SecondsSince(ctx.t0));
    MaybeCancel();
  }
  void MaybeCancel() {
    if (ended || cancel_sent || !plan.cancel_after_tokens) return;
    if (!CancelDue(plan, prefill_started, static_cast<int64_t>(record.output_times_s.size()))) {
      return;
    }
    if (!has_job) return;  // the submit answer is still on its way; it calls back here
    cancel_sent = true;
    ctx.tasks.add(job.cancelRequest().send().ignoreResult());
  }
  // Records the outcome, frees the request's slot for a waiting one, and ends the run after
  // the last request.
  void End(Outcome outcome, std::string code = "", std::string message = "") {
    if (ended) return;
    ended = true;
    record.outcome = outcome;
    record.failure_code = std::move(code);
    record.failure_message = std::move(message);
    record.end_s = SecondsSince(ctx.t0);
    if (record.output_tokens == 0) {
      record.output_tokens = static_cast<int64_t>(record.output_times_s.size());
    }
    job = nullptr;  // dropping the capability cancels a job still running (timeout)
    if (started) {
      --ctx.in_flight;
      StartNextWaiting(ctx);
    }
    if (--ctx.remaining == 0) ctx.all_ended->fulfill();
  }

  RunContext& ctx;
  const PlannedRequest plan;
  RequestRecord record;
  rpc::Job::Client job = nullptr;
  bool started = false;
  bool has_job = false;
  bool prefill_started = false;
  bool cancel_sent = false;
  bool ended = false;
};

class Callback final : public rpc::JobCallback::Server {
 public:
  explicit Callback(std::shared_ptr<RpcRequest> r) : r_(std::move(r)) {}

 protected:
  kj::Promise<void> progress(ProgressContext) override {
    r_->prefill_started = true;
    r_->MaybeCancel();
    return kj::READY_NOW;
  }
  kj::Promise<void> token(TokenContext) override {
    if (!r_->ended) r_->OnOutput();
    return kj::READY_NOW;
  }
  kj::Promise<void> complete(CompleteContext context) override {
    r_->record.output_tokens = context.getParams().getCompletion().getIds().size();
    r_->record.cached_tokens = context.getParams().getCompletion().getCachedTokens();
    r_->End(Outcome::kOk);
    return kj::READY_NOW;
  }
  kj::Promise<void> error(ErrorContext context) override {
    auto e = context.getParams().getError();
    const std::string code = e.getCode().cStr();
    if (code == "CANCELLED" && r_->cancel_sent) {
      r_->End(Outcome::kCancelled);
    } else {
      r_->End(Outcome::kFailed, code, e.getMessage().cStr());
    }
    return kj::READY_NOW;
  }

 private:
  std::shared_ptr<RpcRequest> r_;
};

void BuildSpec(const RpcRequest& r, rpc::JobSpec::Builder spec) {
  const RunOptions& o = r.ctx.options;
  const std::vector<int32_t> ids =
      RequestPromptIds(o.seed, r.plan, o.document_tokens, o.vocab_size);
  auto list = spec.getPrompt().initIds(static_cast<unsigned>(ids.size()));
  for (size_t i = 0; i < ids.size(); ++i) list.set(static_cast<unsigned>(i), ids[i]);
  spec.setMaxNewTokens(r.plan.output_tokens);
  if (!o.policy_json.empty()) spec.setPolicyJson(o.policy_json);
  spec.setIgnoreEos(true);
  spec.initSampling().setTemperature(0);
}

// Submits the request; its callback's events, a refusal or the timeout end it.
void Start(std::shared_ptr<RpcRequest> r) {
  RunContext& ctx = r->ctx;
  r->started = true;
  ++ctx.in_flight;
  auto request = ctx.c.service.submitRequest();
  BuildSpec(*r, request.initSpec());
  request.setCallback(kj::heap<Callback>(r));
  r->record.start_s = SecondsSince(ctx.t0);
  ctx.tasks.add(request.send().then(
      [r](capnp::Response<rpc::Millipede::SubmitResults>&& response) {
        if (r->ended) return;  // timed out already: dropping the answer cancels the job
        r->job = response.getJob();
        r->has_job = true;
        r->MaybeCancel();
      },
      [r](kj::Exception&& e) {
        const Status s = rpc::StatusFromException(e);
        r->End(Outcome::kFailed, StatusCodeName(s.code()), s.message());
      }));
  if (ctx.options.request_timeout_s <= 0) return;
  auto limit = static_cast<int64_t>(ctx.options.request_timeout_s * 1e6) * kj::MICROSECONDS;
  ctx.tasks.add(ctx.c.io.provider->getTimer().afterDelay(limit).then(
      [r] { r->End(Outcome::kFailed, "timeout", "no end within the request timeout"); }));
}

void StartNextWaiting(RunContext& ctx) {
  while (!ctx.waiting.empty()) {
    std::shared_ptr<RpcRequest> next = std::move(ctx.waiting.front());
    ctx.waiting.pop_front();
    if (!next->ended) return Start(std::move(next));  // else ended by a lost connection
  }
}

// At the request's send time: starts it, or queues it behind max_concurrency running ones.
void Arrive(std::shared_ptr<RpcRequest> r) {
  RunContext& ctx = r->ctx;
  if (r->ended) return;  // the connection was lost before
  const int64_t limit = ctx.options.max_concurrency;
  if (limit > 0 && ctx.in_flight >= limit) {
    ctx.waiting.push_back(std::move(r));
  } else {
    Start(std::move(r));
  }
}

// The tasks are cancel calls and timers (submits handle their own errors). A cancel that
// failed changes nothing: the job's own events, or the lost connection, still end its request.
class IgnoreTaskErrors final : public kj::TaskSet::ErrorHandler {
 public:
  void taskFailed(kj::Exception&&) override {}
};

}  // namespace

StatusOr<std::vector<RequestRecord>> RunRpc(ClientConnection& c,
                                            const std::vector<PlannedRequest>& plan,
                                            const RunOptions& options) {
  MP_REQUIRE(options.vocab_size > 0, "the vocabulary size must be positive");
  std::vector<RequestRecord> records;
  if (plan.empty()) return records;
  IgnoreTaskErrors errors;
  kj::TaskSet tasks(errors);
  auto paf = kj::newPromiseAndFulfiller<void>();
  RunContext ctx{c, options, Clock::now(), tasks};
  ctx.remaining = plan.size();
  ctx.all_ended = kj::mv(paf.fulfiller);
  std::vector<std::shared_ptr<RpcRequest>> requests;
  for (const PlannedRequest& p : plan) {
    auto r = std::make_shared<RpcRequest>(ctx, p);
    requests.push_back(r);
    const double wait_s = std::max(0.0, p.send_at_s - SecondsSince(ctx.t0));
    auto delay = static_cast<int64_t>(wait_s * 1e6) * kj::MICROSECONDS;
    tasks.add(c.io.provider->getTimer().afterDelay(delay).then([r] { Arrive(r); }));
  }
  auto lost = c.network->onDisconnect().then([&requests] {
    for (auto& r : requests) r->End(Outcome::kFailed, "IO_ERROR", "lost the connection");
  });
  KJ_IF_MAYBE (e, kj::runCatchingExceptions(
                      [&] { paf.promise.exclusiveJoin(kj::mv(lost)).wait(c.io.waitScope); })) {
    return rpc::StatusFromException(*e);
  }
  for (auto& r : requests) records.push_back(r->record);
  return records;
}

}  // namespace millipede::loadgen
