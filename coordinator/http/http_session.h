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

#include "coordinator/http/server_context.h"

namespace millipede {

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(boost::asio::ip::tcp::socket&& socket, std::shared_ptr<ServerContext> ctx);
  // Cancels a job still running for this connection.
  ~HttpSession();

  void Start();
  // The connection's strand.
  boost::asio::any_io_executor executor() { return stream_.get_executor(); }

  // Job events (on the strand).
  void OnSubmitted(StatusOr<JobId> id, int64_t prompt_tokens);
  void OnProgress(int64_t tokens_done, int64_t tokens_total);
  void OnToken(const std::string& text);
  void OnComplete(const JobCompletion& completion);
  void OnError(const Status& error);
  void OnReadyResult(bool ready, const std::string& detail);

 private:
  enum class Phase { kIdle, kReading, kSubmitting, kRunning, kWaitingReady };

  // Reading and routing (http_session.cc).
  void ReadHeader();
  void OnHeader(boost::beast::error_code ec);
  void OnBody(boost::beast::error_code ec);
  void Route();
  bool Authorized() const;
  void HandleModels(const std::string& path);
  void HandleHealth();
  void HandleReady();
  void Watch();
  void OnWatch(boost::beast::error_code ec, size_t bytes);

  // Jobs (http_jobs.cc).
  void StartJob(Endpoint endpoint);
  // Runs `event` now, or after OnSubmitted when the id is not known yet.
  void RunEvent(std::function<void()> event);

  // Output (http_session.cc).
  void SendJson(unsigned status, const std::string& body,
                const std::vector<std::pair<std::string, std::string>>& headers = {});
  void SendError(const ApiError& error,
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

  // The request's job.
  ResponseMeta meta_;
  bool streaming_ = false;
  bool include_usage_ = false;
  bool stream_started_ = false;
  std::optional<JobId> job_id_;
  bool job_ended_ = false;
  int64_t prompt_tokens_ = 0;
  int64_t completion_tokens_ = 0;
  double last_progress_note_s_ = 0;
  std::vector<std::function<void()>> early_events_;

  // Output queue: one write at a time.
  std::deque<std::string> out_;
  size_t out_bytes_ = 0;
  bool writing_ = false;
  bool response_queued_ = false;
};

}  // namespace millipede
