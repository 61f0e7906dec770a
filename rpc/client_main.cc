// millipede: the command-line client of the service's Cap'n Proto API.
#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "common/file_util.h"
#include "common/flags.h"
#include "rpc/millipede.capnp.h"
#include "rpc/rpc_errors.h"

namespace millipede {
namespace {

constexpr char kUsage[] = R"(usage: millipede COMMAND [options]

Commands:
  submit (--prompt TEXT | --prompt-file F | -)   run a job; the answer streams to stdout
  status JOB                                     a job's state
  cancel JOB                                     cancel a queued or running job
  models                                         the served model
  health                                         whether the service is up and accepting
  workers                                        the worker ranks' KV memory and data-plane totals

Options:
  --server HOST:PORT     the coordinator's RPC address (default 127.0.0.1:7700)
submit:
  --ids                  the prompt is whitespace-separated token ids, not text
  --max-tokens N         tokens to generate at most (default 16)
  --temperature T        0 = greedy (default 0)
  --top-k K              keep the K most likely tokens (0 = off)
  --top-p P              nucleus sampling threshold (1 = off)
  --seed S               sampling seed (default 0)
  --stop TEXT            stop when the text contains TEXT (repeatable)
  --stop-id ID           stop after this token id (repeatable)
  --ignore-eos           do not stop at the model's EOS ids
  --policy FILE          attention policy for this job (policy-file JSON); default: the
                         service's
  --json                 print only the final record as JSON (ids, text, finish_reason, timings)
  --no-progress          no prefill progress bar on stderr
)";

// The largest message this client sends or accepts (the server's limit is the same).
constexpr uint64_t kMaxMessageWords = (uint64_t{64} << 20) / sizeof(capnp::word);

capnp::ReaderOptions ClientReaderOptions() {
  capnp::ReaderOptions options;
  options.traversalLimitInWords = kMaxMessageWords;
  options.nestingLimit = 16;
  return options;
}

// Prints the error and returns the exit status 1.
int Fail(const Status& s) {
  std::cerr << "millipede: error: " << s.ToString() << "\n";
  return 1;
}

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

// Receives a job's events: streams text to stdout and a progress bar to stderr, and keeps the
// final record.
class Callback final : public rpc::JobCallback::Server {
 public:
  Callback(bool json, bool progress, kj::Own<kj::PromiseFulfiller<void>> done)
      : json_(json), progress_(progress), done_(kj::mv(done)) {}

