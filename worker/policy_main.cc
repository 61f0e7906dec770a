// millipede-policy: attention policies from MInference's and DuoAttention's published files and
// XAttention's settings, a search for one on a reference prompt (MInference's Algorithm 1,
// worker/policy_search.h), and a summary of any policy.
//
//   millipede-policy import-minference CONFIG.json --model MODEL --out POLICY.json
//       [--dense-below N] [--starting-layer L]
//   millipede-policy import-duo GATES.tsv --model MODEL (--threshold T | --sparsity Q)
//       [--sink N --recent N] [--dense-below N] --out POLICY.json
//   millipede-policy import-xattention --model MODEL [--threshold T] [--stride S]
//       [--block-size B] [--starting-layer L] [--dense-below N] --out POLICY.json
//   millipede-policy search --model MODEL (--prompt-file F | --prompt-ids F) --out POLICY.json
//       [--budget D] [--sink N] [--dense-below N] [--backend B] [--kv-dtype D]
//   millipede-policy show POLICY.json --model MODEL [--length N]
//
// MODEL is a Hugging Face model folder or a GGUF file (its config gives the layers and heads the
// files must match). Exit status: 0 on success, 1 on a bad file or value, 2 on bad usage.
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>

#include "checkpoint/gguf_model.h"
#include "checkpoint/model_config.h"
#include "common/file_util.h"
#include "common/flags.h"
#include "model_files/model_files.h"
#include "policy/attention_policy.h"
#include "policy/duo_import.h"
#include "policy/minference_import.h"
#include "policy/policy_summary.h"
#include "policy/policy_writer.h"
#include "policy/xattention_import.h"
#include "tokenizer/tokenizer.h"
#include "worker/engine_flags.h"
#include "worker/policy_search.h"

