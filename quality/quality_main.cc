// millipede-quality: runs retrieval tasks (needle in a haystack, multi-key KV retrieval, multi-hop
// chains) on the constructed retrieval model and reports accuracy as a table, CSV, JSON lines and
// PNG heatmaps.
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <sstream>

#include "common/file_util.h"
#include "common/flags.h"
#include "model_files/model_files.h"
#include "quality/report.h"
#include "quality/runner.h"
#include "worker/dist/mpi_main.h"
#include "worker/engine_flags.h"

namespace millipede {
namespace {

constexpr char kUsage[] = R"(usage: [mpirun -np N] millipede-quality --model MODEL [options]

Runs retrieval tasks on a model written by `millipede-mkmodel --preset retrieval` and prints
accuracy per (task, context length, depth). Under mpirun the N ranks share every prompt (context
parallelism) and rank 0 reports.

  --model MODEL          the retrieval model (a Hugging Face directory or a GGUF file)
  --tasks LIST           comma-separated: needle, kv, chain (default needle)
  --lengths LIST         context lengths in tokens, K = 1024, M = 2^20 (default 1K,2K,4K,8K)
  --depths LIST          needle depths in [0, 1] (default 0,0.25,0.5,0.75,1)
  --samples N            tasks per cell, seeds seed .. seed + N - 1 (default 1)
  --pairs N              kv: needles per prompt (default 8)
  --hops N               chain: answers per prompt (default 4)
  --distractors N        chain: needles off the chain (default 4)
  --seed S               task seed (default 0)
  --control C            none (default) | remove-needle | wrong-key: take the answer out of the
                         prompt; accuracy must then drop to 0
  --min-accuracy A       exit 1 if any cell's accuracy is below A in [0, 1] (default 0)
  --out DIR              write DIR/results.csv, DIR/tasks.jsonl and DIR/<task>.png heatmaps
  --kv-dtype D           KV cache storage: bf16 (default) | fp16 | fp32 | fp8 (E4M3)
  --kv-scales FILE       with fp8: per-layer K/V scales (as the engine's --kv-scales)
  --prefill-chunk N      tokens per projection/MLP chunk (default 512)
  --policy FILE          attention policy file (JSON; default dense); the reports name the
                         policy by the file's name without its extension
  --backend B            cpu (default) | cuda
)";

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(item);
  return out;
}

StatusOr<std::vector<int64_t>> ParseLengths(const std::string& s) {
  std::vector<int64_t> out;
  for (std::string item : SplitList(s)) {
    int64_t unit = 1;
    if (!item.empty() && (item.back() == 'K' || item.back() == 'k')) unit = 1024;
    if (!item.empty() && (item.back() == 'M' || item.back() == 'm')) unit = 1 << 20;
    if (unit != 1) item.pop_back();
    MP_ASSIGN_OR_RETURN(int64_t n, ParseInt64(item, "--lengths"));
    MP_REQUIRE(n >= 1 && n <= (int64_t{1} << 40) / unit, "--lengths: ", n, " out of range");
    out.push_back(n * unit);
  }
  MP_REQUIRE(!out.empty(), "--lengths is empty");
  return out;
}

StatusOr<std::vector<double>> ParseDepths(const std::string& s) {
  std::vector<double> out;
  for (const std::string& item : SplitList(s)) {
    MP_ASSIGN_OR_RETURN(double d, ParseDouble(item, "--depths"));
    MP_REQUIRE(d >= 0 && d <= 1, "--depths: ", d, " is not in [0, 1]");
    out.push_back(d);
  }
  MP_REQUIRE(!out.empty(), "--depths is empty");
  return out;
}

StatusOr<int> GetSmallInt(const Flags& flags, const char* name, int fallback) {
  MP_ASSIGN_OR_RETURN(int64_t v, flags.GetInt(name, fallback));
  MP_REQUIRE(v >= 0 && v <= 1000000, "--", name, " must lie in [0, 1000000], got ", v);
  return static_cast<int>(v);
}

Status Run(int argc, char** argv, const MpiWorld& world) {
  MP_ASSIGN_OR_RETURN(Flags flags, Flags::Parse(argc, argv, {"help"}));
  if (flags.GetBool("help")) {
    if (world.rank == 0) std::cout << kUsage;
    return OkStatus();
  }
  MP_RETURN_IF_ERROR(
      flags.CheckKnown({"model", "tasks", "lengths", "depths", "samples", "pairs", "hops",
                        "distractors", "seed", "control", "min-accuracy", "out", "kv-dtype",
                        "kv-scales", "prefill-chunk", "policy", "backend", "help"}));
  MP_REQUIRE(flags.positional().empty(), "unexpected argument \"", flags.positional()[0], "\"");

  EngineOptions options;
  MP_ASSIGN_OR_RETURN(options.model_path, flags.GetRequired("model"));
  const std::string kv_name = flags.Get("kv-dtype").value_or("bf16");
  MP_ASSIGN_OR_RETURN(options.kv_dtype, ParseKvDTypeName(kv_name));
  if (const std::optional<std::string> scales = flags.Get("kv-scales")) {
    MP_ASSIGN_OR_RETURN(options.kv_scales, ReadKvScalesFile(*scales));
  }
  MP_ASSIGN_OR_RETURN(options.prefill_chunk, flags.GetInt("prefill-chunk", 512));
  MP_ASSIGN_OR_RETURN(options.backend, ParseBackendKind(flags.Get("backend").value_or("cpu")));
  options.device = world.local_rank;
  options.policy_file = flags.Get("policy").value_or("");

  TaskGridOptions grid;
  grid.kinds.clear();
  for (const std::string& t : SplitList(flags.Get("tasks").value_or("needle"))) {
    MP_ASSIGN_OR_RETURN(TaskKind kind, ParseTaskKind(t));
    grid.kinds.push_back(kind);
  }
  MP_REQUIRE(!grid.kinds.empty(), "--tasks is empty");
  MP_ASSIGN_OR_RETURN(grid.lengths, ParseLengths(flags.Get("lengths").value_or("1K,2K,4K,8K")));
  MP_ASSIGN_OR_RETURN(grid.depths,
                      ParseDepths(flags.Get("depths").value_or("0,0.25,0.5,0.75,1")));
  MP_ASSIGN_OR_RETURN(grid.samples, GetSmallInt(flags, "samples", 1));
  MP_REQUIRE(grid.samples >= 1, "--samples must be >= 1");
  MP_ASSIGN_OR_RETURN(grid.base.num_pairs, GetSmallInt(flags, "pairs", 8));
  MP_ASSIGN_OR_RETURN(grid.base.hops, GetSmallInt(flags, "hops", 4));
  MP_ASSIGN_OR_RETURN(grid.base.distractors, GetSmallInt(flags, "distractors", 4));
  MP_ASSIGN_OR_RETURN(int64_t seed, flags.GetInt("seed", 0));
  MP_REQUIRE(seed >= 0, "--seed must be >= 0");
  grid.base.seed = static_cast<uint64_t>(seed);
  MP_ASSIGN_OR_RETURN(grid.base.control,
                      ParseTaskControl(flags.Get("control").value_or("none")));
  MP_ASSIGN_OR_RETURN(double min_accuracy, flags.GetDouble("min-accuracy", 0.0));
  MP_REQUIRE(min_accuracy >= 0 && min_accuracy <= 1, "--min-accuracy must lie in [0, 1]");

  MP_ASSIGN_OR_RETURN(auto tokenizer, LoadModelTokenizer(options.model_path));
  MP_ASSIGN_OR_RETURN(RetrievalVocab vocab, RetrievalVocab::FromTokenizer(*tokenizer));
  MP_ASSIGN_OR_RETURN(Haystack haystack, Haystack::Create(*tokenizer, vocab));
  // Every task is built before any work, so that a bad grid fails on every rank up front.
  std::vector<QualityTask> tasks;
  for (const TaskSpec& spec : TaskGrid(grid)) {
    MP_ASSIGN_OR_RETURN(QualityTask task, MakeTask(haystack, spec));
    tasks.push_back(std::move(task));
  }

  MP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                      CreateDataPlane(MPI_COMM_WORLD, world.local_rank, options.backend));
  MP_ASSIGN_OR_RETURN(auto engine, Engine::Create(options, std::move(comm)));
  MP_REQUIRE(engine->config().vocab_size >= vocab.vocab_size, options.model_path,
             ": the model's vocabulary is smaller than its tokenizer's");
  RunLabels labels;
  labels.backend = BackendKindName(options.backend);
  labels.kv_dtype = kv_name;
  labels.ranks = engine->comm().size();
  if (!options.policy_file.empty()) {
    std::string name = options.policy_file.substr(options.policy_file.find_last_of('/') + 1);
    if (const size_t dot = name.rfind('.'); dot != std::string::npos && dot > 0) name.resize(dot);
    labels.policy = name;
  }

