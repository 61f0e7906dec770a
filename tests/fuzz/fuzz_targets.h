// The fuzz targets: untrusted bytes through the parsers of both front ends, without sockets.
// libFuzzer builds call them from LLVMFuzzerTestOneInput (http_fuzzer.cc, capnp_fuzzer.cc); the
// randomized test (fuzz_test.cc) calls the same functions.
//
// Every input must end in a clean refusal or an accepted request: the result is OK, or Internal
// naming a broken invariant (an error without a message or status, a response body that is not
// valid JSON, an admitted job outside the limits, an admission error with a server's code).
// A crash, an uncaught exception, a sanitizer report or a hang is a failure the runtime reports.
#pragma once

#include <string_view>

#include "common/status.h"

namespace millipede::fuzz {

// How far an input got; each target reports the deepest stage any of its requests reached.
enum class FuzzStage {
  kNothing,       // no request (the peer sent nothing, or too little to parse)
  kRefusedWire,   // refused by the HTTP parser or the Cap'n Proto reader
  kRefusedRoute,  // refused by routing (401, 404, 405, 415)
  kRouted,        // a route without a body (probes, models)
  kRefusedBody,   // the body was refused (JSON, a field, the model)
  kRefusedAdmit,  // refused by admission
  kAnswered,      // /tokenize or /detokenize answered
  kAdmitted,      // a job admitted
};

// Raw bytes as a connection would deliver them: HTTP/1.1 requests (pipelined while the
// connection stays open), each parsed with the server's limits, routed with and without the
// server's API key, and JSON routes through the OpenAI protocol layer (/v1/completions,
// /v1/chat/completions) and admission, or through /tokenize and /detokenize.
StatusOr<FuzzStage> FuzzHttpRequest(std::string_view input);

// Raw bytes as one Cap'n Proto message (segment table, then segments), read with the RPC
// server's reader limits as a JobSpec, converted as `submit` converts it, then admitted.
StatusOr<FuzzStage> FuzzJobSpec(std::string_view input);

}  // namespace millipede::fuzz
