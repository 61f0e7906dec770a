#include "coordinator/admission.h"

#include <algorithm>

#include "policy/head_groups.h"
#include "tokenizer/utf8.h"

namespace millipede {
namespace {

constexpr size_t kMaxStopIds = 256;
constexpr size_t kMaxStopStrings = 16;
constexpr size_t kMaxStopStringBytes = 256;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Characters of UTF-8 text (bytes that do not continue a sequence).
int64_t CountCharacters(const std::string& text) {
  int64_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}

// The largest max_new_tokens that fits the context limit and the workers' KV budget after
// `prompt` tokens (0 when none does).
int64_t TokensLeft(int64_t prompt, const AdmissionLimits& limits) {
  const int64_t n = std::max(1, limits.num_workers);
  const int64_t by_context = limits.context_limit - prompt;
  // KvPositionsPerRank(prompt, m, n) <= capacity  <=>  DecodeRowsPerRank(m, n) <= capacity -
  // the prompt's rows  <=>  m - 1 <= (capacity - prompt rows) * n.
  const int64_t room =
      limits.kv_capacity_per_rank - PromptRowsBoundPerRank(prompt, static_cast<int>(n));
  const int64_t by_kv = room < 0 ? 0 : room * n + 1;
  return std::max<int64_t>(0, std::min(by_context, by_kv));
}

}  // namespace

int64_t MaxModelLen(const AdmissionLimits& limits) {
  const int64_t n = std::max(1, limits.num_workers);
  const int64_t capacity = limits.kv_capacity_per_rank;
  if (capacity < 2) return 0;  // a prompt's first token takes 2 rows on some rank
  // A prompt of p = 2n(k - 1) + j tokens (1 <= j <= 2n) holds at most 2k rows on a rank and
  // leaves (capacity - 2k) rows, so n x (capacity - 2k) + 1 output tokens; the total
  // p + that = n x (capacity - 2) + j + 1 is least at j = 1 (TokensLeft).
  const int64_t by_kv = n * (capacity - 2) + 2;
  return std::max<int64_t>(0, std::min(limits.context_limit, by_kv));
}

int64_t KvCostPerRank(const std::optional<AttentionPolicy>& policy, int64_t positions,
                      int64_t max_step_tokens, int64_t num_layers, int64_t num_kv_heads) {
  if (!policy.has_value() || positions <= 0 || num_layers <= 0 || num_kv_heads <= 0)
    return positions;
  const int64_t step = max_step_tokens > 0 ? std::min(max_step_tokens, positions) : positions;
  return CeilDiv(KvHeadRows(*policy, num_kv_heads, positions, step), num_layers * num_kv_heads);
}

namespace {

// The prompt's token ids: the text encoded (valid UTF-8, within the byte limit) or the ids given
// (within the vocabulary).
StatusOr<std::vector<int32_t>> PromptIds(const JobRequest& request, const Tokenizer& tokenizer,
                                         const AdmissionLimits& limits) {
  const bool has_text = !request.prompt_text.empty(), has_ids = !request.prompt_ids.empty();
  MP_REQUIRE(has_text || has_ids, "the prompt is empty");
  MP_REQUIRE(!(has_text && has_ids), "give the prompt as text or as token ids, not both");
  std::vector<int32_t> ids;
  if (has_text) {
    MP_REQUIRE(static_cast<int64_t>(request.prompt_text.size()) <= limits.max_prompt_bytes,
               "the prompt text has ", request.prompt_text.size(), " bytes (",
               CountCharacters(request.prompt_text), " characters); at most ",
               limits.max_prompt_bytes, " bytes are accepted");
    const size_t bad = tokenizer_internal::FindInvalidUtf8(request.prompt_text);
    MP_REQUIRE(bad == std::string::npos, "the prompt text is not valid UTF-8 (at byte ", bad, ")");
    MP_ASSIGN_OR_RETURN(ids, EncodePrompt(tokenizer, request.prompt_text, request.add_bos));
    const size_t bos = request.add_bos && tokenizer.bos_id() ? 1 : 0;
    MP_REQUIRE(ids.size() > bos, "the prompt text encodes to no tokens");
  } else {
    MP_REQUIRE(static_cast<int64_t>(request.prompt_ids.size()) * 4 <= limits.max_prompt_bytes,
               "the prompt has ", request.prompt_ids.size(), " ids; at most ",
               limits.max_prompt_bytes / 4, " are accepted");
    ids = request.prompt_ids;
    for (size_t i = 0; i < ids.size(); ++i)
      MP_REQUIRE(ids[i] >= 0 && ids[i] < limits.vocab_size, "prompt token ", i, " has id ", ids[i],
                 ", outside the vocabulary [0, ", limits.vocab_size, ")");
  }
  return ids;
}

// Whether `positions` positions on a rank (`generated` of them generated tokens') fit the
// workers' KV capacity with every host-tier candidate of `policy` in their host tier.
bool FitsWithHostTier(const std::optional<AttentionPolicy>& policy, int64_t positions,
                      int64_t generated, const AdmissionLimits& limits) {
  if (!limits.selected_kv_host || !policy.has_value() || limits.num_layers <= 0 ||
      limits.num_kv_heads <= 0 || HostTierCandidates(*policy).empty())
    return false;
  const int64_t step =
      limits.max_step_tokens > 0 ? std::min(limits.max_step_tokens, positions) : positions;
  const int64_t rows =
      HostTierKvHeadRows(*policy, limits.num_kv_heads, positions, generated, step);
  return CeilDiv(rows, limits.num_layers * limits.num_kv_heads) <= limits.kv_capacity_per_rank;
}

}  // namespace

StatusOr<AdmittedJob> AdmitRequest(const JobRequest& request, const Tokenizer& tokenizer,
                                   const AdmissionLimits& limits) {
  MP_ASSIGN_OR_RETURN(std::vector<int32_t> ids, PromptIds(request, tokenizer, limits));
  MP_REQUIRE(request.max_new_tokens_to_limit || request.max_new_tokens >= 1,
             "max_new_tokens must be at least 1, got ", request.max_new_tokens);
  MP_RETURN_IF_ERROR(CheckSamplingParams(request.sampling, limits.vocab_size));
  MP_REQUIRE(request.stop_ids.size() <= kMaxStopIds, "at most ", kMaxStopIds, " stop ids");
  for (int32_t id : request.stop_ids)
    MP_REQUIRE(id >= 0 && id < limits.vocab_size, "stop id ", id, " is outside the vocabulary [0, ",
               limits.vocab_size, ")");
  MP_REQUIRE(request.stop_strings.size() <= kMaxStopStrings, "at most ", kMaxStopStrings,
             " stop strings");
  for (const std::string& s : request.stop_strings) {
    MP_REQUIRE(!s.empty() && s.size() <= kMaxStopStringBytes, "stop strings must have 1 to ",
               kMaxStopStringBytes, " bytes");
    MP_REQUIRE(tokenizer_internal::FindInvalidUtf8(s) == std::string::npos,
               "a stop string is not valid UTF-8");
  }
  std::optional<AttentionPolicy> policy;
  if (!request.policy_json.empty()) {
    // Parsed once, for this model's shape, and checked against what the workers said they run,
    // so that a policy they would refuse is refused here, before the job is queued; the workers
    // receive it parsed.
    MP_ASSIGN_OR_RETURN(policy, ParseAttentionPolicy(request.policy_json, limits.num_layers,
                                                     limits.num_kv_heads, "the attention policy"));
    MP_RETURN_IF_ERROR(CheckPolicyRunnable(*policy, limits.capabilities));
  }

  const int64_t prompt = static_cast<int64_t>(ids.size());
  const int64_t limit = limits.context_limit;
  if (prompt >= limit)
    return OutOfRangeError("the prompt has " + std::to_string(prompt) +
                           " tokens; the context limit is " + std::to_string(limit) +
                           " tokens and at least one generated token must fit");
  // A prompt that leaves no room keeps 1, so that the checks below name the numbers.
  int64_t max_new = request.max_new_tokens;
  if (request.max_new_tokens_to_limit) {
    const int64_t left = TokensLeft(prompt, limits);
    max_new = std::max<int64_t>(1, request.max_new_tokens >= 1
                                       ? std::min(left, request.max_new_tokens)
                                       : left);
  }
  if (max_new > limit - prompt)
    return OutOfRangeError("prompt (" + std::to_string(prompt) + " tokens) + max_new_tokens (" +
                           std::to_string(max_new) + ") exceeds the context limit of " +
                           std::to_string(limit) + " tokens");
  const int64_t need = KvPositionsPerRank(prompt, max_new, limits.num_workers);
  int64_t cost = KvCostPerRank(policy, need, limits.max_step_tokens, limits.num_layers,
                               limits.num_kv_heads);
  if (cost > limits.kv_capacity_per_rank &&
      FitsWithHostTier(policy ? policy : limits.default_policy, need,
                       DecodeRowsPerRank(max_new, limits.num_workers), limits))
    cost = limits.kv_capacity_per_rank;
  if (cost > limits.kv_capacity_per_rank)
    return OutOfRangeError(
        "prompt (" + std::to_string(prompt) + " tokens) + max_new_tokens (" +
        std::to_string(max_new) + ") needs " + std::to_string(need) +
        " KV positions on a worker rank" +
        (cost != need ? " (as much memory as " + std::to_string(cost) + " of dense KV)"
                      : std::string()) +
        "; the workers' KV budget holds " + std::to_string(limits.kv_capacity_per_rank) +
        " per rank (" + std::to_string(limits.kv_capacity_per_rank * limits.num_workers) +
        " in all)");
  return AdmittedJob{std::move(ids), max_new, std::move(policy), cost};
}

}  // namespace millipede