namespace millipede {
namespace {

constexpr char kUsage[] =
    "usage:\n"
    "  millipede-policy import-minference CONFIG.json --model MODEL --out POLICY.json\n"
    "      [--dense-below N] [--starting-layer L]\n"
    "    MInference's per-model config (a list of layers, query head -> [pattern, vertical,\n"
    "    slash, score]) -> a policy per KV head; layers below L stay dense\n"
    "  millipede-policy import-duo GATES.tsv --model MODEL (--threshold T | --sparsity Q)\n"
    "      [--sink N --recent N] [--dense-below N] --out POLICY.json\n"
    "    DuoAttention's full_attention_heads.tsv -> retrieval heads (dense, full) and streaming\n"
    "    heads (a-shape, streaming-head); sink and recent default to the config.json beside it\n"
    "  millipede-policy import-xattention --model MODEL [--threshold T] [--stride S]\n"
    "      [--block-size B] [--starting-layer L] [--dense-below N] --out POLICY.json\n"
    "    XAttention's settings (threshold 0.9, stride 8, block_size 128 by default) -> the\n"
    "    antidiagonal pattern on every KV head of layers L and later\n"
    "  millipede-policy search --model MODEL (--prompt-file F | --prompt-ids F) --out POLICY.json\n"
    "      [--budget D] [--sink N] [--dense-below N] [--backend cpu|cuda] [--kv-dtype D]\n"
    "      [--prefill-chunk N] [--attention-chunk N]\n"
    "    MInference's pattern search: per layer and KV head, a-shape, block-sparse, two\n"
    "    vertical-slash mixes and antidiagonal, each at D (default 0.1) of the causal pairs of\n"
    "    the prompt, run on\n"
    "    the prompt (text through the model's tokenizer, or token ids); each head keeps the\n"
    "    one whose attention output is closest to dense attention's\n"
    "  millipede-policy show POLICY.json --model MODEL [--length N]\n"
    "    per layer: each KV head's pattern and decode role, the expected prefill density at N\n"
    "    tokens (default: the model's max_position_embeddings)\n"
    "MODEL: a Hugging Face model folder (config.json) or a GGUF file. docs/policies.md has the\n"
    "mappings.\n";

constexpr int kBadInput = 1;
constexpr int kBadUsage = 2;

// A failure and the exit status it gets.
struct Failure {
  int exit_code;
  Status status;
};

std::optional<Failure> Usage(const Status& s) {
  if (s.ok()) return std::nullopt;
  return Failure{kBadUsage, s};
}
std::optional<Failure> Input(const Status& s) {
  if (s.ok()) return std::nullopt;
  return Failure{kBadInput, s};
}

// The flags of one subcommand and its single positional argument.
StatusOr<std::string> CheckCommandLine(const Flags& flags, const std::vector<std::string>& known,
                                       const char* what) {
  MP_RETURN_IF_ERROR(flags.CheckKnown(known));
  const std::vector<std::string>& args = flags.positional();
  MP_REQUIRE(args.size() == 2, args[0], " takes one ", what, ", got ", args.size() - 1,
             " arguments");
  return args[1];
}

StatusOr<ModelConfig> LoadModel(const Flags& flags) {
  MP_ASSIGN_OR_RETURN(std::string path, flags.GetRequired("model"));
  return LoadModelConfigAt(path);
}

// Writes the policy, reads it back as the engine will and checks it is the same policy.
Status WriteAndCheck(const PolicyImport& imported, const ModelConfig& model,
                     const std::string& out) {
  const int64_t layers = model.num_hidden_layers;
  const int64_t kv_heads = model.num_key_value_heads;
  MP_RETURN_IF_ERROR(WriteAttentionPolicy(out, imported.policy, layers, kv_heads));
  MP_ASSIGN_OR_RETURN(AttentionPolicy loaded, LoadAttentionPolicy(out, layers, kv_heads));
  MP_ASSERT(loaded == imported.policy, "the written policy reads back differently: ", out);
  for (const std::string& note : imported.notes) std::cerr << "note: " << note << "\n";
  std::cout << "wrote " << out << ": " << loaded.Summary() << "\n";
  return OkStatus();
}

std::optional<Failure> ImportMInference(const Flags& flags) {
  StatusOr<std::string> config = CheckCommandLine(
      flags, {"model", "out", "dense-below", "starting-layer"}, "MInference config");
  if (!config.ok()) return Usage(config.status());
  StatusOr<std::string> out = flags.GetRequired("out");
  if (!out.ok()) return Usage(out.status());
  if (!flags.Has("model")) return Usage(InvalidArgumentError("missing required flag --model"));
  MInferenceImportOptions options;
  StatusOr<int64_t> dense_below = flags.GetInt("dense-below", 0);
  StatusOr<int64_t> starting_layer = flags.GetInt("starting-layer", 0);
  if (!dense_below.ok()) return Input(dense_below.status());
  if (!starting_layer.ok()) return Input(starting_layer.status());
  options.dense_below_tokens = *dense_below;
  options.starting_layer = *starting_layer;

  StatusOr<ModelConfig> model = LoadModel(flags);
  if (!model.ok()) return Input(model.status());
  StatusOr<std::string> text = ReadFileToString(*config);
  if (!text.ok()) return Input(text.status());
  StatusOr<PolicyImport> imported = ImportMInferenceConfig(*text, *model, options, *config);
  if (!imported.ok()) return Input(imported.status());
  if (imported->merged_parameter_heads > 0)
    std::cerr << "note: " << imported->merged_parameter_heads
              << " KV head(s) took the largest sizes of their query heads\n";
  return Input(WriteAndCheck(*imported, *model, *out));
}

// --sink and --recent, else the config.json DuoAttention keeps beside the TSV.
StatusOr<DuoStreamingSizes> StreamingSizes(const Flags& flags, const std::string& gates_path) {
  DuoStreamingSizes sizes;
  if (!flags.Has("sink") || !flags.Has("recent")) {
    const std::filesystem::path dir = std::filesystem::path(gates_path).parent_path();
    const std::string config =
        (dir.empty() ? std::filesystem::path("config.json") : dir / "config.json").string();
    if (!FileExists(config))
      return InvalidArgumentError(
          "give --sink and --recent: there is no config.json (DuoAttention's, "
          "with sink_size and recent_size) beside " +
          gates_path);
    MP_ASSIGN_OR_RETURN(std::string text, ReadFileToString(config));
    MP_ASSIGN_OR_RETURN(sizes, ParseDuoPatternConfig(text, config));
  }
  MP_ASSIGN_OR_RETURN(sizes.sink, flags.GetInt("sink", sizes.sink));
  MP_ASSIGN_OR_RETURN(sizes.recent, flags.GetInt("recent", sizes.recent));
  return sizes;
}

std::optional<Failure> ImportDuo(const Flags& flags) {
  StatusOr<std::string> gates_path = CheckCommandLine(
      flags, {"model", "out", "threshold", "sparsity", "sink", "recent", "dense-below"},
      "DuoAttention gates file");
  if (!gates_path.ok()) return Usage(gates_path.status());
  StatusOr<std::string> out = flags.GetRequired("out");
  if (!out.ok()) return Usage(out.status());
  if (!flags.Has("model")) return Usage(InvalidArgumentError("missing required flag --model"));
  if (flags.Has("threshold") == flags.Has("sparsity"))
    return Usage(InvalidArgumentError("give exactly one of --threshold and --sparsity"));
  DuoImportOptions options;
  StatusOr<double> cut = flags.GetDouble(flags.Has("threshold") ? "threshold" : "sparsity", 0);
  if (!cut.ok()) return Input(cut.status());
  if (flags.Has("threshold")) {
    options.threshold = *cut;
  } else {
    options.sparsity = *cut;
  }
  StatusOr<int64_t> dense_below = flags.GetInt("dense-below", 0);
  if (!dense_below.ok()) return Input(dense_below.status());
  options.dense_below_tokens = *dense_below;
  StatusOr<DuoStreamingSizes> sizes = StreamingSizes(flags, *gates_path);
  if (!sizes.ok()) return Input(sizes.status());
  options.sizes = *sizes;

  StatusOr<ModelConfig> model = LoadModel(flags);
  if (!model.ok()) return Input(model.status());
  StatusOr<std::string> text = ReadFileToString(*gates_path);
  if (!text.ok()) return Input(text.status());
  StatusOr<DuoGates> gates = ParseDuoGates(*text, *gates_path);
  if (!gates.ok()) return Input(gates.status());
  StatusOr<PolicyImport> imported = ImportDuoGates(*gates, *model, options, *gates_path);
  if (!imported.ok()) return Input(imported.status());
  std::cerr << "retrieval heads: " << imported->retrieval_heads << " of " << gates->values.size()
            << " (sink " << options.sizes.sink << ", recent " << options.sizes.recent << ")\n";
  return Input(WriteAndCheck(*imported, *model, *out));
}

std::optional<Failure> ImportXAttentionSettings(const Flags& flags) {
  Status known = flags.CheckKnown(
      {"model", "out", "threshold", "stride", "block-size", "starting-layer", "dense-below"});
  if (!known.ok()) return Usage(known);
  if (flags.positional().size() != 1)
    return Usage(InvalidArgumentError("import-xattention takes no arguments besides its flags"));
  StatusOr<std::string> out = flags.GetRequired("out");
  if (!out.ok()) return Usage(out.status());
  if (!flags.Has("model")) return Usage(InvalidArgumentError("missing required flag --model"));
  XAttentionImportOptions options;
  StatusOr<double> threshold = flags.GetDouble("threshold", options.threshold);
  StatusOr<int64_t> stride = flags.GetInt("stride", options.stride);
  StatusOr<int64_t> block = flags.GetInt("block-size", options.block);
  StatusOr<int64_t> starting_layer = flags.GetInt("starting-layer", 0);
  StatusOr<int64_t> dense_below = flags.GetInt("dense-below", 0);
  for (const Status& s : {threshold.status(), stride.status(), block.status(),
                          starting_layer.status(), dense_below.status()})
    if (!s.ok()) return Input(s);
  options.threshold = *threshold;
  options.stride = *stride;
  options.block = *block;
  options.starting_layer = *starting_layer;
  options.dense_below_tokens = *dense_below;
  StatusOr<ModelConfig> model = LoadModel(flags);
  if (!model.ok()) return Input(model.status());
  StatusOr<PolicyImport> imported = ImportXAttention(*model, options);
  if (!imported.ok()) return Input(imported.status());
  return Input(WriteAndCheck(*imported, *model, *out));
}

// The reference prompt: text through the model's tokenizer (its BOS first, as the engine's
// tools add it), or whitespace-separated ids.
StatusOr<std::vector<int32_t>> SearchPrompt(const Flags& flags, const std::string& model_path) {
  if (auto ids = flags.Get("prompt-ids")) {
    MP_ASSIGN_OR_RETURN(std::string text, ReadFileToString(*ids));
    return ParseTokenIds(text);
  }
  MP_ASSIGN_OR_RETURN(std::string text, ReadFileToString(*flags.Get("prompt-file")));
  StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadModelTokenizer(model_path);
  MP_REQUIRE(tokenizer.ok(), tokenizer.status().message(),
             tokenizer.status().code() == StatusCode::kNotFound
                 ? ": give the prompt as ids with --prompt-ids"
                 : "");
  return EncodePrompt(**tokenizer, text, /*add_bos=*/true);
}

std::optional<Failure> Search(const Flags& flags) {
  Status known = flags.CheckKnown({"model", "out", "prompt-file", "prompt-ids", "budget", "sink",
                                   "dense-below", "backend", "kv-dtype", "prefill-chunk",
                                   "attention-chunk", "random-weights"});
  if (!known.ok()) return Usage(known);
  if (flags.positional().size() != 1)
    return Usage(InvalidArgumentError("search takes no arguments besides its flags"));
  StatusOr<std::string> out = flags.GetRequired("out");
  if (!out.ok()) return Usage(out.status());
  if (!flags.Has("model")) return Usage(InvalidArgumentError("missing required flag --model"));
  if (flags.Has("prompt-file") == flags.Has("prompt-ids"))
    return Usage(InvalidArgumentError("give exactly one of --prompt-file and --prompt-ids"));
  PolicySearchOptions options;
  StatusOr<double> budget = flags.GetDouble("budget", options.budget);
  StatusOr<int64_t> sink = flags.GetInt("sink", options.sink_tokens);
  StatusOr<int64_t> dense_below = flags.GetInt("dense-below", 0);
  for (const Status& s : {budget.status(), sink.status(), dense_below.status()})
    if (!s.ok()) return Input(s);
  options.budget = *budget;
  options.sink_tokens = *sink;
  options.dense_below_tokens = *dense_below;
  StatusOr<EngineOptions> engine = ParseEngineFlags(flags, 0);
  if (!engine.ok()) return Input(engine.status());
  StatusOr<ModelConfig> model = LoadModel(flags);
  if (!model.ok()) return Input(model.status());
  StatusOr<std::vector<int32_t>> prompt = SearchPrompt(flags, *flags.Get("model"));
  if (!prompt.ok()) return Input(prompt.status());
  StatusOr<PolicySearchResult> result = SearchPolicy(*engine, *prompt, options);
  if (!result.ok()) return Input(result.status());
  std::cerr << PolicySearchReport(*result);
  PolicyImport searched;
  searched.policy = result->policy;
  return Input(WriteAndCheck(searched, *model, *out));
}

std::optional<Failure> Show(const Flags& flags) {
  StatusOr<std::string> path = CheckCommandLine(flags, {"model", "length"}, "policy file");
  if (!path.ok()) return Usage(path.status());
  if (!flags.Has("model")) return Usage(InvalidArgumentError("missing required flag --model"));
  StatusOr<ModelConfig> model = LoadModel(flags);
  if (!model.ok()) return Input(model.status());
  StatusOr<int64_t> length = flags.GetInt("length", model->max_position_embeddings);
  if (!length.ok()) return Input(length.status());
  if (*length <= 0)
    return Input(InvalidArgumentError("--length must be positive, got " + std::to_string(*length)));
  StatusOr<AttentionPolicy> policy =
      LoadAttentionPolicy(*path, model->num_hidden_layers, model->num_key_value_heads);
  if (!policy.ok()) return Input(policy.status());
  std::cout << PolicySummaryTable(*policy, model->num_attention_heads, *length);
  return std::nullopt;
}

int Run(int argc, char** argv) {
  StatusOr<Flags> flags = Flags::Parse(argc, argv, {"help", "random-weights"});
  std::optional<Failure> failure;
  if (!flags.ok()) {
    failure = Usage(flags.status());
  } else if (flags->GetBool("help")) {
    std::cout << kUsage;
    return 0;
  } else if (flags->positional().empty()) {
    failure = Usage(InvalidArgumentError("no command"));
  } else if (const std::string& command = flags->positional()[0]; command == "import-minference") {
    failure = ImportMInference(*flags);
  } else if (command == "import-duo") {
    failure = ImportDuo(*flags);
  } else if (command == "import-xattention") {
    failure = ImportXAttentionSettings(*flags);
  } else if (command == "search") {
    failure = Search(*flags);
  } else if (command == "show") {
    failure = Show(*flags);
  } else {
    failure = Usage(InvalidArgumentError(
        "unknown command \"" + command +
        "\" (import-minference, import-duo, import-xattention, search, show)"));
  }
  if (!failure) return 0;
  std::cerr << "millipede-policy: " << failure->status.message() << "\n";
  if (failure->exit_code == kBadUsage) std::cerr << kUsage;
  return failure->exit_code;
}

}  // namespace
}  // namespace millipede

int main(int argc, char** argv) {
  try {
    return millipede::Run(argc, argv);
  } catch (const std::exception& e) {
    // Only allocation failure or a library bug gets here; report it instead of aborting.
    std::cerr << "millipede-policy: internal error: " << e.what() << "\n";
    return 1;
  }
}
