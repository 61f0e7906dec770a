// What the fuzz targets run against: a small byte-level BPE tokenizer with Llama 3's special
// tokens and a BOS, the served model as the HTTP front end sees it, the server's options and the
// admission limits of a two-worker service, and the checks every admitted job must pass.
#pragma once

#include <memory>
#include <string>

#include "api/job_service.h"
#include "common/json_util.h"
#include "common/status.h"
#include "coordinator/admission.h"
#include "http/api_error.h"
#include "http/openai_protocol.h"
#include "http/openai_server.h"
#include "tokenizer/tokenizer.h"

namespace millipede::fuzz {

// The served model's names and the API key the targets expect (seeds use them).
inline constexpr const char* kModelName = "fuzz-model";
inline constexpr const char* kModelId = "org/fuzz-model-id";
inline constexpr const char* kApiKey = "fuzz-key";

struct FuzzService {
  std::unique_ptr<Tokenizer> tokenizer;
  ServedModel model;
  OpenAiServerOptions options;
  AdmissionLimits limits;
};

// Built once per process (the tokenizer is trained on first use).
const FuzzService& GetFuzzService();

// Runs `request` through admission as the scheduler does: true for an admitted job that respects
// the limits, false for a refusal with a client's error code (InvalidArgument, OutOfRange,
// Unimplemented) and a message; Internal naming what broke otherwise.
StatusOr<bool> CheckAdmission(const JobRequest& request);

// An API error as a client receives it: a 4xx/5xx status, a message, and a body that is valid
// JSON of OpenAI's error shape whatever bytes the message quotes. Internal otherwise.
Status CheckApiError(const ApiError& error);

// Parses `text` as a JSON response body (invalid UTF-8 in it would make clients fail).
StatusOr<Json> CheckJsonBody(const std::string& text, const std::string& what);

}  // namespace millipede::fuzz
