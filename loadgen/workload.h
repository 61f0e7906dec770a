// What millipede-loadgen sends and when: request lengths drawn from a distribution, arrival
// times from a Poisson or fixed-rate process (or all at once), requests placed at given times,
// and which requests are cancelled at which point. Pure code: the same options and seed give
// the same plan.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace millipede::loadgen {

// One class of a length mix: drawn with probability weight / (sum of weights).
struct LengthClass {
  double weight = 1;
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
};

// Inclusive range of lengths, drawn uniformly; lo == hi is a fixed length.
struct LengthRange {
  int64_t lo = 0;
  int64_t hi = 0;
};

// Request lengths: a mix of classes when `mix` is not empty, else prompt and output lengths
// drawn independently from their ranges.
struct LengthSpec {
  std::vector<LengthClass> mix;
  LengthRange prompt{1024, 1024};
  LengthRange output{128, 128};
};

enum class ArrivalProcess { kPoisson, kFixed };

// A request sent at a fixed time, outside the arrival process (e.g. one long prompt first).
struct PlacedRequest {
  double at_s = 0;
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
};

// Questions about shared documents (the prefix cache's workload): `share` of the arrivals start
// with one of `count` documents of `tokens` tokens each, drawn uniformly, followed by their own
// prompt of the drawn length; the others are fresh prompts. count 0: none.
struct DocumentSpec {
  int64_t count = 0;
  int64_t tokens = 0;
  double share = 0.8;
};

struct WorkloadOptions {
  // Requests per second; infinity sends every request at time 0.
  double rate = std::numeric_limits<double>::infinity();
  ArrivalProcess process = ArrivalProcess::kPoisson;
  // The arrival process stops at whichever comes first (at least one must be set).
  std::optional<int64_t> num_requests;
  std::optional<double> duration_s;
  LengthSpec lengths;
  std::vector<PlacedRequest> placed;
  DocumentSpec documents;
  // Share of the requests (arrivals and placed alike) cancelled mid-way, in [0, 1].
  double cancel_fraction = 0;
  uint64_t seed = 0;
};

// One request of the plan.
struct PlannedRequest {
  int64_t index = 0;  // position in the plan (send order)
  double send_at_s = 0;
  int64_t prompt_tokens = 0;  // a document's tokens included
  int64_t output_tokens = 0;
  bool placed = false;  // from WorkloadOptions::placed, not the arrival process
  // Cancel (or disconnect) once this many output tokens have arrived; 0 = during prefill (at the
  // first prefill progress report, or the first token if none comes first). Always below
  // output_tokens, so the cancel is sent before the last token.
  std::optional<int64_t> cancel_after_tokens;
  // The document its prompt starts with (DocumentSpec), -1: none.
  int64_t document = -1;
};

// Checks the options: positive rate, a stop condition (a duration needs a finite rate), lengths
// >= 1 with lo <= hi, positive weights, placed times >= 0, cancel_fraction in [0, 1].
Status ValidateWorkload(const WorkloadOptions& options);

// The requests sorted by send time (ties: placed requests first, then arrival order), indexed
// in that order.
StatusOr<std::vector<PlannedRequest>> PlanWorkload(const WorkloadOptions& options);

// The prompt of request `index`: `length` ids uniform in [0, vocab_size), keyed by (seed,
// index) so a request's prompt does not depend on the others.
std::vector<int32_t> PromptIds(uint64_t seed, int64_t index, int64_t length, int64_t vocab_size);

// One request about each document (DocumentSpec), in order, all at 0, of the shortest prompt
// length of the load and one output token: what --warm-documents sends one at a time before the
// load, so that the load's questions find every document cached. Their own prompt ids are keyed
// apart from the load's requests and the documents (indices below -documents.count).
std::vector<PlannedRequest> WarmUpPlan(const WorkloadOptions& options);

// The whole prompt of `request`: the ids of its document (the same for every request about it:
// PromptIds keyed by the document, apart from every request's), then PromptIds of its own part.
std::vector<int32_t> RequestPromptIds(uint64_t seed, const PlannedRequest& request,
                                      int64_t document_tokens, int64_t vocab_size);

// Parsers for the command line. "N" or "A:B" (inclusive, 1 <= A <= B).
StatusOr<LengthRange> ParseLengthRange(const std::string& text, const std::string& what);
// "W:P:O,W:P:O,..." (weight:prompt_tokens:output_tokens).
StatusOr<std::vector<LengthClass>> ParseLengthMix(const std::string& text);
// "T:P:O" (seconds:prompt_tokens:output_tokens).
StatusOr<PlacedRequest> ParsePlacedRequest(const std::string& text);
// "N:T" (documents:tokens each).
StatusOr<DocumentSpec> ParseDocuments(const std::string& text);
// A positive number of requests per second or "inf".
StatusOr<double> ParseRate(const std::string& text);

}  // namespace millipede::loadgen
