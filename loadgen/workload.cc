#include "loadgen/workload.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "common/flags.h"

namespace millipede::loadgen {
namespace {

// SplitMix64: a small generator whose output is the same on every platform and standard
// library (std::uniform_*_distribution's is not), so a seed names one plan everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1).
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // Uniform in [lo, hi] (inclusive), without modulo bias.
  int64_t Between(int64_t lo, int64_t hi) {
    const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
    if (span == 0) return static_cast<int64_t>(Next());  // the whole 64-bit range
    const uint64_t limit = UINT64_MAX - UINT64_MAX % span;
    uint64_t x = Next();
    while (x >= limit) x = Next();
    return lo + static_cast<int64_t>(x % span);
  }

 private:
  uint64_t state_;
};

// Independent streams of one seed: arrivals, lengths, cancels and each prompt.
uint64_t StreamSeed(uint64_t seed, uint64_t stream) {
  return Rng(seed ^ (stream * 0xD1B54A32D192ED03ull)).Next();
}

Status ValidateRange(const LengthRange& r, const char* what) {
  MP_REQUIRE(r.lo >= 1 && r.lo <= r.hi, what, " lengths must satisfy 1 <= lo <= hi, got ", r.lo,
             ":", r.hi);
  return OkStatus();
}

// Arrival times of the arrival process: the first at 0, then gaps of 1/rate (fixed) or drawn
// from the exponential distribution of mean 1/rate (Poisson).
std::vector<double> ArrivalTimes(const WorkloadOptions& o) {
  Rng rng(StreamSeed(o.seed, 1));
  const int64_t max_count = o.num_requests.value_or(std::numeric_limits<int64_t>::max());
  std::vector<double> times;
  double t = 0;
  while (static_cast<int64_t>(times.size()) < max_count && (!o.duration_s || t < *o.duration_s)) {
    times.push_back(t);
    if (std::isinf(o.rate)) continue;
    // Fixed times are i / rate, not a running sum, so a duration holds exactly rate x duration.
    t = o.process == ArrivalProcess::kFixed
            ? static_cast<double>(times.size()) / o.rate
            : t - std::log1p(-rng.Uniform()) / o.rate;  // 1 - u lies in (0, 1]
  }
  return times;
}

void DrawLengths(const LengthSpec& spec, Rng& rng, PlannedRequest* r) {
  if (spec.mix.empty()) {
    r->prompt_tokens = rng.Between(spec.prompt.lo, spec.prompt.hi);
    r->output_tokens = rng.Between(spec.output.lo, spec.output.hi);
    return;
  }
  double total = 0;
  for (const LengthClass& c : spec.mix) total += c.weight;
  double u = rng.Uniform() * total;
  const LengthClass* chosen = &spec.mix.back();
  for (const LengthClass& c : spec.mix) {
    if (u < c.weight) {
      chosen = &c;
      break;
    }
    u -= c.weight;
  }
  r->prompt_tokens = chosen->prompt_tokens;
  r->output_tokens = chosen->output_tokens;
}

// Chooses round(fraction x n) requests to cancel, each at a point uniform in [0, output - 1]
// tokens.
void DrawCancels(double fraction, uint64_t seed, std::vector<PlannedRequest>& plan) {
  const size_t n = plan.size();
  const size_t count = static_cast<size_t>(std::llround(fraction * static_cast<double>(n)));
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  Rng rng(StreamSeed(seed, 3));
  for (size_t i = 0; i < count; ++i) {  // partial Fisher-Yates
    std::swap(order[i], order[i + static_cast<size_t>(rng.Between(0, int64_t(n - i - 1)))]);
    PlannedRequest& r = plan[order[i]];
    r.cancel_after_tokens = rng.Between(0, r.output_tokens - 1);
  }
}

std::vector<std::string> Split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, sep)) parts.push_back(part);
  if (!text.empty() && text.back() == sep) parts.emplace_back();
  return parts;
}

}  // namespace

