// HttpSession's completion requests: parse, tokenize and submit off the event loop, then turn
// the job's events into a JSON response or an SSE stream.
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <deque>
#include <functional>
#include <mutex>

#include "common/tokenizer/tokenizer.h"
#include "coordinator/http/http_session.h"

namespace millipede {

namespace net = boost::asio;

namespace {

// A connection's job events in arrival order. Service threads append; the connection's strand
// takes them out, so events stay in order whichever loop thread runs the notification.
struct EventMailbox {
  std::mutex mutex;
  std::deque<std::function<void(HttpSession&)>> events;
};

// Forwards a job's events to its connection's strand. Holds the session weakly: a connection
// that is gone receives nothing (its job was cancelled when it went).
class SessionObserver final : public JobObserver {
 public:
  SessionObserver(std::shared_ptr<ServerContext> ctx, std::weak_ptr<HttpSession> session)
      : ctx_(std::move(ctx)), session_(std::move(session)) {}

  // Called once Submit returned the id; the registry forgets the id when the job has ended.
  void SetId(JobId id) {
    std::lock_guard<std::mutex> lock(mutex_);
    id_ = id;
    if (ended_) ctx_->jobs.Remove(id);
  }

  void OnProgress(int64_t done, int64_t total) override {
    Post([done, total](HttpSession& s) { s.OnProgress(done, total); });
  }
  void OnToken(const SampledToken&, std::string_view text) override {
    Post([text = std::string(text)](HttpSession& s) { s.OnToken(text); });
  }
  void OnComplete(const JobCompletion& completion) override {
    End();
    Post([completion](HttpSession& s) { s.OnComplete(completion); });
  }
  void OnError(const Status& error) override {
    End();
    Post([error](HttpSession& s) { s.OnError(error); });
  }

 private:
  void Post(std::function<void(HttpSession&)> event) {
    {
      std::lock_guard<std::mutex> lock(mailbox_->mutex);
      mailbox_->events.push_back(std::move(event));
    }
    ctx_->gate.Post([session = session_, mailbox = mailbox_] {
      auto s = session.lock();
      if (!s) return;
      net::dispatch(s->executor(), [s, mailbox] {
        for (;;) {
          std::function<void(HttpSession&)> next;
          {
            std::lock_guard<std::mutex> lock(mailbox->mutex);
            if (mailbox->events.empty()) return;
            next = std::move(mailbox->events.front());
            mailbox->events.pop_front();
          }
          next(*s);
        }
      });
    });
  }
  void End() {
    std::lock_guard<std::mutex> lock(mutex_);
    ended_ = true;
    if (id_) ctx_->jobs.Remove(*id_);
  }

