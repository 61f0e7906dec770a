// The OpenAI-compatible HTTP front end (Boost.Beast): /v1/completions and /v1/chat/completions
// (JSON or SSE streaming), /v1/models, /tokenize and /detokenize, /health and /ready, over a
// JobService.
//
// Routes:
//   POST /v1/completions, POST /v1/chat/completions  jobs (one per choice, `n`); `stream: true`
//        answers with SSE events ending in "data: [DONE]"; a client that disconnects cancels
//        its jobs.
//   GET  /v1/models, GET /v1/models/{id}            the served model.
//   POST /tokenize, POST /detokenize                 as vLLM's server has them.
//   GET  /health   200 while the process and its workers are up.
//   GET  /ready    200 when a token was produced within `ready_recent_s`, else after a
//                  one-token canary job succeeds (503 with the reason otherwise).
// With an API key, every route but /health and /ready needs "Authorization: Bearer KEY" (401
// otherwise). The POST routes take JSON: another declared Content-Type is 415. Errors use
// OpenAI's shape {"error": {"message", "type", "param", "code"}}; every refusal is counted
// through JobService::CountRefusal.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "api/job_service.h"
#include "common/status.h"
#include "http/chat_template.h"
#include "http/openai_protocol.h"

namespace millipede {

struct OpenAiServerOptions {
  // "HOST:PORT"; port 0 picks a free one (see OpenAiServer::port()).
  std::string bind_address = "127.0.0.1:8000";
  // Empty: no authentication.
  std::string api_key;
  // The name clients use; empty = ModelInfo::id.
  std::string served_model_name;
  // Request bodies above this get 413 (token-id arrays of million-token prompts are ~8 MB).
  int64_t max_body_bytes = 64ll << 20;
  // Threads running the event loop, and threads tokenizing and submitting jobs.
  int io_threads = 2;
  int submit_threads = 2;
  // /ready: a token this recent means ready without a canary; the canary's time limit.
  double ready_recent_s = 30;
  double canary_timeout_s = 30;
  // Seconds a keep-alive connection may sit idle, and a request may take to arrive.
  double idle_timeout_s = 60;
  // The chat template chats are rendered with (SetUpChatTemplate in chat_template.h); null: the
  // built-in formats, unless `chat_template_error` says why the model's own template cannot be used
  // (chats are then refused with that reason).
  std::shared_ptr<const ChatTemplate> chat_template;
  std::string chat_template_error;
  // The most tokens a chat without max_tokens / max_completion_tokens generates, bounded by
  // what the context leaves (--default-max-tokens); 0: the rest of the context.
  int64_t chat_default_max_tokens = kDefaultChatMaxTokens;
};

class OpenAiServer {
 public:
  // Binds, starts the threads and returns; InvalidArgument for a malformed address, IoError
  // when the address cannot be bound. `service` must outlive the server.
  static StatusOr<std::unique_ptr<OpenAiServer>> Start(JobService& service,
                                                       const OpenAiServerOptions& options);
  // Stops accepting, cancels the jobs of open requests, closes connections, joins the threads.
  ~OpenAiServer();

  OpenAiServer(const OpenAiServer&) = delete;
  OpenAiServer& operator=(const OpenAiServer&) = delete;

  // The bound port.
  int port() const;

  class Impl;

 private:
  explicit OpenAiServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace millipede
