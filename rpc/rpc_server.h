// The Cap'n Proto front end of a JobService: the `Millipede` bootstrap interface of
// rpc/millipede.capnp served on a TCP address, on the calling thread's KJ event loop. Job
// events (which the service delivers on its own thread) reach the loop through an EventPump.
#pragma once

#include <capnp/message.h>
#include <kj/async-io.h>

#include <memory>
#include <string>

#include "api/job_service.h"
#include "rpc/event_pump.h"

namespace millipede::rpc {

// Limits on every message a peer sends: a million-token prompt as ids is 4 MB, so 64 MiB leaves
// room; anything larger is refused by the transport (the connection is closed with an error).
// Prompts above AdmissionLimits::max_prompt_bytes but under this get a clear INVALID_ARGUMENT.
constexpr uint64_t kMaxMessageBytes = uint64_t{64} << 20;
constexpr int kMaxNesting = 16;
capnp::ReaderOptions RpcReaderOptions();

class RpcServer {
 public:
  // Listens on `bind_address` ("HOST:PORT"; port 0 picks one) with `io`'s network. The service
  // must outlive the server. Must be called on the loop's thread.
  static StatusOr<std::unique_ptr<RpcServer>> Start(JobService& service, kj::AsyncIoContext& io,
                                                    const std::string& bind_address);
  ~RpcServer();

  int port() const;
  // Where the service posts job events; run by Start() on the loop.
  EventPump& pump();
  // Resolves once every callback call that was sent has completed (or failed).
  kj::Promise<void> OnCallbacksDone();

  class Impl;

 private:
  explicit RpcServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace millipede::rpc
