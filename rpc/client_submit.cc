#include "rpc/client_submit.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "common/file_util.h"
#include "common/sampling_params.h"
#include "rpc/rpc_errors.h"

namespace millipede {
namespace {

StatusOr<std::string> ReadAll(const std::string& path) {
  if (path == "-") {
    std::ostringstream s;
    s << std::cin.rdbuf();
    return s.str();
  }
  return ReadFileToString(path);
}

StatusOr<std::vector<int32_t>> ParseIds(const std::string& text) {
  std::vector<int32_t> ids;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    MP_ASSIGN_OR_RETURN(int64_t id, ParseInt64(word, "prompt id"));
    MP_REQUIRE(id >= INT32_MIN && id <= INT32_MAX, "prompt id ", id, " does not fit 32 bits");
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

StatusOr<std::string> PromptFrom(const Flags& flags, const std::vector<std::string>& args) {
  const bool dash = !args.empty() && args[0] == "-";
  const int sources = flags.Has("prompt") + flags.Has("prompt-file") + (dash ? 1 : 0);
  MP_REQUIRE(sources == 1, "give exactly one of --prompt, --prompt-file, - (stdin)");
  MP_REQUIRE(args.size() == (dash ? 1u : 0u), "unexpected argument \"", args.back(), "\"");
  if (auto p = flags.Get("prompt")) return *p;
  return ReadAll(dash ? "-" : *flags.Get("prompt-file"));
}

void SetSampling(const SamplingParams& p, rpc::Sampling::Builder s) {
  s.setTemperature(p.temperature);
  s.setTopK(p.top_k);
  s.setTopP(p.top_p);
  s.setSeed(p.seed);
  s.setRepetitionPenalty(p.repetition_penalty);
  s.setPresencePenalty(p.presence_penalty);
  s.setFrequencyPenalty(p.frequency_penalty);
  s.setMinP(p.min_p);
  auto bias = s.initLogitBias(static_cast<unsigned>(p.logit_bias.size()));
  for (size_t i = 0; i < p.logit_bias.size(); ++i) {
    bias[static_cast<unsigned>(i)].setId(p.logit_bias[i].id);
    bias[static_cast<unsigned>(i)].setBias(p.logit_bias[i].bias);
  }
  s.setLogprobs(p.logprobs);
}

// Receives a job's events: streams text to stdout and a progress bar to stderr, and keeps the
// final record.
class Callback final : public rpc::JobCallback::Server {
 public:
  Callback(bool json, bool progress, bool logprobs, kj::Own<kj::PromiseFulfiller<void>> done)
      : json_(json), progress_(progress), logprobs_(logprobs), done_(kj::mv(done)) {}

  std::optional<nlohmann::json> record;
  // With logprobs: per token [id, logprob, [[id, logprob], ...]].
  nlohmann::json logprobs = nlohmann::json::array();
  Status failure;

 protected:
  kj::Promise<void> progress(ProgressContext context) override {
    auto p = context.getParams();
    if (progress_ && !json_ && p.getTokensTotal() > 0) {
      const double f = static_cast<double>(p.getTokensDone()) / p.getTokensTotal();
      const int width = 30, filled = static_cast<int>(std::lround(f * width));
      std::cerr << "\rprefill [" << std::string(filled, '#') << std::string(width - filled, ' ')
                << "] " << p.getTokensDone() << "/" << p.getTokensTotal() << " tokens"
                << std::flush;
      bar_shown_ = true;
    }
    return kj::READY_NOW;
  }
  kj::Promise<void> token(TokenContext context) override {
    EndBar();
    auto p = context.getParams();
    auto text = p.getText();
    if (!json_) std::cout.write(text.begin(), static_cast<std::streamsize>(text.size())).flush();
    if (logprobs_) {
      nlohmann::json top = nlohmann::json::array();
      for (auto t : p.getTop()) top.push_back({t.getId(), t.getLogprob()});
      logprobs.push_back({p.getId(), p.getLogprob(), top});
    }
    return kj::READY_NOW;
  }
  kj::Promise<void> complete(CompleteContext context) override {
    EndBar();
    auto c = context.getParams().getCompletion();
    std::vector<int32_t> ids;
    for (int32_t id : c.getIds()) ids.push_back(id);
    record = nlohmann::json{
        {"ids", ids},
        {"text", std::string(c.getText().begin(), c.getText().size())},
        {"finish_reason", c.getFinishReason().cStr()},
        {"prompt_tokens", c.getPromptTokens()},
        {"generated_tokens", ids.size()},
        {"queue_s", c.getQueueS()},
        {"ttft_s", c.getTtftS()},
        {"e2e_s", c.getE2eS()},
        {"prefill_tokens_per_s", c.getPrefillTokensPerS()},
        {"decode_tokens_per_s", c.getDecodeTokensPerS()},
        {"prefill_density", c.getPrefillDensity()},
        {"cached_tokens", c.getCachedTokens()},
        {"cache_entry", c.getCacheEntry()},
    };
    done_->fulfill();
    return kj::READY_NOW;
  }
  kj::Promise<void> error(ErrorContext context) override {
    EndBar();
    auto e = context.getParams().getError();
    failure = Status(rpc::StatusCodeFromName(e.getCode().cStr()),
                     std::string(e.getMessage().begin(), e.getMessage().size()));
    done_->fulfill();
    return kj::READY_NOW;
  }

 private:
  void EndBar() {
    if (bar_shown_) std::cerr << "\n";
    bar_shown_ = false;
  }
  bool json_, progress_, logprobs_;
  bool bar_shown_ = false;
  kj::Own<kj::PromiseFulfiller<void>> done_;
};

}  // namespace

std::vector<std::string> SubmitFlagNames() {
  std::vector<std::string> names = {"prompt", "prompt-file", "ids",        "max-tokens",
                                    "stop",   "stop-id",     "ignore-eos", "policy",
                                    "json",   "no-progress", "no-cache",  "pin"};
  for (const std::string& name : SamplingFlagNames()) names.push_back(name);
  return names;
}

namespace {

// The job's spec from the submit flags: the prompt, its limits, sampling, stops, the cache and
// the policy file.
Status FillSpec(const Flags& flags, const std::string& prompt, const SamplingParams& params,
                rpc::JobSpec::Builder spec) {
  if (flags.GetBool("ids")) {
    MP_ASSIGN_OR_RETURN(std::vector<int32_t> ids, ParseIds(prompt));
    MP_REQUIRE(ids.size() * 4 < (kClientMaxMessageWords - 1024) * sizeof(capnp::word),
               "the prompt is too large for one RPC message");
    auto list = spec.getPrompt().initIds(static_cast<unsigned>(ids.size()));
    for (size_t i = 0; i < ids.size(); ++i) list.set(static_cast<unsigned>(i), ids[i]);
  } else {
    spec.getPrompt().setText(kj::StringPtr(prompt.c_str(), prompt.size()));
  }
  MP_ASSIGN_OR_RETURN(int64_t max_tokens, flags.GetInt("max-tokens", 16));
  spec.setMaxNewTokens(max_tokens);
  SetSampling(params, spec.initSampling());
  const auto stops = flags.GetAll("stop");
  auto stop_list = spec.initStopStrings(static_cast<unsigned>(stops.size()));
  for (size_t i = 0; i < stops.size(); ++i) stop_list.set(static_cast<unsigned>(i), stops[i]);
  const auto stop_ids = flags.GetAll("stop-id");
  auto stop_id_list = spec.initStopIds(static_cast<unsigned>(stop_ids.size()));
  for (size_t i = 0; i < stop_ids.size(); ++i) {
    MP_ASSIGN_OR_RETURN(int64_t id, ParseInt64(stop_ids[i], "--stop-id"));
    MP_REQUIRE(id >= INT32_MIN && id <= INT32_MAX, "--stop-id out of range");
    stop_id_list.set(static_cast<unsigned>(i), static_cast<int32_t>(id));
  }
  spec.setIgnoreEos(flags.GetBool("ignore-eos"));
  spec.setCache(!flags.GetBool("no-cache"));
  spec.setPin(flags.GetBool("pin"));
  if (auto policy_file = flags.Get("policy")) {
    MP_ASSIGN_OR_RETURN(std::string policy, ReadFileToString(*policy_file));
    spec.setPolicyJson(kj::StringPtr(policy.c_str(), policy.size()));
  }
  return OkStatus();
}

}  // namespace

StatusOr<int> Submit(const Flags& flags, const std::vector<std::string>& args,
                     ClientConnection& c) {
  MP_ASSIGN_OR_RETURN(std::string prompt, PromptFrom(flags, args));
  MP_ASSIGN_OR_RETURN(const SamplingParams params, SamplingParamsFromFlags(flags));
  auto request = c.service.submitRequest();
  MP_RETURN_IF_ERROR(FillSpec(flags, prompt, params, request.initSpec()));

  const bool json = flags.GetBool("json");
  auto paf = kj::newPromiseAndFulfiller<void>();
  auto callback_owned = kj::heap<Callback>(json, !flags.GetBool("no-progress"),
                                           params.logprobs >= 0, kj::mv(paf.fulfiller));
  Callback& callback = *callback_owned;
  request.setCallback(kj::mv(callback_owned));

  rpc::Job::Client job = nullptr;
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([&] {
                 auto response = request.send().wait(c.io.waitScope);
                 job = response.getJob();
                 std::cerr << "millipede: job " << response.getId() << " queued ("
                           << response.getPromptTokens() << " prompt tokens)\n";
               })) {
    return rpc::StatusFromException(*e);
  }
  // Wait for the end, or for the connection to drop.
  bool lost = false;
  auto disconnected = c.network->onDisconnect().then([&lost] { lost = true; });
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([&] {
                 paf.promise.exclusiveJoin(kj::mv(disconnected)).wait(c.io.waitScope);
               })) {
    return rpc::StatusFromException(*e);
  }
  if (!callback.record && callback.failure.ok())
    return IoError(lost ? "lost the connection to the server before the job ended"
                        : "the job ended without a result");
  if (!callback.failure.ok()) {
    if (!json) std::cout << std::flush;
    return callback.failure;
  }
  nlohmann::json& r = *callback.record;
  if (params.logprobs >= 0) r["logprobs"] = callback.logprobs;
  if (json) {
    std::cout << r.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::cout << "\n" << std::flush;
    std::cerr << "millipede: " << r["prompt_tokens"].get<int64_t>() << " prompt tokens ("
              << r["cached_tokens"].get<int64_t>() << " from the prefix cache), "
              << r["generated_tokens"].get<int64_t>() << " generated ("
              << r["finish_reason"].get<std::string>() << "), TTFT " << r["ttft_s"].get<double>()
              << " s, prefill " << r["prefill_tokens_per_s"].get<double>() << " tok/s, decode "
              << r["decode_tokens_per_s"].get<double>() << " tok/s, prefill attention density "
              << r["prefill_density"].get<double>() << "\n";
  }
  return 0;
}

}  // namespace millipede
