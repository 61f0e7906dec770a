// millipede-coordinator: world rank 0 of the service's MPMD launch,
//   mpirun -np 1 millipede-coordinator --model MODEL ... : -np N millipede-worker --model MODEL ...
// Tokenizes, validates and queues jobs from the Cap'n Proto and OpenAI HTTP front ends, runs them
// on the workers over the MPI control plane and serves the metrics. No CUDA.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <iostream>
#include <thread>

#include "checkpoint/gguf.h"
#include "checkpoint/gguf_model.h"
#include "common/file_util.h"
#include "common/flags.h"
#include "common/mpi_check.h"
#include "control/mpi_channel.h"
#include "control/process_exit.h"
#include "coordinator/front_ends.h"
#include "coordinator/scheduler.h"
#include "model_files/model_files.h"
#ifdef MILLIPEDE_HAVE_HTTP
#include "http/chat_template.h"
#endif

namespace millipede {
namespace {

constexpr char kUsage[] =
    R"(usage: mpirun -np 1 millipede-coordinator --model MODEL [options] : -np N millipede-worker --model MODEL ...

  --model PATH             the model the workers load: a Hugging Face directory (its
                           tokenizer.json is read here) or a GGUF file (its vocabulary)
  --served-model-name NAME the model's name for clients (default: the directory's name, or the
                           GGUF file's without .gguf)
  --chat-template FILE     the HTTP API's chat template (Jinja, as a model's chat_template);
                           default: the model's own (chat_template.jinja or tokenizer_config.json,
                           or a GGUF file's tokenizer.chat_template)
  --chat-format F          llama3 | chatml: a built-in format instead of the model's template
                           (default, for models without a template: detected from the tokenizer)
  --rpc HOST:PORT          Cap'n Proto API (default 127.0.0.1:7700)
  --metrics HOST:PORT      Prometheus /metrics (default 127.0.0.1:9400)
  --max-queue N            jobs that may wait (default 64); more get "queue full"
  --max-step-tokens N      tokens one engine step adds: decode tokens of every running job plus
                           prefill chunks (default 2048)
  --max-running N          jobs holding KV at once (default 64; at most --max-step-tokens)
  --max-prefill-work W     bound on a step's prefill attention work per worker, in (query, key)
                           token pairs (default 0: none); keeps steps short deep into a long
                           prompt
  --min-chunk N            smallest prefill chunk but the first of a step (default 256)
  --itl-target-ms T        inter-token latency target (default 0: none): while jobs decode,
                           each step's prefill work is bounded, by feedback on the steps' times,
                           so that steps with decode tokens take about T ms (the first chunk
                           still gets --min-chunk tokens)
  --prefix-block-tokens N  the prefix cache's block (default 16): a job whose prompt starts with
                           a cached prefix of whole blocks prefills only the rest; 0 turns the
                           cache off
  --prefix-wait-tokens N   a job whose prompt shares at least N more tokens with a queued or
                           running job than with the cache waits for that job and starts from its
                           KV (default 4096; 0: never waits)
  --ring-pairs-per-row X   with several workers: query-key pairs a rank's attention computes
                           while one K/V row of a layer crosses the ring (default 0: not counted);
                           chunks then cost their ring pass and are never shorter than
                           (workers - 1) x X
  --worker-timeout-s S     a worker silent this long counts as dead (default 20; each worker
                           beats every half second from a thread of its own)
  --stall-timeout-s S      a step with no progress this long fails its jobs (default 600); the
                           workers stay up
  --stall-abort-s S        a stalled step that has not returned this long after its cancel ends
                           the service, exit status 3 (default: --stall-timeout-s)
  --startup-timeout-s S    time the workers have to load the model (default 600)
  --drain-timeout-s S      on SIGTERM, time running jobs have to finish (default 30)
  --worker-suspect-s S     a worker silent this long makes the service not ready: health and
                           readiness fail and new jobs get 503 / FAILED_PRECONDITION until it
                           beats again (default 1.5; at most --worker-timeout-s)
)";

#ifdef MILLIPEDE_HAVE_HTTP
constexpr char kHttpUsage[] =
    R"(  --http HOST:PORT         OpenAI-compatible HTTP API (default 127.0.0.1:8000; "off" disables)
  --api-key KEY            require "Authorization: Bearer KEY" on the HTTP API
  --default-max-tokens N   the most tokens a chat without max_tokens / max_completion_tokens
                           generates (default 4096; never more than the context leaves; 0: the
                           rest of the context)
)";
#else
constexpr char kHttpUsage[] =
    R"(  (this build has no HTTP front end: build with -DMILLIPEDE_HTTP=ON)
)";
#endif