  std::optional<nlohmann::json> record;
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
    auto text = context.getParams().getText();
    if (!json_) std::cout.write(text.begin(), static_cast<std::streamsize>(text.size())).flush();
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
  bool json_, progress_;
  bool bar_shown_ = false;
  kj::Own<kj::PromiseFulfiller<void>> done_;
};

StatusOr<std::string> PromptFrom(const Flags& flags) {
  const bool dash = !flags.positional().empty() && flags.positional()[0] == "-";
  const int sources = flags.Has("prompt") + flags.Has("prompt-file") + (dash ? 1 : 0);
  MP_REQUIRE(sources == 1, "give exactly one of --prompt, --prompt-file, - (stdin)");
  MP_REQUIRE(flags.positional().size() == (dash ? 1u : 0u), "unexpected argument \"",
             flags.positional().back(), "\"");
  if (auto p = flags.Get("prompt")) return *p;
  return ReadAll(dash ? "-" : *flags.Get("prompt-file"));
}

StatusOr<uint64_t> JobIdArg(const Flags& flags) {
  MP_REQUIRE(flags.positional().size() == 1, "give one job id");
  MP_ASSIGN_OR_RETURN(int64_t id, ParseInt64(flags.positional()[0], "job id"));
  MP_REQUIRE(id > 0, "job ids are positive");
  return static_cast<uint64_t>(id);
}

struct Connection {
  kj::AsyncIoContext io = kj::setupAsyncIo();
  kj::Own<kj::AsyncIoStream> stream;
  kj::Own<capnp::TwoPartyVatNetwork> network;
  kj::Own<capnp::RpcSystem<capnp::rpc::twoparty::VatId>> rpc;
  rpc::Millipede::Client service = nullptr;
};

Status Connect(const std::string& server, Connection* c) {
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([&] {
                 auto address = c->io.provider->getNetwork()
                                    .parseAddress(server.c_str())
                                    .wait(c->io.waitScope);
                 c->stream = address->connect().wait(c->io.waitScope);
               })) {
    return IoError("cannot connect to " + server + ": " + e->getDescription().cStr());
  }
  c->network = kj::heap<capnp::TwoPartyVatNetwork>(*c->stream, capnp::rpc::twoparty::Side::CLIENT,
                                                   ClientReaderOptions());
  c->rpc = kj::heap(capnp::makeRpcClient(*c->network));
  capnp::word scratch[4] = {};
  capnp::MallocMessageBuilder message(scratch);
  auto vat = message.getRoot<capnp::rpc::twoparty::VatId>();
  vat.setSide(capnp::rpc::twoparty::Side::SERVER);
  c->service = c->rpc->bootstrap(vat).castAs<rpc::Millipede>();
  return OkStatus();
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

StatusOr<int> Submit(const Flags& flags, Connection& c) {
  MP_ASSIGN_OR_RETURN(std::string prompt, PromptFrom(flags));
  auto request = c.service.submitRequest();
  auto spec = request.initSpec();
  if (flags.GetBool("ids")) {
    MP_ASSIGN_OR_RETURN(std::vector<int32_t> ids, ParseIds(prompt));
    MP_REQUIRE(ids.size() * 4 < (kMaxMessageWords - 1024) * sizeof(capnp::word),
               "the prompt is too large for one RPC message");
    auto list = spec.getPrompt().initIds(static_cast<unsigned>(ids.size()));
    for (size_t i = 0; i < ids.size(); ++i) list.set(static_cast<unsigned>(i), ids[i]);
  } else {
    spec.getPrompt().setText(kj::StringPtr(prompt.c_str(), prompt.size()));
  }
  MP_ASSIGN_OR_RETURN(int64_t max_tokens, flags.GetInt("max-tokens", 16));
  spec.setMaxNewTokens(max_tokens);
  auto sampling = spec.initSampling();
  MP_ASSIGN_OR_RETURN(double temperature, flags.GetDouble("temperature", 0));
  MP_ASSIGN_OR_RETURN(int64_t top_k, flags.GetInt("top-k", 0));
  MP_ASSIGN_OR_RETURN(double top_p, flags.GetDouble("top-p", 1));
  MP_ASSIGN_OR_RETURN(int64_t seed, flags.GetInt("seed", 0));
  MP_REQUIRE(top_k >= INT32_MIN && top_k <= INT32_MAX, "--top-k out of range");
  sampling.setTemperature(static_cast<float>(temperature));
  sampling.setTopK(static_cast<int32_t>(top_k));
  sampling.setTopP(static_cast<float>(top_p));
  sampling.setSeed(static_cast<uint64_t>(seed));
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
  if (auto policy_file = flags.Get("policy")) {
    MP_ASSIGN_OR_RETURN(std::string policy, ReadFileToString(*policy_file));
    spec.setPolicyJson(kj::StringPtr(policy.c_str(), policy.size()));
  }

  const bool json = flags.GetBool("json");
  auto paf = kj::newPromiseAndFulfiller<void>();
  auto callback_owned =
      kj::heap<Callback>(json, !flags.GetBool("no-progress"), kj::mv(paf.fulfiller));
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
  const nlohmann::json& r = *callback.record;
  if (json) {
    std::cout << r.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::cout << "\n" << std::flush;
    std::cerr << "millipede: " << r["prompt_tokens"].get<int64_t>() << " prompt tokens, "
              << r["generated_tokens"].get<int64_t>() << " generated ("
              << r["finish_reason"].get<std::string>() << "), TTFT " << r["ttft_s"].get<double>()
              << " s, prefill " << r["prefill_tokens_per_s"].get<double>() << " tok/s, decode "
              << r["decode_tokens_per_s"].get<double>() << " tok/s\n";
  }
  return 0;
}

StatusOr<int> RunCommand(const std::string& command, const Flags& flags, Connection& c) {
  auto& ws = c.io.waitScope;
  if (command == "submit") return Submit(flags, c);
  if (command == "status") {
    MP_ASSIGN_OR_RETURN(uint64_t id, JobIdArg(flags));
    auto req = c.service.statusRequest();
    req.setId(id);
    auto s = req.send().wait(ws).getStatus();
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
    MP_ASSIGN_OR_RETURN(uint64_t id, JobIdArg(flags));
    auto req = c.service.cancelRequest();
    req.setId(id);
    req.send().wait(ws);
    std::cout << "cancelled job " << id << "\n";
    return 0;
  }
  MP_REQUIRE(flags.positional().empty(), "unexpected argument \"", flags.positional()[0], "\"");
  if (command == "models") {
    auto m = c.service.modelInfoRequest().send().wait(ws).getInfo();
    std::cout << nlohmann::json{{"id", m.getId().cStr()},
                                {"context_limit", m.getContextLimit()},
                                {"kv_capacity_tokens", m.getKvCapacityTokens()},
                                {"vocab_size", m.getVocabSize()},
                                {"num_workers", m.getNumWorkers()},
                                {"chat_format", m.getChatFormat().cStr()}}
                     .dump()
              << "\n";
    return 0;
  }
  if (command == "health") {
    auto h = c.service.healthRequest().send().wait(ws).getHealth();
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
    auto ranks = c.service.workersRequest().send().wait(ws).getRanks();
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
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::cout << kUsage;
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  const std::vector<std::string> commands = {"submit", "status", "cancel",
                                             "models", "health", "workers"};
  if (std::find(commands.begin(), commands.end(), command) == commands.end()) {
    return Fail(InvalidArgumentError("unknown command \"" + command + "\" (see millipede --help)"));
  }
  StatusOr<Flags> flags =
      Flags::Parse(argc - 1, argv + 1, {"ids", "ignore-eos", "json", "no-progress", "help"});
  if (!flags.ok()) return Fail(flags.status());
  Status known = flags->CheckKnown({"server", "prompt", "prompt-file", "ids", "max-tokens",
                                    "temperature", "top-k", "top-p", "seed", "stop", "stop-id",
                                    "ignore-eos", "policy", "json", "no-progress", "help"});
  if (!known.ok()) return Fail(known);
  Connection c;
  Status connected = Connect(flags->Get("server").value_or("127.0.0.1:7700"), &c);
  if (!connected.ok()) return Fail(connected);
  StatusOr<int> result = InvalidArgumentError("no result");
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([&] { result = RunCommand(command, *flags, c); })) {
    return Fail(rpc::StatusFromException(*e));
  }
  if (!result.ok()) return Fail(result.status());
  return *result;
}

}  // namespace
}  // namespace millipede

int main(int argc, char** argv) { return millipede::Main(argc, argv); }
