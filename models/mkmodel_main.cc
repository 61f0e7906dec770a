// millipede-mkmodel: writes a random-weight model in Hugging Face format (config.json,
// safetensors, tokenizer.json) for any Llama-family shape, or the constructed retrieval model.
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "checkpoint/safetensors_writer.h"
#include "common/file_util.h"
#include "common/flags.h"
#include "models/demo_corpus.h"
#include "models/model_presets.h"
#include "models/retrieval_model.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/tokenizer.h"
#include "worker/random_weights.h"

namespace millipede {
namespace {

constexpr char kUsage[] = R"(usage: millipede-mkmodel --preset NAME --out DIR [options]

Writes a random-weight model in Hugging Face format: config.json, model.safetensors (or shards),
tokenizer.json.

  --preset NAME              tiny | llama3-8b | retrieval
                             (retrieval: weights constructed so that attention retrieves needles
                             at any length, see docs/quality.md; takes only --out and --dtype)
  --out DIR                  output directory (created)
  --dtype D                  bf16 (default) | fp16 | fp32
  --seed S                   random seed (default 0)
  --tokenizer FILE           copy this tokenizer.json (default: train a small byte-level BPE)
  --bpe-merges N             merges of the trained tokenizer (default 1000)
  --shard-size-mb N          write shards of at most N MB with an index (default: one file)
Shape overrides (default: the preset's):
  --model-type T             llama | mistral | qwen2 (qwen2 adds q/k/v biases)
  --vocab-size N --hidden-size N --intermediate-size N --num-layers N --num-heads N
  --num-kv-heads N --head-dim N --max-position-embeddings N --rms-norm-eps E --rope-theta X
  --rope-scaling none|linear|dynamic|llama3 --rope-factor F --rope-original-max N
  --tie-word-embeddings
)";

Status ApplyShapeFlags(const Flags& flags, ModelConfig* c) {
  if (auto t = flags.Get("model-type")) c->model_type = *t;
  auto set_int = [&](const char* flag, int64_t* field) -> Status {
    MP_ASSIGN_OR_RETURN(*field, flags.GetInt(flag, *field));
    return OkStatus();
  };
  MP_RETURN_IF_ERROR(set_int("vocab-size", &c->vocab_size));
  MP_RETURN_IF_ERROR(set_int("hidden-size", &c->hidden_size));
  MP_RETURN_IF_ERROR(set_int("intermediate-size", &c->intermediate_size));
  MP_RETURN_IF_ERROR(set_int("num-layers", &c->num_hidden_layers));
  MP_RETURN_IF_ERROR(set_int("num-heads", &c->num_attention_heads));
  MP_RETURN_IF_ERROR(set_int("num-kv-heads", &c->num_key_value_heads));
  MP_RETURN_IF_ERROR(set_int("head-dim", &c->head_dim));
  MP_RETURN_IF_ERROR(set_int("max-position-embeddings", &c->max_position_embeddings));
  MP_ASSIGN_OR_RETURN(c->rms_norm_eps, flags.GetDouble("rms-norm-eps", c->rms_norm_eps));
  MP_ASSIGN_OR_RETURN(c->rope_theta, flags.GetDouble("rope-theta", c->rope_theta));
  if (auto s = flags.Get("rope-scaling")) {
    if (*s == "none") c->rope_scaling = RopeScaling{};
    else if (*s == "linear") c->rope_scaling.type = RopeScalingType::kLinear;
    else if (*s == "dynamic") c->rope_scaling.type = RopeScalingType::kDynamic;
    else if (*s == "llama3") c->rope_scaling.type = RopeScalingType::kLlama3;
    else return InvalidArgumentError("--rope-scaling: unknown type \"" + *s + "\"");
  }
  MP_ASSIGN_OR_RETURN(c->rope_scaling.factor, flags.GetDouble("rope-factor", c->rope_scaling.factor));
  MP_RETURN_IF_ERROR(set_int("rope-original-max", &c->rope_scaling.original_max_position_embeddings));
  if (c->rope_scaling.type == RopeScalingType::kLlama3 &&
      c->rope_scaling.original_max_position_embeddings == 0)
    c->rope_scaling.original_max_position_embeddings = 8192;
  if (flags.GetBool("tie-word-embeddings")) c->tie_word_embeddings = true;
  if (!flags.Has("head-dim") && (flags.Has("hidden-size") || flags.Has("num-heads")) &&
      c->num_attention_heads > 0)
    c->head_dim = c->hidden_size / c->num_attention_heads;
  // The families differ in their biases: qwen2 has q/k/v biases, llama and mistral none.
  c->qkv_bias = c->model_type == "qwen2";
  return OkStatus();
}

// Sets bos/eos ids from the tokenizer's special tokens, so that generation stops where the
// tokenizer's end-of-text token is produced.
void SetSpecialIds(const Tokenizer& tok, ModelConfig* c) {
  c->bos_token_id.reset();
  c->eos_token_ids.clear();
  for (const char* bos : {"<|begin_of_text|>", "<s>"}) {
    if (auto id = tok.TokenToId(bos)) {
      c->bos_token_id = *id;
      break;
    }
  }
  for (const char* eos : {"<|end_of_text|>", "<|eot_id|>", "<|endoftext|>", "<|im_end|>", "</s>"})
    if (auto id = tok.TokenToId(eos)) c->eos_token_ids.push_back(*id);
}

Status Run(int argc, char** argv) {
  MP_ASSIGN_OR_RETURN(Flags flags, Flags::Parse(argc, argv, {"tie-word-embeddings", "help"}));
  if (flags.GetBool("help")) {
    std::cout << kUsage;
    return OkStatus();
  }
  MP_RETURN_IF_ERROR(flags.CheckKnown(
      {"preset", "out", "dtype", "seed", "tokenizer", "bpe-merges", "shard-size-mb", "model-type",
       "vocab-size", "hidden-size", "intermediate-size", "num-layers", "num-heads", "num-kv-heads",
       "head-dim", "max-position-embeddings", "rms-norm-eps", "rope-theta", "rope-scaling",
       "rope-factor", "rope-original-max", "tie-word-embeddings", "help"}));
  MP_REQUIRE(flags.positional().empty(), "unexpected argument \"", flags.positional()[0], "\"");
  MP_ASSIGN_OR_RETURN(std::string preset, flags.GetRequired("preset"));
  MP_ASSIGN_OR_RETURN(std::string out_dir, flags.GetRequired("out"));
  MP_ASSIGN_OR_RETURN(ModelConfig config, ModelPreset(preset));
  if (preset == "retrieval") {
    for (const char* f : {"seed", "tokenizer", "bpe-merges", "shard-size-mb", "model-type",
                          "vocab-size", "hidden-size", "intermediate-size", "num-layers",
                          "num-heads", "num-kv-heads", "head-dim", "max-position-embeddings",
                          "rms-norm-eps", "rope-theta", "rope-scaling", "rope-factor",
                          "rope-original-max", "tie-word-embeddings"}) {
      MP_REQUIRE(!flags.Has(f),
                 "--preset retrieval takes only --out and --dtype (its shape, tokenizer and "
                 "weights are fixed by the construction), got --", f);
    }
    MP_ASSIGN_OR_RETURN(DType dtype, ParseFloatDTypeName(flags.Get("dtype").value_or("bf16")));
    MP_RETURN_IF_ERROR(WriteRetrievalModel(out_dir, dtype));
    std::cerr << "millipede-mkmodel: wrote " << out_dir << " (retrieval, " << DTypeName(dtype)
              << ")\n";
    return OkStatus();
  }

  RandomWeightsOptions weights;
  MP_ASSIGN_OR_RETURN(weights.dtype, ParseFloatDTypeName(flags.Get("dtype").value_or("bf16")));
  MP_ASSIGN_OR_RETURN(int64_t seed, flags.GetInt("seed", 0));
  weights.seed = static_cast<uint64_t>(seed);
  MP_ASSIGN_OR_RETURN(int64_t shard_mb, flags.GetInt("shard-size-mb", 0));
  MP_REQUIRE(shard_mb >= 0 && shard_mb <= (int64_t{1} << 30), "--shard-size-mb must lie in [0, ",
             int64_t{1} << 30, "], got ", shard_mb);
  config.torch_dtype = weights.dtype == DType::kF32   ? "float32"
                       : weights.dtype == DType::kF16 ? "float16"
                                                      : "bfloat16";

  std::string tokenizer_json;
  if (auto path = flags.Get("tokenizer")) {
    MP_ASSIGN_OR_RETURN(tokenizer_json, ReadFileToString(*path));
  } else {
    MP_ASSIGN_OR_RETURN(int64_t merges, flags.GetInt("bpe-merges", 1000));
    MP_REQUIRE(merges >= 0 && merges <= 100000, "--bpe-merges must lie in [0, 100000]");
    MP_ASSIGN_OR_RETURN(tokenizer_json,
                        TrainByteLevelBpe(DemoCorpus(), static_cast<int32_t>(merges),
                                          {"<|begin_of_text|>", "<|end_of_text|>"}));
  }
  MP_ASSIGN_OR_RETURN(auto tokenizer, Tokenizer::FromJson(tokenizer_json, "tokenizer.json"));
  // A tiny model's vocabulary is its tokenizer's; a larger preset keeps its own size unless the
  // tokenizer needs more ids.
  if (preset == "tiny") config.vocab_size = tokenizer->vocab_size();
  config.vocab_size = std::max<int64_t>(config.vocab_size, tokenizer->vocab_size());
  SetSpecialIds(*tokenizer, &config);
  MP_RETURN_IF_ERROR(ApplyShapeFlags(flags, &config));
  MP_REQUIRE(config.vocab_size >= tokenizer->vocab_size(), "--vocab-size ", config.vocab_size,
             " is smaller than the tokenizer's ", tokenizer->vocab_size(), " ids");
  MP_RETURN_IF_ERROR(ValidateModelConfig(config));

  if (::mkdir(out_dir.c_str(), 0755) != 0 && errno != EEXIST)
    return IoError("cannot create " + out_dir + ": " + std::strerror(errno));
  MP_ASSIGN_OR_RETURN(std::vector<NamedHostTensor> tensors,
                      GenerateRandomWeights(config, weights));
  std::vector<NamedTensor> views;
  for (const auto& t : tensors) views.emplace_back(t.name, t.tensor.view());
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  if (shard_mb > 0) {
    MP_RETURN_IF_ERROR(WriteShardedSafetensors(out_dir, views,
                                               static_cast<uint64_t>(shard_mb) << 20, metadata));
  } else {
    MP_RETURN_IF_ERROR(WriteSafetensors(JoinPath(out_dir, "model.safetensors"), views, metadata));
  }
  MP_RETURN_IF_ERROR(WriteStringToFile(JoinPath(out_dir, "config.json"),
                                       ModelConfigToJson(config).dump(2) + "\n"));
  MP_RETURN_IF_ERROR(WriteStringToFile(JoinPath(out_dir, "tokenizer.json"), tokenizer_json));
  int64_t params = 0;
  for (const auto& t : tensors) params += t.tensor.NumElements();
  std::cerr << "millipede-mkmodel: wrote " << out_dir << " (" << preset << ", "
            << config.num_hidden_layers << " layers, hidden " << config.hidden_size << ", vocab "
            << config.vocab_size << ", " << params << " parameters, " << DTypeName(weights.dtype)
            << ")\n";
  return OkStatus();
}

}  // namespace
}  // namespace millipede

int main(int argc, char** argv) {
  millipede::Status s = millipede::Run(argc, argv);
  if (!s.ok()) {
    std::cerr << "millipede-mkmodel: " << s.ToString() << "\n";
    return 1;
  }
  return 0;
}
