// The coordinator's front ends — the Cap'n Proto RPC server and, when built, the OpenAI HTTP
// server — on a thread of their own that runs the KJ event loop, so that the process's main
// thread can make every MPI call (the scheduler's control loop).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "api/job_service.h"
#include "common/status.h"

namespace millipede {

struct FrontEndOptions {
  std::string rpc_bind = "127.0.0.1:7700";
  std::string http_bind = "127.0.0.1:8000";  // "off": no HTTP server
  std::string api_key;
  std::string served_model_name;
  // The HTTP API's chat template: the file chat_template_file (--chat-template) when set, else
  // the model's own from model_dir (empty: the built-in formats only).
  std::string model_dir;
  std::string chat_template_file;
  // A GGUF model's own template (empty text: none) and special tokens, read by the caller; used
  // instead of model_dir when `embedded_template` is set.
  bool embedded_template = false;
  std::string embedded_template_text;
  std::map<std::string, std::string> embedded_special_tokens;
  // The cap of a chat that names no max_tokens (--default-max-tokens; 0: the rest of the
  // context). Kept equal to the HTTP server's kDefaultChatMaxTokens.
  int64_t chat_default_max_tokens = 4096;
};

class FrontEnds {
 public:
  // Starts the thread and the servers; returns once they listen, or with the reason they could
  // not. `service` must outlive the front ends.
  static StatusOr<std::unique_ptr<FrontEnds>> Start(JobService& service,
                                                    const FrontEndOptions& options);
  // Stop() if still running.
  ~FrontEnds();

  // "rpc HOST:PORT[, http HOST:PORT]" with the ports bound.
  const std::string& addresses() const;
  // Lets the events already posted reach their clients (at most a few seconds), stops the
  // servers and joins the thread.
  void Stop();

  class Impl;

 private:
  explicit FrontEnds(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace millipede