constexpr char kExitUsage[] =
    R"(
Exit status: 0 after a drain, 1 when the service could not start, 2 for a bad launch, 3 when it
failed while serving (a worker lost, a stalled step that did not stop); under
mpirun --enable-recovery the coordinator also signals mpirun so that it exits non-zero.
)";

std::atomic<Scheduler*> g_scheduler{nullptr};
std::atomic<bool> g_drain_early{false};

void OnTerminate(int) {
  Scheduler* s = g_scheduler.load();
  if (s != nullptr) {
    s->RequestDrain();
  } else {
    g_drain_early.store(true);
  }
}

// Before the coordinator aborts: asks every worker to exit too, so that none waits for its
// coordinator-timeout (under mpirun --enable-recovery an abort does not stop the other ranks).
void AbortWorkers(int world_size) {
  control::MpiChannel channel(MPI_COMM_WORLD);
  for (int r = 1; r < world_size; ++r) channel.Send(r, control::kTagAbort, {}).IgnoreError();
  channel.Flush(std::chrono::seconds(2)).IgnoreError();
}

std::string BaseName(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The served model's name: a directory's base name, or a GGUF file's without ".gguf".
std::string ServedName(const std::string& model_path, bool gguf) {
  std::string name = BaseName(model_path);
  const std::string suffix = ".gguf";
  if (gguf && name.size() > suffix.size() &&
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
    name.resize(name.size() - suffix.size());
  return name;
}

// A GGUF model's own chat template and special tokens, for the HTTP API.
Status ReadEmbeddedTemplate(const std::string& model_path, FrontEndOptions* front) {
  MP_ASSIGN_OR_RETURN(GgufFile file, GgufFile::Open(model_path));
  MP_ASSIGN_OR_RETURN(GgufChatTemplate chat, ReadGgufChatTemplate(file));
  front->embedded_template = true;
  front->embedded_template_text = chat.text.value_or("");
  front->embedded_special_tokens = std::move(chat.special_tokens);
  return OkStatus();
}

// The queue, batching and timeout flags.
Status ParseLoopOptions(const Flags& flags, SchedulerOptions* options) {
  MP_ASSIGN_OR_RETURN(int64_t max_queue, flags.GetInt("max-queue", 64));
  MP_REQUIRE(max_queue >= 1 && max_queue <= 1000000, "--max-queue must lie in [1, 10^6]");
  options->max_queue = static_cast<size_t>(max_queue);
  MP_ASSIGN_OR_RETURN(options->max_step_tokens, flags.GetInt("max-step-tokens", 2048));
  MP_ASSIGN_OR_RETURN(options->max_running, flags.GetInt("max-running", 64));
  MP_ASSIGN_OR_RETURN(options->max_prefill_work, flags.GetInt("max-prefill-work", 0));
  MP_ASSIGN_OR_RETURN(options->min_chunk, flags.GetInt("min-chunk", 256));
  MP_ASSIGN_OR_RETURN(const double itl_target_ms, flags.GetDouble("itl-target-ms", 0));
  MP_REQUIRE(itl_target_ms >= 0 && itl_target_ms <= 1e6, "--itl-target-ms must lie in [0, 10^6]");
  options->itl_target_s = itl_target_ms / 1000;
  MP_ASSIGN_OR_RETURN(options->prefix_block_tokens, flags.GetInt("prefix-block-tokens", 16));
  MP_REQUIRE(options->prefix_block_tokens >= 0 && options->prefix_block_tokens <= (1 << 20),
             "--prefix-block-tokens must lie in [0, 2^20]");
  MP_ASSIGN_OR_RETURN(options->prefix_wait_tokens, flags.GetInt("prefix-wait-tokens", 4096));
  MP_REQUIRE(options->prefix_wait_tokens >= 0, "--prefix-wait-tokens must be at least 0");
  MP_ASSIGN_OR_RETURN(options->ring_pairs_per_row, flags.GetInt("ring-pairs-per-row", 0));
  MP_ASSIGN_OR_RETURN(options->worker_timeout_s, flags.GetDouble("worker-timeout-s", 20));
  MP_ASSIGN_OR_RETURN(
      options->worker_suspect_s,
      flags.GetDouble("worker-suspect-s", std::min(1.5, options->worker_timeout_s)));
  MP_ASSIGN_OR_RETURN(options->stall_timeout_s, flags.GetDouble("stall-timeout-s", 600));
  MP_ASSIGN_OR_RETURN(options->stall_abort_s,
                      flags.GetDouble("stall-abort-s", options->stall_timeout_s));
  MP_ASSIGN_OR_RETURN(options->drain_timeout_s, flags.GetDouble("drain-timeout-s", 30));
  MP_REQUIRE(options->worker_timeout_s > 0 && options->stall_timeout_s > 0 &&
                 options->stall_abort_s > 0 && options->drain_timeout_s >= 0,
             "timeouts must be positive");
  MP_REQUIRE(
      options->worker_suspect_s > 0 && options->worker_suspect_s <= options->worker_timeout_s,
      "--worker-suspect-s must lie in (0, --worker-timeout-s]");
  return OkStatus();
}

// The front ends' flags, and the chat template they use (a bad --chat-template stops the start
// before the workers load the model).
StatusOr<FrontEndOptions> ParseFrontEndOptions(const Flags& flags, const std::string& model_path,
                                               bool gguf, const SchedulerOptions& options) {
  FrontEndOptions front;
  front.chat_template_file = flags.Get("chat-template").value_or("");
  MP_REQUIRE(front.chat_template_file.empty() || options.chat_format.empty(),
             "give --chat-template or --chat-format, not both");
  front.rpc_bind = flags.Get("rpc").value_or("127.0.0.1:7700");
#ifdef MILLIPEDE_HAVE_HTTP
  front.http_bind = flags.Get("http").value_or("127.0.0.1:8000");
#else
  front.http_bind = flags.Get("http").value_or("off");
#endif
  MP_REQUIRE(front.chat_template_file.empty() || front.http_bind != "off",
             "--chat-template is for the HTTP API, which is off");
  front.api_key = flags.Get("api-key").value_or("");
  front.served_model_name = options.model_id;
  MP_ASSIGN_OR_RETURN(front.chat_default_max_tokens,
                      flags.GetInt("default-max-tokens", front.chat_default_max_tokens));
  MP_REQUIRE(front.chat_default_max_tokens >= 0,
             "--default-max-tokens must be >= 0 (0: the rest of the context)");
  // An explicit --chat-format replaces the model's own template.
  if (options.chat_format.empty()) {
    if (gguf) {
      MP_RETURN_IF_ERROR(ReadEmbeddedTemplate(model_path, &front));
    } else {
      front.model_dir = model_path;
    }
  }
#ifdef MILLIPEDE_HAVE_HTTP
  if (!front.chat_template_file.empty()) {
    MP_RETURN_IF_ERROR((gguf ? SetUpEmbeddedChatTemplate({}, front.chat_template_file)
                             : SetUpChatTemplate(model_path, front.chat_template_file))
                           .status());
  }
#endif
  return front;
}

// Runs the service; sets *serving once the workers are up and the front ends listen (a failure
// after that is one while serving).
Status Serve(int argc, char** argv, int world_size, bool* serving) {
  MP_ASSIGN_OR_RETURN(Flags flags, Flags::Parse(argc, argv, {"help"}));
  if (flags.GetBool("help")) {
    std::cout << kUsage << kHttpUsage << kExitUsage;
    return OkStatus();
  }
  MP_RETURN_IF_ERROR(
      flags.CheckKnown({"model", "served-model-name", "chat-format", "chat-template", "rpc", "http",
                        "api-key", "metrics", "max-queue", "worker-timeout-s", "startup-timeout-s",
                        "drain-timeout-s", "max-step-tokens", "max-running", "max-prefill-work",
                        "itl-target-ms", "min-chunk", "ring-pairs-per-row", "stall-timeout-s",
                        "stall-abort-s", "worker-suspect-s", "default-max-tokens",
                        "prefix-block-tokens", "prefix-wait-tokens", "help"}));
  MP_REQUIRE(flags.positional().empty(), "unexpected argument \"", flags.positional()[0], "\"");
  MP_ASSIGN_OR_RETURN(std::string model_path, flags.GetRequired("model"));
  const bool gguf = IsGgufFile(model_path);
  SchedulerOptions options;
  options.model_id = flags.Get("served-model-name").value_or(ServedName(model_path, gguf));
  options.chat_format = flags.Get("chat-format").value_or("");
  MP_REQUIRE(options.chat_format.empty() || options.chat_format == "llama3" ||
                 options.chat_format == "chatml",
             "--chat-format must be llama3 or chatml");
  MP_RETURN_IF_ERROR(ParseLoopOptions(flags, &options));
  MP_ASSIGN_OR_RETURN(double startup_timeout_s, flags.GetDouble("startup-timeout-s", 600));
  MP_REQUIRE(startup_timeout_s > 0, "timeouts must be positive");
  MP_ASSIGN_OR_RETURN(FrontEndOptions front_options,
                      ParseFrontEndOptions(flags, model_path, gguf, options));
  const std::string metrics_bind = flags.Get("metrics").value_or("127.0.0.1:9400");
  MP_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, LoadModelTokenizer(model_path));
  MP_ASSIGN_OR_RETURN(std::unique_ptr<ServiceMetrics> metrics,
                      ServiceMetrics::Create(metrics_bind));

  std::cerr << "millipede-coordinator: waiting for " + std::to_string(world_size - 1) +
                   " worker(s)\n";
  MP_ASSIGN_OR_RETURN(std::unique_ptr<WorkerLink> link,
                      WorkerLink::Connect(world_size, startup_timeout_s, &g_drain_early));
  const WorkerFacts facts = link->facts();
  MP_ASSIGN_OR_RETURN(
      std::unique_ptr<Scheduler> owned,
      Scheduler::Create(std::move(tokenizer), std::move(link), metrics.get(), options));
  Scheduler& scheduler = *owned;
  g_scheduler.store(&scheduler);
  if (g_drain_early.load()) scheduler.RequestDrain();

  MP_ASSIGN_OR_RETURN(std::unique_ptr<FrontEnds> front_ends,
                      FrontEnds::Start(scheduler, front_options));
  const ModelInfo model = scheduler.GetModelInfo();
  // Whole lines in one write each, so that the workers' output cannot split them.
  std::cerr << "millipede-coordinator: ready: model " + model.id + " (context " +
                   std::to_string(model.context_limit) + " tokens, KV for " +
                   std::to_string(model.kv_capacity_tokens) + " tokens) on " +
                   std::to_string(facts.num_workers) + " " + facts.backend + " worker(s), pid " +
                   std::to_string(getpid()) + "\n" +
                   "millipede-coordinator: " + front_ends->addresses() + ", metrics " +
                   metrics->url() + "\n"
            << std::flush;

  // The control loop: this (the main) thread makes every MPI call of the process.
  *serving = true;
  const Status loop_status = scheduler.Run();
  front_ends->Stop();
  front_ends.reset();
  g_scheduler.store(nullptr);
  if (loop_status.ok()) std::cerr << "millipede-coordinator: drained, workers stopped\n";
  return loop_status;
}

}  // namespace
}  // namespace millipede

