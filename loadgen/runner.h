// Sending a plan to the service and recording what each request saw, over either API. Both
// runners send request i at plan[i].send_at_s after the run's start (later when
// max_concurrency requests are already in flight), stream its output with the model's EOS
// ignored (so it generates exactly its output length) and greedy sampling, and cancel or
// disconnect the requests the plan says at the point it says.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "loadgen/bench_stats.h"
#include "loadgen/http_wire.h"
#include "loadgen/workload.h"

namespace millipede {
struct ClientConnection;
}

namespace millipede::loadgen {

using Clock = std::chrono::steady_clock;

struct RunOptions {
  int64_t vocab_size = 0;        // prompt ids are drawn from [0, vocab_size)
  uint64_t seed = 0;             // the prompts' seed (RequestPromptIds)
  int64_t document_tokens = 0;   // the documents' length (DocumentSpec)
  int64_t max_concurrency = 0;   // requests in flight at most; 0 = no limit
  double request_timeout_s = 0;  // a request still running this long after its send fails
                                 // ("timeout") and is cancelled; 0 = no limit
  // RPC only: the attention policy (policy-file JSON) every request carries; empty: the
  // workers' default.
  std::string policy_json;
  // HTTP only.
  std::string model;
  std::string api_key;
};

// Whether a request planned to be cancelled has reached its cancel point: prefill has started
// (or output arrived) for a cancel at 0 tokens, else that many outputs arrived.
bool CancelDue(const PlannedRequest& plan, bool prefill_started, int64_t outputs);

// Runs the plan over the Cap'n Proto API on `connection` (one connection, every request
// multiplexed on it); one record per planned request, in plan order. A lost connection fails
// the requests still running.
StatusOr<std::vector<RequestRecord>> RunRpc(ClientConnection& connection,
                                            const std::vector<PlannedRequest>& plan,
                                            const RunOptions& options);

// Runs the plan over the OpenAI HTTP API (POST /v1/completions, stream: true, token-id
// prompts), one connection and thread per request; one record per planned request, in plan
// order. A cancel closes the connection (the server cancels a disconnected client's job).
StatusOr<std::vector<RequestRecord>> RunHttp(const HttpTarget& target,
                                             const std::vector<PlannedRequest>& plan,
                                             const RunOptions& options);

// The model a load over HTTP names and the vocabulary its prompt ids come from, as a server's
// GET /v1/models body lists them.
struct ListedModel {
  std::string id;
  int64_t vocab_size = 0;  // 0: the server does not report one (not every server does)
};

// The entry of a GET /v1/models body (OpenAI's {"object": "list", "data": [...]}) whose id is
// `wanted`, or the first entry when `wanted` is empty, or the only entry of a one-model list (a
// server answers to other names of its model too); InvalidArgument for a body that is not such a
// list, an empty list, a model not listed, or a vocab_size that is not a positive integer.
StatusOr<ListedModel> ModelFromList(const std::string& body, const std::string& wanted);

// A new record for `plan` (outcome unset).
RequestRecord RecordFor(const PlannedRequest& plan);

// Seconds from `t0` to now.
double SecondsSince(Clock::time_point t0);

}  // namespace millipede::loadgen