  const bool speak = world.rank == 0;
  std::vector<TaskResult> results;
  for (const QualityTask& task : tasks) {
    MP_ASSIGN_OR_RETURN(TaskResult r, RunTask(*engine, task));
    if (speak)
      std::cerr << "millipede-quality: " << TaskKindName(task.spec.kind) << " "
                << LengthLabel(task.spec.context_tokens) << " depth "
                << PercentLabel(task.spec.depth) << " seed " << task.spec.seed << ": "
                << (r.correct ? "right" : "wrong") << " (" << r.correct_steps << "/"
                << task.expected.size() << ", TTFT " << r.ttft_s << " s)\n";
    results.push_back(std::move(r));
  }
  const std::vector<CellSummary> cells = Summarize(results);
  if (speak) {
    std::cout << ResultsTable(cells, labels);
    if (auto dir = flags.Get("out")) {
      if (::mkdir(dir->c_str(), 0755) != 0 && errno != EEXIST)
        return IoError("cannot create " + *dir + ": " + std::strerror(errno));
      MP_RETURN_IF_ERROR(
          WriteStringToFile(JoinPath(*dir, "results.csv"), ResultsCsv(results, labels)));
      MP_RETURN_IF_ERROR(
          WriteStringToFile(JoinPath(*dir, "tasks.jsonl"), TasksJsonLines(results)));
      for (TaskKind kind : grid.kinds) {
        const HeatmapData data =
            kind == TaskKind::kChain ? ChainStepHeatmap(results) : DepthHeatmap(results, kind);
        MP_ASSIGN_OR_RETURN(RgbImage image, RenderHeatmap(data));
        MP_RETURN_IF_ERROR(
            WritePng(JoinPath(*dir, std::string(TaskKindName(kind)) + ".png"), image));
      }
    }
  }
  for (const CellSummary& c : cells) {
    MP_REQUIRE(c.accuracy() >= min_accuracy, TaskKindName(c.kind), " at ",
               LengthLabel(c.context_tokens), " depth ", PercentLabel(c.depth), ": accuracy ",
               PercentLabel(c.accuracy()), " is below --min-accuracy ",
               PercentLabel(min_accuracy));
  }
  return OkStatus();
}

}  // namespace
}  // namespace millipede

int main(int argc, char** argv) {
  return millipede::RunMpiMain("millipede-quality", argc, argv, millipede::Run);
}
