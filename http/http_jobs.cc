// HttpSession's completion requests: parse, then submit one job per choice off the event loop,
// then turn the jobs' events into a JSON response or an SSE stream.
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <deque>
#include <functional>
#include <mutex>

#include "http/http_session.h"
#include "tokenizer/tokenizer.h"

namespace millipede {

namespace net = boost::asio;

namespace {

// A connection's job events in arrival order. Service threads append; the connection's strand
// takes them out, so events stay in order whichever loop thread runs the notification.
struct EventMailbox {
  std::mutex mutex;
  std::deque<std::function<void(HttpSession&)>> events;
};

// Forwards one choice's job events to its connection's strand. Holds the session weakly: a
// connection that is gone receives nothing (its jobs were cancelled when it went).
class SessionObserver final : public JobObserver {
 public:
  SessionObserver(std::shared_ptr<ServerContext> ctx, std::weak_ptr<HttpSession> session,
                  std::shared_ptr<EventMailbox> mailbox, size_t index)
      : ctx_(std::move(ctx)),
        session_(std::move(session)),
        mailbox_(std::move(mailbox)),
        index_(index) {}

  // Called once Submit returned the id; the registry forgets the id when the job has ended.
  void SetId(JobId id) {
    std::lock_guard<std::mutex> lock(mutex_);
    id_ = id;
    if (ended_) ctx_->jobs.Remove(id);
  }

