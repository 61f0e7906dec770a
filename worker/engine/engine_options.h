// The engine's options (what millipede-run, the worker and the benches set from their flags) and
// the callbacks a step takes.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "checkpoint/model_config.h"
#include "common/dtype.h"
#include "common/status.h"
#include "common/tensor.h"
#include "worker/attention/prefill_exchange.h"
#include "worker/backend/backend.h"
#include "worker/engine/sequence.h"
#include "worker/kv_scales.h"
#include "worker/random_weights.h"

namespace millipede {

// Called after each layer of a step with prefill entries: (layers done, layers total) -> keep
// going?
using LayerCallback = std::function<bool(int64_t layers_done, int64_t layers_total)>;
// Called after the attention of each layer of a step with that layer's attention output for all
// the step's rows, o [rows, num_heads * head_dim] F32 in backend memory (valid during the call):
// tools that study attention (millipede-policy search) read it.
using AttentionObserver = std::function<void(int64_t layer, ConstTensorView o)>;

// Whether decode steps are recorded once and replayed (decode_graphs.h), which takes a step of
// hundreds of small ops off the host's launch path. A step is recorded when it has only decode
// tokens, one rank, no profiling or observer, and every layer of every sequence decodes by plain
// attention over a store whose rows never move (dense layers, DuoAttention's mixed layers).
enum class DecodeGraphs {
  kAuto,  // recorded where the backend records (CUDA); elsewhere the usual steps
  kOff,   // the usual steps
  // The recorded steps' arguments (whole stores, cache rows and lengths read from backend memory)
  // run as usual, never recorded: what a replay computes, on any backend (tests compare the two).
  kUnrecorded,
};
const char* DecodeGraphsName(DecodeGraphs mode);  // "auto", "off", "unrecorded"
StatusOr<DecodeGraphs> ParseDecodeGraphs(std::string_view name);
// EngineOptions::split_kv_heads from a flag's value: "on" or "off".
StatusOr<bool> ParseSplitKvHeads(std::string_view value);
// --decode-mlp: "split" (true) or "whole" (false).
StatusOr<bool> ParseDecodeMlp(std::string_view value);

struct EngineOptions {
  // Hugging Face model directory (config.json + safetensors) or GGUF file. Empty: use
  // `random_config`.
  std::string model_path;
  // The dtype a GGUF file's weights are dequantised into; unset: F32 on the CPU backend (its
  // GEMMs read F32 weights in place), BF16 on a GPU.
  std::optional<DType> gguf_weight_dtype;
  // Random weights for this config when model_path is empty (benchmarks, tests).
  ModelConfig random_config;
  RandomWeightsOptions random_weights;
  BackendKind backend = BackendKind::kCpu;
  // GPU index for the cuda backend (ranks on one node use their node-local rank).
  int device = 0;
  // Storage type of the KV cache: BF16 (default), F16, F32 or F8E4M3.
  DType kv_dtype = DType::kBF16;
  // With an F8E4M3 cache only: per-layer scales of the cached K and V, folded into the attention
  // weights as they are loaded (kv_scales.h); empty: the cache holds K and V unscaled.
  KvScales kv_scales;
  // Tokens per chunk for projections and the MLP: activations are O(chunk x intermediate)
  // rather than O(sequence x intermediate).
  int64_t prefill_chunk = 512;
  // Query rows per attention call in a sharded step (0: prefill_chunk). Larger calls keep a GPU
  // busy; the scratch is O(attention_chunk x heads x head_dim).
  int64_t attention_chunk = 0;
  // Attention policy file (JSON, policy/attention_policy.h); empty: dense/full.
  std::string policy_file;
  // Where OmniKV's selected layers keep their context rows, for sequences whose options leave it
  // to the engine (SequenceOptions::selected_kv kAuto): see SelectedKvTier.
  SelectedKvTier selected_kv = SelectedKvTier::kAuto;
  // For one token (a decode step), run the Q/K/V projections as one GEMM and gate/up as one GEMM
  // over the fused weights (LayerWeights::qkv_proj, gate_up_proj) when they lie back to back in
  // backend memory: as a device backend places them, and as random weights are made on the CPU;
  // a memory-mapped checkpoint on the CPU backend runs them separately. false: separate GEMMs
  // always (the same results on the CPU; tests compare the two).
  bool fuse_projections = true;
  // Measure where the time goes (EngineStats seconds): the backend is synchronised at phase
  // boundaries, which costs a little overlap. Off: only the byte counters are kept.
  bool profile = false;
  // Null: nothing observes.
  AttentionObserver attention_observer;
  DecodeGraphs decode_graphs = DecodeGraphs::kAuto;
  // Whether sequences may keep a store per group of KV heads in layers mixing full and
  // streaming-head decode (SequenceOptions::split_kv_heads); false: one store per layer always.
  bool split_kv_heads = true;
  // How ranks exchange data for a prefill step's dense and A-shape heads
  // (worker/attention/prefill_exchange.h): auto picks per step and layer.
  PrefillExchange prefill_exchange = PrefillExchange::kAuto;
  // With several ranks, every rank holds a decode token's hidden state and would run its whole
  // MLP; split, each rank computes the gate/up rows and down columns of its share of the
  // intermediate columns (Model::OutputAndMlpSlice) and one all-gather per layer and chunk of
  // decode tokens sums the shares: each rank reads 1/ranks of the MLP weights per token. false:
  // every rank computes the whole MLP (no exchange).
  bool split_decode_mlp = true;
};

// What identifies the weights an engine of `options` runs, as 16 hex digits: for a model
// directory its config.json and each weight file's name, size and modification time; for a GGUF
// file its size and modification time; for random weights their options and the model's shape.
// The prefix cache's disk tier keys its files by it, so that entries computed with other weights
// (a checkpoint replaced under the same name) are never reused after a restart. KV scales change
// the cached rows: they are part of it.
std::string WeightsFingerprint(const EngineOptions& options);

}  // namespace millipede
