#include "worker/engine_flags.h"

#include "checkpoint/gguf_model.h"
#include "checkpoint/model_config.h"
#include "worker/dist/mpi_communicator.h"
#ifdef MILLIPEDE_HAVE_CUDA
#include "common/cuda_check.h"
#include "worker/dist/nccl_communicator.h"
#endif

namespace millipede {

const char kEngineFlagsUsage[] =
    R"(  --model PATH           a Hugging Face model directory (config.json, safetensors,
                         tokenizer.json) or a GGUF file (llama.cpp's format: weights, tokenizer
                         and chat template in one file)
  --weight-dtype D       a GGUF file's weights, dequantised at load into: auto (default: fp32
                         on the CPU backend, bf16 on a GPU) | fp32 | bf16 | fp16
  --kv-dtype D           KV cache storage: bf16 (default) | fp16 | fp32 | fp8 (E4M3)
  --kv-scales FILE       with --kv-dtype fp8: calibrated per-layer scales of the cached K and V
                         (JSON {"k_scale": [...], "v_scale": [...]}, one per layer; each rounded
                         up to a power of two and folded into the attention weights)
  --prefill-chunk N      tokens per projection/MLP chunk (default 512)
  --attention-chunk N    query rows per attention call (default: the prefill chunk)
  --policy FILE          attention policy file (JSON; default dense/full)
  --selected-kv T        where OmniKV's selected layers keep their prompt's KV: auto (default:
                         the GPU when it fits, else pinned host memory) | device | host
  --profile              time the engine's phases (synchronises at phase boundaries)
  --decode-graphs M      record decode steps once and replay them (CUDA graphs): auto (default:
                         where the backend records) | off | unrecorded (their arguments only)
  --split-kv-heads S     layers mixing full and streaming KV heads (DuoAttention) keep a store
                         per group of heads, the streaming heads only their sinks and window:
                         on (default: where it saves memory) | off (one store of every row)
  --prefill-exchange M   how ranks share a prefill step's dense heads: auto (default: per step
                         and layer, whichever moves fewer bytes) | pass-kv (the ring of K/V
                         blocks) | pass-q (queries out, partials back)
  --decode-mlp M         with several ranks, a decode token's MLP: split (default: each rank
                         its share of the intermediate columns, one all-gather per layer) |
                         whole (every rank all of it)
  --backend B            cpu (default) | cuda
  --random-weights       the model's config.json with random weights (bf16, seed 0) instead of
                         its safetensors: benchmarks of the service at a model's shape without
                         writing its checkpoint
)";

std::vector<std::string> EngineFlagNames() {
  return {"model",          "kv-dtype",         "prefill-chunk", "attention-chunk", "policy",
          "selected-kv",    "profile",          "backend",       "random-weights",  "decode-graphs",
          "split-kv-heads", "prefill-exchange", "decode-mlp",    "weight-dtype",    "kv-scales"};
}

StatusOr<EngineOptions> ParseEngineFlags(const Flags& flags, int local_rank) {
  EngineOptions options;
  MP_ASSIGN_OR_RETURN(options.model_path, flags.GetRequired("model"));
  MP_ASSIGN_OR_RETURN(options.kv_dtype, ParseKvDTypeName(flags.Get("kv-dtype").value_or("bf16")));
  if (const std::optional<std::string> scales = flags.Get("kv-scales")) {
    MP_REQUIRE(options.kv_dtype == DType::kF8E4M3, "--kv-scales needs --kv-dtype fp8");
    MP_ASSIGN_OR_RETURN(options.kv_scales, ReadKvScalesFile(*scales));
  }
  MP_ASSIGN_OR_RETURN(options.prefill_chunk, flags.GetInt("prefill-chunk", 512));
  MP_ASSIGN_OR_RETURN(options.attention_chunk, flags.GetInt("attention-chunk", 0));
  MP_REQUIRE(options.attention_chunk >= 0, "--attention-chunk must be >= 0, got ",
             options.attention_chunk);
  options.policy_file = flags.Get("policy").value_or("");
  MP_ASSIGN_OR_RETURN(options.selected_kv,
                      ParseSelectedKvTier(flags.Get("selected-kv").value_or("auto")));
  options.profile = flags.GetBool("profile");
  MP_ASSIGN_OR_RETURN(options.decode_graphs,
                      ParseDecodeGraphs(flags.Get("decode-graphs").value_or("auto")));
  MP_ASSIGN_OR_RETURN(options.split_kv_heads,
                      ParseSplitKvHeads(flags.Get("split-kv-heads").value_or("on")));
  MP_ASSIGN_OR_RETURN(options.prefill_exchange,
                      ParsePrefillExchange(flags.Get("prefill-exchange").value_or("auto")));
  MP_ASSIGN_OR_RETURN(options.split_decode_mlp,
                      ParseDecodeMlp(flags.Get("decode-mlp").value_or("split")));
  MP_ASSIGN_OR_RETURN(options.backend, ParseBackendKind(flags.Get("backend").value_or("cpu")));
  options.device = local_rank;
  const std::string weight_dtype = flags.Get("weight-dtype").value_or("auto");
  if (weight_dtype != "auto") {
    MP_ASSIGN_OR_RETURN(DType dtype, ParseFloatDTypeName(weight_dtype));
    MP_REQUIRE(dtype != DType::kF64, "--weight-dtype: fp32, bf16 or fp16, not ", weight_dtype);
    options.gguf_weight_dtype = dtype;
  }
  if (flags.GetBool("random-weights")) {
    MP_ASSIGN_OR_RETURN(options.random_config, LoadModelConfigAt(options.model_path));
    options.model_path.clear();
  }
  return options;
}

StatusOr<std::unique_ptr<Communicator>> CreateDataPlane(MPI_Comm comm, int local_rank,
                                                        BackendKind backend) {
  int size = 1;
  MP_MPI_CHECK(MPI_Comm_size(comm, &size));
  if (size == 1) return std::unique_ptr<Communicator>();
#ifdef MILLIPEDE_HAVE_CUDA
  if (backend == BackendKind::kCuda) {
    MP_CUDA_CHECK(cudaSetDevice(local_rank));
    return CreateNcclCommunicator(comm);
  }
#endif
  return CreateMpiCommunicator(comm);
}

}  // namespace millipede
