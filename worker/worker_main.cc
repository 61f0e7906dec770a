// millipede-worker: one engine rank of the service, launched by mpirun beside the coordinator:
//   mpirun -np 1 millipede-coordinator ... : -np N millipede-worker --model MODEL ...
// World rank 0 is the coordinator; the workers (world ranks 1..N) share a communicator of their
// own for the data plane and take jobs from the coordinator over the MPI control plane.
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <thread>

#include "common/flags.h"
#include "control/process_exit.h"
#include "worker/control/counting_communicator.h"
#include "worker/control/heartbeat.h"
#include "worker/control/worker_loop.h"
#include "worker/dist/mpi_main.h"
#include "worker/engine_flags.h"
#include "worker/kv/kv_buffer.h"

namespace millipede {
namespace {

constexpr char kUsage[] =
    R"(usage: mpirun -np 1 millipede-coordinator ... : -np N millipede-worker --model MODEL [options]

Engine flags as for millipede-run:
)";

constexpr char kWorkerUsage[] = R"(Service:
  --kv-budget-mb M          KV cache memory (MiB, may be fractional) that all the jobs on this
                            rank may take together (default: what the free memory holds); the
                            coordinator refuses a job that would not fit alone and holds jobs
                            back while the running ones' reservations fill it
  --kv-cache-host-mb M      host memory (MiB) for prefix-cache entries evicted from the KV cache
                            memory (default 0: they are dropped); a hit on one copies it back.
                            The coordinator uses the smallest figure of all the workers
  --kv-cache-dir DIR        local disk for prefix-cache entries evicted from memory (each rank
                            writes DIR/rank-R; entries there survive a restart of the service;
                            files failing their checksums are removed, never served)
  --kv-cache-disk-mb M      the disk tier's size (MiB; default 10240 with --kv-cache-dir)
  --coordinator-timeout-s S exit (status 3) when the coordinator is silent this long (default 15)
)";

// The prefix cache's tiers below the KV memory (--kv-cache-*): their sizes into `options`; the
// disk tier's directory ("" for none).
StatusOr<std::string> ParseCacheFlags(const Flags& flags, WorkerLoopOptions* options) {
  MP_ASSIGN_OR_RETURN(const double host_mb, flags.GetDouble("kv-cache-host-mb", 0));
  MP_REQUIRE(host_mb >= 0 && host_mb < 1e12, "--kv-cache-host-mb out of range");
  options->cache_host_bytes = static_cast<int64_t>(host_mb * (1 << 20));
  const std::string dir = flags.Get("kv-cache-dir").value_or("");
  MP_ASSIGN_OR_RETURN(const double disk_mb, flags.GetDouble("kv-cache-disk-mb", 10240));
  MP_REQUIRE(disk_mb > 0 && disk_mb < 1e12, "--kv-cache-disk-mb out of range");
  if (!dir.empty()) options->cache_disk_bytes = static_cast<int64_t>(disk_mb * (1 << 20));
  return dir;
}