Status ValidateWorkload(const WorkloadOptions& o) {
  MP_REQUIRE(o.rate > 0, "the rate must be positive (or inf), got ", o.rate);
  MP_REQUIRE(o.num_requests || o.duration_s, "give a number of requests or a duration");
  MP_REQUIRE(!o.num_requests || *o.num_requests >= 0, "the number of requests must be >= 0");
  MP_REQUIRE(!o.duration_s || *o.duration_s > 0, "the duration must be positive");
  MP_REQUIRE(!o.duration_s || std::isfinite(o.rate) || o.num_requests,
             "a duration needs a finite rate (or a number of requests)");
  MP_RETURN_IF_ERROR(ValidateRange(o.lengths.prompt, "prompt"));
  MP_RETURN_IF_ERROR(ValidateRange(o.lengths.output, "output"));
  for (const LengthClass& c : o.lengths.mix) {
    MP_REQUIRE(c.weight > 0 && std::isfinite(c.weight), "mix weights must be positive");
    MP_REQUIRE(c.prompt_tokens >= 1 && c.output_tokens >= 1, "mix lengths must be >= 1");
  }
  for (const PlacedRequest& p : o.placed) {
    MP_REQUIRE(p.at_s >= 0 && std::isfinite(p.at_s), "placed requests need a time >= 0");
    MP_REQUIRE(p.prompt_tokens >= 1 && p.output_tokens >= 1, "placed lengths must be >= 1");
  }
  MP_REQUIRE(o.documents.count >= 0, "the number of documents must be >= 0");
  MP_REQUIRE(o.documents.count == 0 || o.documents.tokens >= 1,
             "documents need at least one token, got ", o.documents.tokens);
  MP_REQUIRE(o.documents.share >= 0 && o.documents.share <= 1,
             "the document share must be in [0, 1], got ", o.documents.share);
  MP_REQUIRE(o.cancel_fraction >= 0 && o.cancel_fraction <= 1,
             "the cancel fraction must be in [0, 1], got ", o.cancel_fraction);
  return OkStatus();
}

StatusOr<std::vector<PlannedRequest>> PlanWorkload(const WorkloadOptions& options) {
  MP_RETURN_IF_ERROR(ValidateWorkload(options));
  std::vector<PlannedRequest> plan;
  for (const PlacedRequest& p : options.placed) {
    plan.push_back(PlannedRequest{0, p.at_s, p.prompt_tokens, p.output_tokens, true, {}, -1});
  }
  Rng lengths(StreamSeed(options.seed, 2));
  Rng documents(StreamSeed(options.seed, 5));
  const DocumentSpec& docs = options.documents;
  for (double t : ArrivalTimes(options)) {
    PlannedRequest r;
    r.send_at_s = t;
    DrawLengths(options.lengths, lengths, &r);
    if (docs.count > 0 && documents.Uniform() < docs.share) {
      r.document = documents.Between(0, docs.count - 1);
      r.prompt_tokens += docs.tokens;
    }
    plan.push_back(r);
  }
  std::stable_sort(plan.begin(), plan.end(), [](const PlannedRequest& a, const PlannedRequest& b) {
    return a.send_at_s < b.send_at_s;
  });
  for (size_t i = 0; i < plan.size(); ++i) plan[i].index = static_cast<int64_t>(i);
  DrawCancels(options.cancel_fraction, options.seed, plan);
  return plan;
}

std::vector<int32_t> PromptIds(uint64_t seed, int64_t index, int64_t length, int64_t vocab_size) {
  Rng rng(StreamSeed(StreamSeed(seed, 4), static_cast<uint64_t>(index)));
  std::vector<int32_t> ids(static_cast<size_t>(length));
  for (int32_t& id : ids) id = static_cast<int32_t>(rng.Between(0, vocab_size - 1));
  return ids;
}

std::vector<PlannedRequest> WarmUpPlan(const WorkloadOptions& options) {
  const DocumentSpec& docs = options.documents;
  const std::vector<LengthClass>& mix = options.lengths.mix;
  const int64_t own = mix.empty()
                          ? options.lengths.prompt.lo
                          : std::ranges::min(mix, {}, &LengthClass::prompt_tokens).prompt_tokens;
  std::vector<PlannedRequest> plan;
  for (int64_t d = 0; d < docs.count; ++d) {
    PlannedRequest r;
    r.index = -1 - docs.count - d;
    r.prompt_tokens = docs.tokens + own;
    r.output_tokens = 1;
    r.document = d;
    plan.push_back(r);
  }
  return plan;
}