  std::shared_ptr<ServerContext> ctx_;
  std::weak_ptr<HttpSession> session_;
  std::shared_ptr<EventMailbox> mailbox_ = std::make_shared<EventMailbox>();
  std::mutex mutex_;
  std::optional<JobId> id_;
  bool ended_ = false;
};

// Runs on the submit pool: tokenizes, fills the default length, submits, reports back.
void SubmitJob(std::shared_ptr<ServerContext> ctx, std::weak_ptr<HttpSession> weak,
               OpenAiRequest request) {
  auto report = [&](StatusOr<JobId> id, int64_t prompt_tokens) {
    bool posted = ctx->gate.Post([ctx, weak, id, prompt_tokens] {
      if (auto s = weak.lock()) {
        net::dispatch(s->executor(), [s, id, prompt_tokens] { s->OnSubmitted(id, prompt_tokens); });
      } else if (id.ok()) {
        ctx->service.Cancel(*id).IgnoreError();  // the client left before the id was known
      }
    });
    if (!posted && id.ok()) ctx->service.Cancel(*id).IgnoreError();
  };

  JobRequest job = std::move(request.job);
  if (!job.prompt_text.empty()) {
    const Tokenizer& tokenizer = ctx->service.tokenizer();
    auto ids = tokenizer.Encode(job.prompt_text);
    if (!ids.ok()) return report(ids.status(), 0);
    if (request.add_bos && tokenizer.bos_id()) job.prompt_ids.push_back(*tokenizer.bos_id());
    job.prompt_ids.insert(job.prompt_ids.end(), ids->begin(), ids->end());
    job.prompt_text.clear();
  }
  const int64_t prompt_tokens = static_cast<int64_t>(job.prompt_ids.size());
  if (!request.max_tokens_given && request.endpoint == Endpoint::kChatCompletions) {
    // Chat answers may use the rest of the context (as OpenAI's and vLLM's servers do).
    int64_t limit = ctx->context_limit;
    if (ctx->kv_capacity_tokens > 0 && (limit <= 0 || ctx->kv_capacity_tokens < limit)) {
      limit = ctx->kv_capacity_tokens;
    }
    // A prompt at or over the limit keeps 1 and gets the service's error naming both numbers.
    job.max_new_tokens = limit > prompt_tokens ? limit - prompt_tokens : 1;
  }
  auto observer = std::make_shared<SessionObserver>(ctx, weak);
  StatusOr<JobId> id = ctx->service.Submit(std::move(job), observer);
  if (id.ok()) {
    ctx->jobs.Add(*id);
    observer->SetId(*id);
  }
  report(id, prompt_tokens);
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

void HttpSession::StartJob(Endpoint endpoint) {
  OpenAiRequest request;
  if (auto error = ParseOpenAiRequest(endpoint, parser_->get().body(), ctx_->model, &request)) {
    return SendError(*error);
  }
  uint64_t number = ctx_->next_request.fetch_add(1);
  char id[48];
  std::snprintf(
      id, sizeof(id), "%s-%llx%06llx", endpoint == Endpoint::kChatCompletions ? "chatcmpl" : "cmpl",
      static_cast<unsigned long long>(ctx_->created_unix), static_cast<unsigned long long>(number));
  meta_ = ResponseMeta{endpoint, id, static_cast<int64_t>(std::time(nullptr)), ctx_->model.name};
  streaming_ = request.stream;
  include_usage_ = request.include_usage;
  stream_started_ = false;
  job_id_.reset();
  job_ended_ = false;
  prompt_tokens_ = 0;
  completion_tokens_ = 0;
  last_progress_note_s_ = 0;
  early_events_.clear();
  phase_ = Phase::kSubmitting;
  Watch();
  net::post(ctx_->submit_pool,
            [ctx = ctx_, weak = weak_from_this(), request = std::move(request)]() mutable {
              SubmitJob(std::move(ctx), std::move(weak), std::move(request));
            });
}

void HttpSession::OnSubmitted(StatusOr<JobId> id, int64_t prompt_tokens) {
  if (!id.ok()) {
    job_ended_ = true;
    if (closed_) return;
    ApiError error = ApiErrorFromStatus(id.status());
    if (error.code == "context_length_exceeded") {
      error.param = meta_.endpoint == Endpoint::kChatCompletions ? "messages" : "prompt";
    }
    phase_ = Phase::kRunning;
    return SendError(error);
  }
  job_id_ = *id;
  if (closed_) {
    ctx_->service.Cancel(*id).IgnoreError();
    return;
  }
  phase_ = Phase::kRunning;
  prompt_tokens_ = prompt_tokens;
  if (streaming_) {
    BeginStream();
    if (meta_.endpoint == Endpoint::kChatCompletions) {
      StreamWrite(StreamChunkEvent(meta_, "", "", /*role_only=*/true));
    }
  }
  std::vector<std::function<void()>> early;
  early.swap(early_events_);
  for (auto& event : early) event();
}

void HttpSession::RunEvent(std::function<void()> event) {
  if (phase_ == Phase::kSubmitting) {
    early_events_.push_back(std::move(event));
  } else {
    event();
  }
}

void HttpSession::OnProgress(int64_t tokens_done, int64_t tokens_total) {
  RunEvent([this, tokens_done, tokens_total] {
    if (closed_ || job_ended_ || !stream_started_) return;
    // SSE comments keep proxies and clients from timing out during long prefills; clients
    // ignore them. At most one per second.
    double now = NowSeconds();
    if (now - last_progress_note_s_ < 1.0 && tokens_done < tokens_total) return;
    last_progress_note_s_ = now;
    StreamWrite(": prefill " + std::to_string(tokens_done) + "/" + std::to_string(tokens_total) +
                "\n\n");
  });
}

void HttpSession::OnToken(const std::string& text) {
  RunEvent([this, text] {
    if (closed_ || job_ended_) return;
    ++completion_tokens_;
    if (streaming_ && !text.empty()) StreamWrite(StreamChunkEvent(meta_, text, ""));
  });
}

void HttpSession::OnComplete(const JobCompletion& completion) {
  RunEvent([this, completion] {
    if (job_ended_) return;
    job_ended_ = true;
    if (closed_) return;
    const int64_t prompt_tokens =
        completion.prompt_tokens > 0 ? completion.prompt_tokens : prompt_tokens_;
    if (!streaming_) {
      JobCompletion answer = completion;
      answer.prompt_tokens = prompt_tokens;
      return SendJson(200, CompletionBody(meta_, answer));
    }
    StreamWrite(StreamChunkEvent(meta_, "", completion.finish_reason));
    if (include_usage_) {
      StreamWrite(
          StreamUsageEvent(meta_, prompt_tokens, static_cast<int64_t>(completion.ids.size())));
    }
    StreamWrite(kStreamDone);
    EndStream();
  });
}

void HttpSession::OnError(const Status& error) {
  RunEvent([this, error] {
    if (job_ended_) return;
    job_ended_ = true;
    if (closed_) return;
    ApiError api_error = ApiErrorFromStatus(error);
    if (!stream_started_) return SendError(api_error);
    StreamWrite(StreamErrorEvent(api_error));
    StreamWrite(kStreamDone);
    EndStream();
  });
}

}  // namespace millipede