int main(int argc, char** argv) {
  struct sigaction action = {};
  action.sa_handler = millipede::OnTerminate;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  signal(SIGPIPE, SIG_IGN);

  int provided = 0;
  // Every MPI call is made on this thread; the front ends run on their own threads.
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS ||
      provided < MPI_THREAD_FUNNELED) {
    std::cerr << "millipede-coordinator: MPI initialisation failed\n";
    return 1;
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (rank != 0) {
    std::cerr << "millipede-coordinator: must be world rank 0 (one coordinator first in the "
                 "mpirun command line)\n";
    millipede::control::AbortJob(millipede::control::kExitBadLaunch);
  }
  // The workers split off their data-plane communicator; the coordinator takes no part in it.
  MPI_Comm none;
  MPI_Comm_split(MPI_COMM_WORLD, MPI_UNDEFINED, 0, &none);
  bool serving = false;
  const millipede::Status s = millipede::Serve(argc, argv, size, &serving);
  if (!s.ok()) {
    const int code = serving ? millipede::control::kExitFailedWhileServing
                             : millipede::control::kExitStartFailed;
    std::cerr << "millipede-coordinator: " + s.ToString() + "\n";
    // The workers may be stuck or gone: end the whole job.
    std::cerr << "millipede-coordinator: ending the job with MPI_Abort, exit code " +
                     std::to_string(code) + "\n";
    millipede::AbortWorkers(size);
    // mpirun forwards output asynchronously and an abort may cut it: let the reason get out.
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    millipede::control::AbortJob(code);
  }
  MPI_Finalize();
  return 0;
}
