#include "common/sampling_params.h"

#include <cmath>
#include <limits>
#include <unordered_set>

namespace millipede {
namespace {

Status CheckLogitBias(const std::vector<LogitBias>& entries, int64_t vocab_size) {
  MP_REQUIRE(entries.size() <= kMaxLogitBiasEntries, "sampling: logit_bias has ", entries.size(),
             " entries; at most ", kMaxLogitBiasEntries, " are accepted");
  std::unordered_set<int32_t> seen;
  for (const LogitBias& e : entries) {
    MP_REQUIRE(e.id >= 0, "sampling: logit_bias token id ", e.id, " is negative");
    MP_REQUIRE(vocab_size <= 0 || e.id < vocab_size, "sampling: logit_bias token id ", e.id,
               " is outside the vocabulary [0, ", vocab_size, ")");
    MP_REQUIRE(std::isfinite(e.bias) && std::fabs(e.bias) <= kMaxLogitBias,
               "sampling: logit_bias for token ", e.id, " is ", e.bias, "; it must lie in [-",
               kMaxLogitBias, ", ", kMaxLogitBias, "]");
    MP_REQUIRE(seen.insert(e.id).second, "sampling: logit_bias names token ", e.id, " twice");
  }
  return OkStatus();
}

// "ID:BIAS", as in --logit-bias 42:-100.
StatusOr<LogitBias> ParseLogitBiasFlag(const std::string& text) {
  const size_t colon = text.find(':');
  MP_REQUIRE(colon != std::string::npos, "--logit-bias wants ID:BIAS, got \"", text, "\"");
  MP_ASSIGN_OR_RETURN(int64_t id, ParseInt64(text.substr(0, colon), "--logit-bias token id"));
  MP_ASSIGN_OR_RETURN(double bias, ParseDouble(text.substr(colon + 1), "--logit-bias bias"));
  MP_REQUIRE(id >= 0 && id <= std::numeric_limits<int32_t>::max(), "--logit-bias token id ", id,
             " out of range");
  return LogitBias{static_cast<int32_t>(id), static_cast<float>(bias)};
}

}  // namespace

const char kSamplingFlagsUsage[] = R"(  --temperature T        0 = greedy (default 0)
  --top-k K              keep the K most likely tokens (0 = off)
  --top-p P              nucleus sampling threshold (1 = off)
  --min-p P              drop tokens less likely than P x the most likely one (0 = off)
  --repetition-penalty R penalise ids of the prompt and the output (1 = off)
  --presence-penalty P   subtract P from the logit of every id generated so far (0 = off)
  --frequency-penalty F  subtract F x its count from the logit of every generated id (0 = off)
  --logit-bias ID:BIAS   add BIAS (in [-100, 100]) to token ID's logit (repeatable)
  --logprobs N           report each token's log-probability and N alternatives (0..20)
  --seed S               sampling seed (default 0)
)";

std::vector<std::string> SamplingFlagNames() {
  return {"temperature",
          "top-k",
          "top-p",
          "min-p",
          "repetition-penalty",
          "presence-penalty",
          "frequency-penalty",
          "logit-bias",
          "logprobs",
          "seed"};
}

StatusOr<SamplingParams> SamplingParamsFromFlags(const Flags& flags) {
  SamplingParams p;
  MP_ASSIGN_OR_RETURN(double temperature, flags.GetDouble("temperature", 0.0));
  MP_ASSIGN_OR_RETURN(int64_t top_k, flags.GetInt("top-k", 0));
  MP_ASSIGN_OR_RETURN(double top_p, flags.GetDouble("top-p", 1.0));
  MP_ASSIGN_OR_RETURN(double min_p, flags.GetDouble("min-p", 0.0));
  MP_ASSIGN_OR_RETURN(double repetition, flags.GetDouble("repetition-penalty", 1.0));
  MP_ASSIGN_OR_RETURN(double presence, flags.GetDouble("presence-penalty", 0.0));
  MP_ASSIGN_OR_RETURN(double frequency, flags.GetDouble("frequency-penalty", 0.0));
  MP_ASSIGN_OR_RETURN(int64_t logprobs, flags.GetInt("logprobs", -1));
  MP_ASSIGN_OR_RETURN(int64_t seed, flags.GetInt("seed", 0));
  MP_REQUIRE(top_k >= 0 && top_k <= std::numeric_limits<int32_t>::max(), "--top-k: top_k ", top_k,
             " must lie in [0, 2^31)");
  MP_REQUIRE(logprobs >= -1 && logprobs <= kMaxTopLogprobs, "--logprobs: logprobs ", logprobs,
             " must lie in [0, ", kMaxTopLogprobs, "]");
  p.temperature = static_cast<float>(temperature);
  p.top_k = static_cast<int32_t>(top_k);
  p.top_p = static_cast<float>(top_p);
  p.min_p = static_cast<float>(min_p);
  p.repetition_penalty = static_cast<float>(repetition);
  p.presence_penalty = static_cast<float>(presence);
  p.frequency_penalty = static_cast<float>(frequency);
  p.logprobs = static_cast<int32_t>(logprobs);
  p.seed = static_cast<uint64_t>(seed);
  for (const std::string& entry : flags.GetAll("logit-bias")) {
    MP_ASSIGN_OR_RETURN(LogitBias bias, ParseLogitBiasFlag(entry));
    p.logit_bias.push_back(bias);
  }
  MP_RETURN_IF_ERROR(CheckSamplingParams(p));
  return p;
}

Status CheckSamplingParams(const SamplingParams& params, int64_t vocab_size) {
  MP_REQUIRE(std::isfinite(params.temperature) && params.temperature >= 0.0f,
             "sampling: temperature ", params.temperature, " must be finite and >= 0");
  MP_REQUIRE(params.top_k >= 0, "sampling: top_k ", params.top_k, " must be >= 0 (0 = off)");
  MP_REQUIRE(params.top_p > 0.0f && params.top_p <= 1.0f, "sampling: top_p ", params.top_p,
             " must lie in (0, 1] (1 = off)");
  MP_REQUIRE(std::isfinite(params.repetition_penalty) && params.repetition_penalty > 0.0f,
             "sampling: repetition_penalty ", params.repetition_penalty,
             " must be finite and > 0 (1 = off)");
  MP_REQUIRE(params.presence_penalty >= -2.0f && params.presence_penalty <= 2.0f,
             "sampling: presence_penalty ", params.presence_penalty,
             " must lie in [-2, 2] (0 = off)");
  MP_REQUIRE(params.frequency_penalty >= -2.0f && params.frequency_penalty <= 2.0f,
             "sampling: frequency_penalty ", params.frequency_penalty,
             " must lie in [-2, 2] (0 = off)");
  MP_REQUIRE(params.min_p >= 0.0f && params.min_p <= 1.0f, "sampling: min_p ", params.min_p,
             " must lie in [0, 1] (0 = off)");
  MP_REQUIRE(params.logprobs >= -1 && params.logprobs <= kMaxTopLogprobs, "sampling: logprobs ",
             params.logprobs, " must lie in [0, ", kMaxTopLogprobs, "] (or -1 for none)");
  return CheckLogitBias(params.logit_bias, vocab_size);
}

}  // namespace millipede