// Runs the worker; sets *hello_sent once the coordinator was told this rank is up (before that,
// a failure is reported to the coordinator with an error hello).
Status Serve(int argc, char** argv, int world_rank, MPI_Comm workers, bool beat, bool* hello_sent) {
  MP_ASSIGN_OR_RETURN(Flags flags, Flags::Parse(argc, argv, {"profile", "random-weights"}));
  std::vector<std::string> known = {"kv-budget-mb", "kv-cache-host-mb", "kv-cache-dir",
                                    "kv-cache-disk-mb", "coordinator-timeout-s"};
  for (const std::string& name : EngineFlagNames()) known.push_back(name);
  MP_RETURN_IF_ERROR(flags.CheckKnown(known));
  MP_REQUIRE(flags.positional().empty(), "unexpected argument \"", flags.positional()[0], "\"");
  MP_ASSIGN_OR_RETURN(int local_rank, NodeLocalRank(workers));
  MP_ASSIGN_OR_RETURN(EngineOptions options, ParseEngineFlags(flags, local_rank));
  WorkerLoopOptions loop_options;
  MP_ASSIGN_OR_RETURN(loop_options.coordinator_timeout_s,
                      flags.GetDouble("coordinator-timeout-s", 15));
  MP_REQUIRE(loop_options.coordinator_timeout_s > 0, "--coordinator-timeout-s must be positive");
  MP_ASSIGN_OR_RETURN(double budget_mb, flags.GetDouble("kv-budget-mb", 0));
  MP_REQUIRE(budget_mb >= 0 && budget_mb < 1e12, "--kv-budget-mb out of range");
  MP_ASSIGN_OR_RETURN(const std::string cache_dir, ParseCacheFlags(flags, &loop_options));

  MP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> plane,
                      CreateDataPlane(workers, local_rank, options.backend));
  CountingCommunicator* counting = nullptr;
  if (plane) {
    auto wrapped = std::make_unique<CountingCommunicator>(std::move(plane));
    counting = wrapped.get();
    plane = std::move(wrapped);
  }
  MP_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(options, std::move(plane)));
  const ModelConfig& c = engine->config();
  // Positions of KV this rank can hold for all its jobs together: what its free memory takes
  // in dense layers (the jobs' own memory plans have the last word).
  MP_ASSIGN_OR_RETURN(loop_options.kv_capacity_tokens, engine->MaxSequencePositionsNow());
  if (budget_mb > 0) {
    const int64_t per_position =
        c.num_hidden_layers *
        KvLayout{c.num_key_value_heads, c.head_dim, options.kv_dtype}.RowBytes();
    loop_options.kv_capacity_tokens =
        std::min(loop_options.kv_capacity_tokens,
                 static_cast<int64_t>(budget_mb * (1 << 20)) / per_position);
  }
  // One write, so that the ranks' lines do not interleave in mpirun's output.
  std::cerr << "millipede-worker rank " + std::to_string(world_rank) + " pid " +
                   std::to_string(getpid()) + ": " + std::to_string(c.num_hidden_layers) +
                   " layers, " + BackendKindName(options.backend) + " backend, KV for " +
                   std::to_string(loop_options.kv_capacity_tokens) + " positions\n";
  if (!cache_dir.empty()) {
    MP_ASSIGN_OR_RETURN(std::unique_ptr<DiskTier> disk, DiskTier::Open(cache_dir, world_rank));
    engine->AttachDiskTier(std::move(disk));
  }
  WorkerLoop loop(*engine, counting, world_rank, loop_options);
  MP_RETURN_IF_ERROR(loop.SendHello());
  *hello_sent = true;
  std::unique_ptr<Heartbeat> heartbeat;
  if (beat) {
    heartbeat =
        Heartbeat::Start(control::kCoordinatorRank, std::chrono::milliseconds(500), [world_rank] {
          // The main thread may be blocked on a dead peer: leave now.
          std::cerr << "millipede-worker rank " + std::to_string(world_rank) +
                           ": the coordinator is stopping after a "
                           "failure: exiting\n";
          control::ExitNow(control::kExitFailedWhileServing);
        });
  } else {
    std::cerr << "millipede-worker rank " + std::to_string(world_rank) +
                     ": MPI gives no MPI_THREAD_MULTIPLE: no heartbeat thread; liveness then "
                     "rests on the reports at every layer\n";
  }
  return loop.Run();
}

// Tells the coordinator why this rank could not start, so that it stops the service with the
// reason instead of waiting for the rank.
void ReportStartFailure(int world_rank, const Status& error) {
  control::WorkerHello hello;
  hello.rank = world_rank;
  hello.status_code = static_cast<int32_t>(error.code());
  hello.error = error.ToString();
  control::MpiChannel channel(MPI_COMM_WORLD);
  if (!channel.Send(control::kCoordinatorRank, control::kTagHello, control::Encode(hello)).ok())
    return;
  channel.Flush(std::chrono::seconds(2)).IgnoreError();
  // An abort from this rank could take the coordinator down before it reads the reason: wait
  // (boundedly) for the coordinator to answer with kAbort.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    StatusOr<std::optional<control::Message>> m =
        channel.Poll(control::kCoordinatorRank, control::kTagAbort);
    if (!m.ok() || m->has_value()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace
}  // namespace millipede

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--help") {
      std::cout << millipede::kUsage << millipede::kEngineFlagsUsage << millipede::kWorkerUsage;
      return 0;
    }
  }
  // MPI_THREAD_MULTIPLE for the heartbeat thread; the main thread makes every other MPI call.
  int provided = 0;
  if (!millipede::InitMpi("millipede-worker", &argc, &argv, MPI_THREAD_MULTIPLE, &provided))
    return 1;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  if (world_rank == 0) {
    std::cerr << "millipede-worker: world rank 0 must be millipede-coordinator (launch with "
                 "mpirun -np 1 millipede-coordinator ... : -np N millipede-worker ...)\n";
    millipede::control::AbortJob(millipede::control::kExitBadLaunch);
  }
  // The coordinator takes part in this split with MPI_UNDEFINED.
  MPI_Comm workers;
  MPI_Comm_split(MPI_COMM_WORLD, 1, world_rank, &workers);
  MPI_Comm_set_errhandler(workers, MPI_ERRORS_RETURN);
  bool hello_sent = false;
  millipede::Status s = millipede::Serve(argc, argv, world_rank, workers,
                                         provided >= MPI_THREAD_MULTIPLE, &hello_sent);
  if (!s.ok()) {
    std::cerr << "millipede-worker rank " + std::to_string(world_rank) + ": " + s.ToString() + "\n";
    if (!hello_sent) millipede::ReportStartFailure(world_rank, s);
    // The coordinator and the other workers may be waiting on this rank: take the job down.
    millipede::control::AbortJob(hello_sent ? millipede::control::kExitFailedWhileServing
                                            : millipede::control::kExitStartFailed);
  }
  MPI_Comm_free(&workers);
  MPI_Finalize();
  return 0;
}