std::vector<int32_t> RequestPromptIds(uint64_t seed, const PlannedRequest& request,
                                      int64_t document_tokens, int64_t vocab_size) {
  if (request.document < 0)
    return PromptIds(seed, request.index, request.prompt_tokens, vocab_size);
  // Documents are keyed below every request's index: -1 - document.
  std::vector<int32_t> ids = PromptIds(seed, -1 - request.document, document_tokens, vocab_size);
  const std::vector<int32_t> own =
      PromptIds(seed, request.index, request.prompt_tokens - document_tokens, vocab_size);
  ids.insert(ids.end(), own.begin(), own.end());
  return ids;
}

StatusOr<DocumentSpec> ParseDocuments(const std::string& text) {
  const std::vector<std::string> f = Split(text, ':');
  MP_REQUIRE(f.size() == 2, "--documents is COUNT:TOKENS, got \"", text, "\"");
  DocumentSpec d;
  MP_ASSIGN_OR_RETURN(d.count, ParseInt64(f[0], "--documents count"));
  MP_ASSIGN_OR_RETURN(d.tokens, ParseInt64(f[1], "--documents tokens"));
  MP_REQUIRE(d.count >= 1 && d.tokens >= 1, "--documents needs COUNT and TOKENS >= 1, got \"", text,
             "\"");
  return d;
}

StatusOr<LengthRange> ParseLengthRange(const std::string& text, const std::string& what) {
  const std::vector<std::string> parts = Split(text, ':');
  MP_REQUIRE(parts.size() == 1 || parts.size() == 2, what, " must be N or A:B, got \"", text, "\"");
  MP_ASSIGN_OR_RETURN(int64_t lo, ParseInt64(parts[0], what));
  int64_t hi = lo;
  if (parts.size() == 2) {
    MP_ASSIGN_OR_RETURN(hi, ParseInt64(parts[1], what));
  }
  MP_REQUIRE(lo >= 1 && lo <= hi, what, " must satisfy 1 <= A <= B, got \"", text, "\"");
  return LengthRange{lo, hi};
}

StatusOr<std::vector<LengthClass>> ParseLengthMix(const std::string& text) {
  std::vector<LengthClass> mix;
  for (const std::string& item : Split(text, ',')) {
    const std::vector<std::string> f = Split(item, ':');
    MP_REQUIRE(f.size() == 3, "--mix entries are WEIGHT:PROMPT:OUTPUT, got \"", item, "\"");
    LengthClass c;
    MP_ASSIGN_OR_RETURN(c.weight, ParseDouble(f[0], "--mix weight"));
    MP_ASSIGN_OR_RETURN(c.prompt_tokens, ParseInt64(f[1], "--mix prompt tokens"));
    MP_ASSIGN_OR_RETURN(c.output_tokens, ParseInt64(f[2], "--mix output tokens"));
    MP_REQUIRE(c.weight > 0 && std::isfinite(c.weight), "--mix weights must be positive, got \"",
               item, "\"");
    MP_REQUIRE(c.prompt_tokens >= 1 && c.output_tokens >= 1, "--mix lengths must be >= 1, got \"",
               item, "\"");
    mix.push_back(c);
  }
  MP_REQUIRE(!mix.empty(), "--mix is empty");
  return mix;
}

StatusOr<PlacedRequest> ParsePlacedRequest(const std::string& text) {
  const std::vector<std::string> f = Split(text, ':');
  MP_REQUIRE(f.size() == 3, "--place is SECONDS:PROMPT:OUTPUT, got \"", text, "\"");
  PlacedRequest p;
  MP_ASSIGN_OR_RETURN(p.at_s, ParseDouble(f[0], "--place seconds"));
  MP_ASSIGN_OR_RETURN(p.prompt_tokens, ParseInt64(f[1], "--place prompt tokens"));
  MP_ASSIGN_OR_RETURN(p.output_tokens, ParseInt64(f[2], "--place output tokens"));
  MP_REQUIRE(p.at_s >= 0 && std::isfinite(p.at_s), "--place time must be >= 0, got \"", text, "\"");
  MP_REQUIRE(p.prompt_tokens >= 1 && p.output_tokens >= 1, "--place lengths must be >= 1, got \"",
             text, "\"");
  return p;
}

StatusOr<double> ParseRate(const std::string& text) {
  if (text == "inf") return std::numeric_limits<double>::infinity();
  MP_ASSIGN_OR_RETURN(double rate, ParseDouble(text, "--rate"));
  MP_REQUIRE(rate > 0 && std::isfinite(rate), "--rate must be positive or inf, got \"", text, "\"");
  return rate;
}

}  // namespace millipede::loadgen
