// A Llama-family model stored as GGUF: its config from the metadata and its weights, dequantised
// and renamed to the Hugging Face layout the engine loads (model_tensors.h).
//
// Architectures (general.architecture): llama, mistral and qwen2, with their keys
// {arch}.context_length, .embedding_length, .feed_forward_length, .block_count,
// .attention.head_count, .attention.head_count_kv, .attention.key_length / .value_length,
// .attention.layer_norm_rms_epsilon, .rope.freq_base, .rope.dimension_count,
// .rope.scaling.{type,factor,original_context_length}, .attention.sliding_window (mistral) and
// .vocab_size. Anything else is refused by name.
//
// Tensors: token_embd, output_norm, output (absent: tied to token_embd) and per block
// blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down}
// (.weight; qwen2 also attn_{q,k,v}.bias). llama.cpp's converter reorders the rows of each head
// of a llama/mistral Q and K projection (it interleaves the two rotary halves: HF row
// h*d + t*d/2 + j is stored as row h*d + 2j + t); they are put back here.
#pragma once

#include <string>
#include <vector>

#include "checkpoint/gguf.h"
#include "checkpoint/model_config.h"
#include "checkpoint/model_tensors.h"
#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

// The config the file describes, validated (ValidateModelConfig). bos/eos ids come from
// tokenizer.ggml.bos_token_id / eos_token_id; vocab_size from {arch}.vocab_size, else the
// embedding's rows. InvalidArgument naming the file and the key.
StatusOr<ModelConfig> ModelConfigFromGguf(const GgufFile& file);

// Every weight of ExpectedModelTensors(config), in that order, with Hugging Face names, shapes
// and row order, dequantised into `dtype` (kF32, kBF16 or kF16; norms too). Missing tensors,
// wrong shapes and tensors the model does not use are InvalidArgument naming them.
StatusOr<std::vector<NamedHostTensor>> LoadGgufWeights(const GgufFile& file,
                                                       const ModelConfig& config, DType dtype);

// Whether `path` is a GGUF file (a regular file starting with the magic "GGUF"); the model
// paths tools take (--model) are a GGUF file or a Hugging Face directory.
bool IsGgufFile(const std::string& path);

// The config of the model at `path`: ModelConfigFromGguf for a GGUF file, else
// LoadModelConfig(path/config.json); InvalidArgument for a regular file that is not GGUF.
StatusOr<ModelConfig> LoadModelConfigAt(const std::string& path);

// The GGUF name of a Hugging Face weight name ("model.layers.3.mlp.up_proj.weight" ->
// "blk.3.ffn_up.weight"); empty for a name outside the layout.
std::string GgufTensorName(const std::string& hf_name);

}  // namespace millipede
