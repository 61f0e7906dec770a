// One HTTP/1.1 connection: reads requests (keep-alive, pipelining, 100-continue), routes them,
// runs completion jobs and writes JSON responses or SSE streams. Everything runs on the
// connection's strand; job events reach it through the server's EventGate.
//
// While a request is being answered asynchronously (a job, a readiness canary) the connection
// keeps a read pending: end of stream or a reset means the client left, and its job is
// cancelled. Bytes that arrive meanwhile are the client's next request and are kept.
#pragma once

#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "http/server_context.h"

namespace millipede {

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(boost::asio::ip::tcp::socket&& socket, std::shared_ptr<ServerContext> ctx);
  // Cancels a job still running for this connection.
  ~HttpSession();

  void Start();
  // The connection's strand.
  boost::asio::any_io_executor executor() { return stream_.get_executor(); }

  // What submitting a request's jobs gave: one id per choice, or the error (the jobs submitted
  // before it are cancelled); the prompt's tokens; the echoed prompt text (echo only).
  struct Submitted {
    StatusOr<std::vector<JobId>> ids = std::vector<JobId>{};
    int64_t prompt_tokens = 0;
    std::string echo;
  };

  // Job events of choice `index` (on the strand).
  void OnSubmitted(Submitted submitted);
  void OnProgress(int64_t tokens_done, int64_t tokens_total);
  void OnToken(size_t index, const SampledToken& token, const std::string& text);
  void OnComplete(size_t index, const JobCompletion& completion);
  void OnError(size_t index, const Status& error);
  void OnReadyResult(bool ready, const std::string& detail);
  // A /tokenize or /detokenize answer computed off the loop (tokenize.cc): the body, or the
  // refusal.
  void OnTokenizeResult(const std::optional<ApiError>& error, const std::string& body);

 private:
  enum class Phase { kIdle, kReading, kSubmitting, kRunning, kWaitingReady, kTokenizing };

  // Reading and routing (http_session.cc).
  void ReadHeader();
  void OnHeader(boost::beast::error_code ec);
  void OnBody(boost::beast::error_code ec);
  // Answers the request (http_route.h says which handler).
  void Route();
  void RouteChecked();
  // Probes, the model list and the prefix cache's routes (http_probes.cc).
  void HandleModels(const std::string& path);
  void HandleCache(const std::string& path);
  void HandleHealth();
  void HandleReady();
  void Watch();
  void OnWatch(boost::beast::error_code ec, size_t bytes);

  // Jobs (http_jobs.cc).
  void StartJob(Endpoint endpoint);
  // Runs `event` now, or after OnSubmitted when the ids are not known yet.
  void RunEvent(std::function<void()> event);
  // The log-probabilities of one generated token, as responses show them.
  TokenLogprobs MakeTokenLogprobs(const SampledToken& token) const;
  // Ends the request once every choice has: the response, or the stream's last events.
  void FinishIfDone();
  // Cancels the jobs of choices that have not ended.
  void CancelJobs();
  // /tokenize and /detokenize (tokenize.cc).
  void StartTokenize(bool detokenize);

  // Output (http_session.cc).
  void SendJson(unsigned status, const std::string& body,
                const std::vector<std::pair<std::string, std::string>>& headers = {});
  // 429 and 503 carry Retry-After (kRetryAfterS unless `headers` give one).
  void SendError(const ApiError& error,
                 std::vector<std::pair<std::string, std::string>> headers = {});
  // SendError for a request this front end refuses, counted in the service's request errors
  // (ServiceMetrics::RequestError) by a reason derived from the error.
  void Refuse(const ApiError& error,
              const std::vector<std::pair<std::string, std::string>>& headers = {});
  void BeginStream();
  void StreamWrite(const std::string& event);
  void EndStream();
  void Enqueue(std::string bytes, bool ends_response);
  void DoWrite();
  void OnWrite(boost::beast::error_code ec);
  void AfterResponse();
  // The client left: cancel its job and close.
  void PeerGone();
  void Close();

  boost::beast::tcp_stream stream_;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  std::shared_ptr<ServerContext> ctx_;
  boost::asio::steady_timer idle_timer_;

  Phase phase_ = Phase::kIdle;
  bool closed_ = false;
  bool keep_alive_ = true;
  unsigned version_ = 11;
  bool watching_ = false;          // a read is pending to notice the client leaving
  bool awaiting_request_ = false;  // the response is written; the pending read starts the next
  bool resume_reading_ = false;    // the pending read was cancelled to parse buffered bytes

  // One choice of the request: its job and what it produced.
  struct Choice {
    std::optional<JobId> job_id;
    bool ended = false;
    std::optional<JobCompletion> completion;
    int64_t chars = 0;  // characters of the choice's text streamed so far (the echo included)
    // Streams: the log-probabilities of tokens whose text has not gone out; otherwise all.
    LogprobsRun logprobs;
  };

  // The request's jobs.
  ResponseMeta meta_;
  bool streaming_ = false;
  bool include_usage_ = false;
  bool want_logprobs_ = false;
  bool stream_started_ = false;
  bool request_done_ = false;  // answered (or failed): later job events are dropped
  std::vector<Choice> choices_;
  std::string echo_;  // the prompt's text, first in every choice (completions with echo)
  int64_t prompt_tokens_ = 0;
  double last_progress_note_s_ = 0;
  std::vector<std::function<void()>> early_events_;

  // Output queue: one write at a time.
  std::deque<std::string> out_;
  size_t out_bytes_ = 0;
  bool writing_ = false;
  bool response_queued_ = false;
};

}  // namespace millipede
