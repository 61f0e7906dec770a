// millipede: the command-line client of the service's Cap'n Proto API.
#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/flags.h"
#include "common/sampling_params.h"
#include "rpc/client_connection.h"
#include "rpc/client_submit.h"
#include "rpc/rpc_errors.h"

namespace millipede {
namespace {

constexpr char kUsage[] = R"(usage: millipede [--server HOST:PORT] COMMAND [options]

Commands:
  submit (--prompt TEXT | --prompt-file F | -)   run a job; the answer streams to stdout
  status JOB                                     a job's state
  cancel JOB                                     cancel a queued or running job (a job that
                                                 already ended is left as it is, exit 0)
  models                                         the served model
  health                                         whether the service is up and accepting
  workers                                        the worker ranks' KV memory and data-plane totals
  cache list | pin ID | unpin ID | drop ID       the prefix cache's entries (JSON, most recently
                                                 used first); keep one until unpinned; free one

Options (before or after the command):
  --server HOST:PORT     the coordinator's RPC address (default 127.0.0.1:7700)
submit:
  --ids                  the prompt is whitespace-separated token ids, not text
  --max-tokens N         tokens to generate at most (default 16)
  --stop TEXT            stop when the text contains TEXT (repeatable)
  --stop-id ID           stop after this token id (repeatable)
  --ignore-eos           do not stop at the model's EOS ids
  --no-cache             neither reuse a cached prefix nor leave this job's KV in the cache
  --pin                  keep the KV this job leaves in the prefix cache until unpinned or
                         dropped (the final record's cache_entry is its id)
  --policy FILE          attention policy for this job (policy-file JSON); default: the
                         service's
  --json                 print only the final record as JSON (ids, text, finish_reason, timings;
                         with --logprobs, per token [id, logprob, [[id, logprob], ...]])
  --no-progress          no prefill progress bar on stderr
)";

// Prints the error and returns the exit status 1.
int Fail(const Status& s) {
  std::cerr << "millipede: error: " << s.ToString() << "\n";
  return 1;
}

StatusOr<uint64_t> JobIdArg(const std::vector<std::string>& args) {
  MP_REQUIRE(args.size() == 1, "give one job id");
  MP_ASSIGN_OR_RETURN(int64_t id, ParseInt64(args[0], "job id"));
  MP_REQUIRE(id > 0, "job ids are positive");
  return static_cast<uint64_t>(id);
}

const char* StateName(rpc::JobState s) {
  switch (s) {
    case rpc::JobState::QUEUED:
      return "queued";
    case rpc::JobState::PREFILL:
      return "prefill";
    case rpc::JobState::DECODE:
      return "decode";
    case rpc::JobState::FINISHED:
      return "finished";
    case rpc::JobState::CANCELLED:
      return "cancelled";
    case rpc::JobState::FAILED:
      return "failed";
  }
  return "unknown";
}

// What `cancel` did: a queued or running job is cancelled (it ends with CANCELLED); one that had
// already ended is left as it was (not an error: a client may race its own job's end).
template <typename Response>
std::string CancelOutcome(uint64_t id, const Response& response) {
  const std::string job = "job " + std::to_string(id);
  if (!response.hasStatus()) return job + " had already ended (its final status is no longer kept)";
  const rpc::JobState state = response.getStatus().getState();
  if (state == rpc::JobState::FINISHED || state == rpc::JobState::CANCELLED ||
      state == rpc::JobState::FAILED)
    return job + " had already ended (" + StateName(state) + ")";
  return "cancelled " + job;
}

// `cache list`, `cache pin ID`, `cache unpin ID`, `cache drop ID`.
StatusOr<int> RunCacheCommand(const std::vector<std::string>& args, ClientConnection& c) {
  auto& ws = c.io.waitScope;
  MP_REQUIRE(!args.empty(), "cache needs list, pin ID, unpin ID or drop ID");
  const std::string& what = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (what == "list") {
    MP_REQUIRE(rest.empty(), "cache list takes no argument");
    nlohmann::json out = nlohmann::json::array();
    // The response owns the message its readers point into: it must outlive them.
    auto response = c.service.cacheListRequest().send().wait(ws);
    for (auto e : response.getEntries())
      out.push_back({{"id", e.getId()},
                     {"tokens", e.getTokens()},
                     {"kv_positions", e.getKvPositions()},
                     {"pinned", e.getPinned()},
                     {"hits", e.getHits()},
                     {"holders", e.getHolders()},
                     {"tier", std::string(e.getTier().cStr())}});
    std::cout << out.dump() << "\n";
    return 0;
  }
  MP_ASSIGN_OR_RETURN(const uint64_t id, JobIdArg(rest));
  if (what == "pin" || what == "unpin") {
    auto req = c.service.cachePinRequest();
    req.setId(id);
    req.setPinned(what == "pin");
    req.send().wait(ws);
    std::cout << (what == "pin" ? "pinned" : "unpinned") << " prefix-cache entry " << id << "\n";
    return 0;
  }
  MP_REQUIRE(what == "drop", "unknown cache command \"", what, "\" (list, pin, unpin, drop)");
  auto req = c.service.cacheDropRequest();
  req.setId(id);
  req.send().wait(ws);
  std::cout << "dropped prefix-cache entry " << id << "\n";
  return 0;
}

StatusOr<int> RunCommand(const std::string& command, const Flags& flags,
                         const std::vector<std::string>& args, ClientConnection& c) {
  auto& ws = c.io.waitScope;
  if (command == "submit") return Submit(flags, args, c);
  if (command == "cache") return RunCacheCommand(args, c);
  if (command == "status") {
    MP_ASSIGN_OR_RETURN(uint64_t id, JobIdArg(args));
    auto req = c.service.statusRequest();
    req.setId(id);
    auto response = req.send().wait(ws);
    auto s = response.getStatus();
    nlohmann::json out = {{"id", s.getId()},
                          {"state", StateName(s.getState())},
                          {"queue_position", s.getQueuePosition()},
                          {"prompt_tokens", s.getPromptTokens()},
                          {"prefill_done", s.getPrefillDone()},
                          {"generated_tokens", s.getGeneratedTokens()}};
    if (s.getError().size() > 0) out["error"] = s.getError().cStr();
    std::cout << out.dump() << "\n";
    return 0;
  }
  if (command == "cancel") {
    MP_ASSIGN_OR_RETURN(uint64_t id, JobIdArg(args));
    auto req = c.service.cancelRequest();
    req.setId(id);
    auto response = req.send().wait(ws);
    std::cout << CancelOutcome(id, response) << "\n";
    return 0;
  }
  MP_REQUIRE(args.empty(), "unexpected argument \"", args.empty() ? "" : args[0], "\"");
  if (command == "models") {
    auto response = c.service.modelInfoRequest().send().wait(ws);
    auto m = response.getInfo();
    std::cout << nlohmann::json{{"id", m.getId().cStr()},
                                {"context_limit", m.getContextLimit()},
                                {"kv_capacity_tokens", m.getKvCapacityTokens()},
                                {"vocab_size", m.getVocabSize()},
                                {"num_workers", m.getNumWorkers()},
                                {"chat_format", m.getChatFormat().cStr()},
                                {"max_model_len", m.getMaxModelLen()}}
                     .dump()
              << "\n";
    return 0;
  }
  if (command == "health") {
    auto response = c.service.healthRequest().send().wait(ws);
    auto h = response.getHealth();
    std::cout << nlohmann::json{{"alive", h.getAlive()},
                                {"accepting", h.getAccepting()},
                                {"running", h.getRunning()},
                                {"waiting", h.getWaiting()},
                                {"seconds_since_last_token", h.getSecondsSinceLastToken()},
                                {"detail", h.getDetail().cStr()}}
                     .dump()
              << "\n";
    return h.getAlive() && h.getAccepting() ? 0 : 1;
  }
  if (command == "workers") {
    auto response = c.service.workersRequest().send().wait(ws);
    auto ranks = response.getRanks();
    nlohmann::json out = nlohmann::json::array();
    for (auto r : ranks) {
      out.push_back({{"rank", r.getRank()},
                     {"kv_bytes_gpu", r.getKvBytesGpu()},
                     {"kv_bytes_host", r.getKvBytesHost()},
                     {"attention_s", r.getAttentionS()},
                     {"comm_s", r.getCommS()},
                     {"comm_bytes", r.getCommBytes()}});
    }
    std::cout << out.dump() << "\n";
    return 0;
  }
  return InternalError("unhandled command " + command);
}

int Main(int argc, char** argv) {
  StatusOr<Flags> flags =
      Flags::Parse(argc, argv,
                   {"ids", "ignore-eos", "json", "no-progress", "no-cache", "pin", "help"});
  if (!flags.ok()) return Fail(flags.status());
  if (flags->GetBool("help") || (!flags->positional().empty() && flags->positional()[0] == "-h")) {
    std::cout << kUsage << kSamplingFlagsUsage;
    return 0;
  }
  // The command is the first argument that is not a flag or a flag's value, so --server may
  // come before or after it.
  const std::vector<std::string>& positional = flags->positional();
  if (positional.empty()) {
    std::cerr << kUsage << kSamplingFlagsUsage;
    return 2;
  }
  const std::string command = positional[0];
  const std::vector<std::string> args(positional.begin() + 1, positional.end());
  const std::vector<std::string> commands = {"submit", "status", "cancel", "models",
                                             "health", "workers", "cache"};
  if (std::find(commands.begin(), commands.end(), command) == commands.end()) {
    return Fail(InvalidArgumentError("unknown command \"" + command + "\" (see millipede --help)"));
  }
  std::vector<std::string> known = {"server", "help"};
  for (const std::string& name : SubmitFlagNames()) known.push_back(name);
  Status checked = flags->CheckKnown(known);
  if (!checked.ok()) return Fail(checked);
  ClientConnection c;
  Status connected = Connect(flags->Get("server").value_or("127.0.0.1:7700"), &c);
  if (!connected.ok()) return Fail(connected);
  StatusOr<int> result = InvalidArgumentError("no result");
  KJ_IF_MAYBE (e,
               kj::runCatchingExceptions([&] { result = RunCommand(command, *flags, args, c); })) {
    return Fail(rpc::StatusFromException(*e));
  }
  if (!result.ok()) return Fail(result.status());
  return *result;
}

}  // namespace
}  // namespace millipede

int main(int argc, char** argv) { return millipede::Main(argc, argv); }