  void OnProgress(int64_t done, int64_t total) override {
    Post([done, total](HttpSession& s) { s.OnProgress(done, total); });
  }
  void OnToken(const SampledToken& token, std::string_view text) override {
    Post([i = index_, token, text = std::string(text)](HttpSession& s) {
      s.OnToken(i, token, text);
    });
  }
  void OnComplete(const JobCompletion& completion) override {
    End();
    Post([i = index_, completion](HttpSession& s) { s.OnComplete(i, completion); });
  }
  void OnError(const Status& error) override {
    End();
    Post([i = index_, error](HttpSession& s) { s.OnError(i, error); });
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
  std::shared_ptr<EventMailbox> mailbox_;  // shared by the request's choices: one order
  const size_t index_;
  std::mutex mutex_;
  std::optional<JobId> id_;
  bool ended_ = false;
};

// The prompt as the echo shows it: the text as sent, or the ids decoded.
std::string EchoText(const JobRequest& job, const Tokenizer& tokenizer) {
  if (!job.prompt_text.empty()) return job.prompt_text;
  StatusOr<std::string> text = tokenizer.Decode(job.prompt_ids);
  return text.ok() ? *text : std::string();
}

// Runs on the submit pool: submits one job per choice (choice i with seed + i) and reports back.
// The coordinator tokenizes and checks each; if one is refused, those before it are cancelled.
void SubmitJobs(std::shared_ptr<ServerContext> ctx, std::weak_ptr<HttpSession> weak,
                OpenAiRequest request) {
  HttpSession::Submitted submitted;
  if (request.echo) submitted.echo = EchoText(request.job, ctx->service.tokenizer());
  auto mailbox = std::make_shared<EventMailbox>();
  std::vector<JobId> ids;
  Status failure;
  for (int64_t i = 0; i < request.n && failure.ok(); ++i) {
    if (i == 1 && !request.job.prompt_text.empty()) {
      // The first choice's admission checked the text; the others take its ids (tokenized as
      // admission does), so a long prompt is tokenized twice, not n times.
      const Tokenizer& tokenizer = ctx->service.tokenizer();
      StatusOr<std::vector<int32_t>> prompt_ids =
          EncodePrompt(tokenizer, request.job.prompt_text, request.job.add_bos);
      if (!prompt_ids.ok()) {
        failure = prompt_ids.status();
        break;
      }
      request.job.prompt_ids = std::move(prompt_ids).value();
      request.job.prompt_text.clear();
    }
    JobRequest job = request.job;
    job.sampling.seed += static_cast<uint64_t>(i);
    auto observer = std::make_shared<SessionObserver>(ctx, weak, mailbox, static_cast<size_t>(i));
    StatusOr<JobId> id = InternalError("the job was not submitted");
    try {
      id = ctx->service.Submit(std::move(job), observer);
    } catch (const std::exception& e) {
      id = InternalError(std::string("internal error while submitting the job: ") + e.what());
    }
    if (!id.ok()) {
      failure = id.status();
      break;
    }
    ctx->jobs.Add(*id);
    observer->SetId(*id);
    ids.push_back(*id);
  }
  if (!failure.ok()) {
    for (JobId id : ids) ctx->service.Cancel(id).IgnoreError();
    submitted.ids = failure;
  } else {
    StatusOr<JobStatusInfo> info = ctx->service.GetStatus(ids.front());
    if (info.ok()) submitted.prompt_tokens = info->prompt_tokens;
    submitted.ids = ids;
  }
  bool posted = ctx->gate.Post([ctx, weak, submitted] {
    if (auto s = weak.lock()) {
      net::dispatch(s->executor(), [s, submitted] { s->OnSubmitted(submitted); });
    } else if (submitted.ids.ok()) {
      // The client left before the ids were known.
      for (JobId id : *submitted.ids) ctx->service.Cancel(id).IgnoreError();
    }
  });
  if (!posted && submitted.ids.ok()) {
    for (JobId id : *submitted.ids) ctx->service.Cancel(id).IgnoreError();
  }
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int64_t Characters(const std::string& text) {
  int64_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace

void HttpSession::StartJob(Endpoint endpoint) {
  OpenAiRequest request;
  if (auto error = ParseOpenAiRequest(endpoint, parser_->get().body(), ctx_->model, &request)) {
    return Refuse(*error);
  }
  uint64_t number = ctx_->next_request.fetch_add(1);
  char id[48];
  std::snprintf(
      id, sizeof(id), "%s-%llx%06llx", endpoint == Endpoint::kChatCompletions ? "chatcmpl" : "cmpl",
      static_cast<unsigned long long>(ctx_->created_unix), static_cast<unsigned long long>(number));
  meta_ = ResponseMeta{endpoint, id, static_cast<int64_t>(std::time(nullptr)), ctx_->model.name};
  streaming_ = request.stream;
  include_usage_ = request.include_usage;
  want_logprobs_ = request.job.sampling.logprobs >= 0;
  stream_started_ = false;
  request_done_ = false;
  choices_.assign(static_cast<size_t>(request.n), Choice{});
  echo_.clear();
  prompt_tokens_ = 0;
  last_progress_note_s_ = 0;
  early_events_.clear();
  phase_ = Phase::kSubmitting;
  Watch();
  net::post(ctx_->submit_pool,
            [ctx = ctx_, weak = weak_from_this(), request = std::move(request)]() mutable {
              SubmitJobs(std::move(ctx), std::move(weak), std::move(request));
            });
}

void HttpSession::OnSubmitted(Submitted submitted) {
  if (!submitted.ids.ok()) {
    request_done_ = true;
    for (Choice& c : choices_) c.ended = true;
    if (closed_) return;
    ApiError error = ApiErrorFromStatus(submitted.ids.status());
    if (error.code == "context_length_exceeded") {
      error.param = meta_.endpoint == Endpoint::kChatCompletions ? "messages" : "prompt";
    }
    phase_ = Phase::kRunning;
    // The service counted the refusal.
    return SendError(error);
  }
  echo_ = submitted.echo;
  for (size_t i = 0; i < choices_.size(); ++i) {
    choices_[i].job_id = (*submitted.ids)[i];
    choices_[i].chars = Characters(echo_);
    choices_[i].logprobs.text_offset = choices_[i].chars;
  }
  if (closed_) return CancelJobs();
  phase_ = Phase::kRunning;
  prompt_tokens_ = submitted.prompt_tokens;
  if (streaming_) {
    BeginStream();
    for (size_t i = 0; i < choices_.size(); ++i) {
      if (meta_.endpoint == Endpoint::kChatCompletions) {
        StreamWrite(StreamChunkEvent(meta_, static_cast<int64_t>(i), "", "", /*role_only=*/true));
      } else if (!echo_.empty()) {
        StreamWrite(StreamChunkEvent(meta_, static_cast<int64_t>(i), echo_, ""));
      }
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
    if (closed_ || request_done_ || !stream_started_) return;
    // SSE comments keep proxies and clients from timing out during long prefills; clients
    // ignore them. At most one per second.
    double now = NowSeconds();
    if (now - last_progress_note_s_ < 1.0 && tokens_done < tokens_total) return;
    last_progress_note_s_ = now;
    StreamWrite(": prefill " + std::to_string(tokens_done) + "/" + std::to_string(tokens_total) +
                "\n\n");
  });
}

TokenLogprobs HttpSession::MakeTokenLogprobs(const SampledToken& token) const {
  const Tokenizer& tokenizer = ctx_->service.tokenizer();
  auto text = [&](int32_t id) {
    StatusOr<std::string> s = tokenizer.Decode({id});
    return s.ok() ? *s : std::string();
  };
  TokenLogprobs out{text(token.id), token.logprob, {}};
  for (const TokenLogprob& t : token.top) out.top.emplace_back(text(t.id), t.logprob);
  return out;
}

void HttpSession::OnToken(size_t index, const SampledToken& token, const std::string& text) {
  RunEvent([this, index, token, text] {
    if (closed_ || request_done_ || index >= choices_.size()) return;
    Choice& c = choices_[index];
    if (want_logprobs_) {
      TokenLogprobs entry = MakeTokenLogprobs(token);
      c.logprobs.token_chars.push_back(Characters(entry.token));
      c.logprobs.tokens.push_back(std::move(entry));
    }
    if (!streaming_ || text.empty()) return;
    // The log-probabilities of every token this text completes go with it.
    StreamWrite(StreamChunkEvent(meta_, static_cast<int64_t>(index), text, "", false,
                                 want_logprobs_ ? &c.logprobs : nullptr));
    c.chars += Characters(text);
    c.logprobs = LogprobsRun{{}, c.chars, {}};
  });
}

void HttpSession::OnComplete(size_t index, const JobCompletion& completion) {
  RunEvent([this, index, completion] {
    if (request_done_ || index >= choices_.size() || choices_[index].ended) return;
    Choice& c = choices_[index];
    c.ended = true;
    c.completion = completion;
    if (closed_) return;
    if (streaming_) {
      const bool pending = want_logprobs_ && !c.logprobs.tokens.empty();
      StreamWrite(StreamChunkEvent(meta_, static_cast<int64_t>(index), "", completion.finish_reason,
                                   false, pending ? &c.logprobs : nullptr));
    }
    FinishIfDone();
  });
}

void HttpSession::OnError(size_t index, const Status& error) {
  RunEvent([this, index, error] {
    if (request_done_ || index >= choices_.size() || choices_[index].ended) return;
    choices_[index].ended = true;
    // One choice failing fails the request: the others are not waited for.
    request_done_ = true;
    CancelJobs();
    if (closed_) return;
    ApiError api_error = ApiErrorFromStatus(error);
    if (!stream_started_) return SendError(api_error);
    StreamWrite(StreamErrorEvent(api_error));
    StreamWrite(kStreamDone);
    EndStream();
  });
}

void HttpSession::FinishIfDone() {
  int64_t generated = 0;
  for (const Choice& c : choices_) {
    if (!c.ended) return;
    generated += c.completion ? static_cast<int64_t>(c.completion->ids.size()) : 0;
  }
  request_done_ = true;
  int64_t prompt_tokens = prompt_tokens_;
  if (prompt_tokens == 0 && choices_[0].completion) {
    prompt_tokens = choices_[0].completion->prompt_tokens;
  }
  if (!streaming_) {
    std::vector<ChoiceResult> results;
    for (Choice& c : choices_) {
      ChoiceResult r{*c.completion, echo_ + c.completion->text, std::nullopt};
      if (want_logprobs_) r.logprobs = std::move(c.logprobs);
      results.push_back(std::move(r));
    }
    return SendJson(200, CompletionBody(meta_, results, prompt_tokens));
  }
  const int64_t cached = choices_[0].completion ? choices_[0].completion->cached_tokens : 0;
  if (include_usage_) StreamWrite(StreamUsageEvent(meta_, prompt_tokens, generated, cached));
  StreamWrite(kStreamDone);
  EndStream();
}

void HttpSession::CancelJobs() {
  for (Choice& c : choices_) {
    if (c.job_id && !c.ended) ctx_->service.Cancel(*c.job_id).IgnoreError();
  }
}

}  // namespace millipede
