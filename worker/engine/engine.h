// The engine of one worker rank: a Llama-family decoder (llama, mistral, qwen2) run layer by layer
// on a backend, over any number of sequences at once.
//
// Its parts: the Model (weights, backend, stateless layer pieces: model.h), Sequences (each with
// its KV stores, length, policy and attention strategies: sequence.h), the Workspace (step
// buffers shared by every sequence: workspace.h) and one entry point, RunStep, that runs a
// StepPlan (step_plan.h): prefill chunks and decode tokens of several sequences in one pass over
// the layers — projections and the MLP over all the step's rows, attention per sequence by its
// layer's strategy (worker/attention/).
//
// A sequence may be spread over the ranks of a Communicator (context parallelism; see
// common/shard_plan.h): a prefill entry is sharded, each rank running its own tokens with ring
// attention over every rank's K/V; a decode entry is replicated, every rank running the same
// token, one rank storing its K/V and only (o, lse) partials crossing ranks. With one rank both
// reduce to ordinary single-process inference. Every rank runs the same plans in the same order.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/model_config.h"
#include "common/shard_plan.h"
#include "common/status.h"
#include "policy/attention_policy.h"
#include "worker/attention/attention_env.h"
#include "worker/backend/backend.h"
#include "worker/dist/communicator.h"
#include "worker/engine/decode_graphs.h"
#include "worker/engine/model.h"
#include "worker/engine/sequence.h"
#include "worker/engine/step_plan.h"
#include "worker/engine/workspace.h"
#include "worker/memory_plan.h"

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
  // Hugging Face model directory (config.json + safetensors). Empty: use `random_config`.
  std::string model_dir;
  // Random weights for this config when model_dir is empty (benchmarks, tests).
  ModelConfig random_config;
  RandomWeightsOptions random_weights;
  BackendKind backend = BackendKind::kCpu;
  // GPU index for the cuda backend (ranks on one node use their node-local rank).
  int device = 0;
  // Storage type of the KV cache: BF16 (default), F16 or F32.
  DType kv_dtype = DType::kBF16;
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

class Engine {
 public:
  // `comm` connects the ranks sharing each sequence; null means a single rank. `backend`, when
  // set, runs the engine's ops instead of CreateBackend(options.backend, options.device) (tests
  // wrap a backend to watch its ops); its kind must be options.backend.
  static StatusOr<std::unique_ptr<Engine>> Create(const EngineOptions& options,
                                                  std::unique_ptr<Communicator> comm = nullptr,
                                                  std::unique_ptr<Backend> backend = nullptr);

  const ModelConfig& config() const { return model_->config(); }
  const EngineOptions& options() const { return options_; }
  Backend& backend() { return *backend_; }
  Communicator& comm() { return *comm_; }
  int64_t max_context() const { return model_->max_context(); }
  const EngineStats& stats() const { return stats_; }
  void ResetStats() { stats_ = EngineStats(); }

  // The attention policy sequences get unless they bring their own (dense/full unless set).
  const AttentionPolicy& policy() const { return policy_; }
  // The patterns and roles this engine runs, reported to the coordinator (a worker's hello).
  // Every prefill pattern and decode role on every backend, and layers that mix full and
  // streaming-head decode per KV head (DuoAttention): a streaming store keeps the rows a
  // streaming layer sees, the attention ops' per-KV-head windows serve a-shape prefill and mixed
  // layers, and static eviction and OmniKV's roles are made of backend ops.
  PolicyCapabilities capabilities() const;
  // Checks that `policy` fits the model (ValidateAttentionPolicy) and that this engine runs it:
  // a pattern or role outside capabilities() is Unimplemented naming it, the layer and the head.
  Status CheckPolicy(const AttentionPolicy& policy) const;
  // Checks `policy` (CheckPolicy), then makes it the default for sequences started afterwards;
  // on an error the default is unchanged.
  Status SetPolicy(AttentionPolicy policy);

  // ---- Sequences ----
  // Starts sequence `id` (not running yet) with room for options.capacity positions on this rank.
  // Called by every rank at once: the ranks' memory plans are checked against each GPU's (or
  // host's) free memory, and a host tier's against the host's, before anything is allocated;
  // if any rank cannot fit, every rank fails with its numbers. Selected layers whose tier is
  // kAuto (and the engine's too) go to the host tier when the device cannot hold them (GPU
  // backends). The step buffers for options.step_tokens are allocated here.
  Status StartSequence(SequenceId id, SequenceOptions options);
  // Frees the sequence's KV stores (nothing if it does not exist). When no sequence is left the
  // step buffers are freed too.
  void EndSequence(SequenceId id);
  // The sequence, or null.
  const Sequence* sequence(SequenceId id) const;
  int64_t num_sequences() const { return static_cast<int64_t>(sequences_.size()); }
  // Bytes held by every sequence's KV stores on this rank (both tiers), and in the host tier.
  int64_t KvBytes() const;
  int64_t HostKvBytes() const;
  // The plan StartSequence checks, for this rank (ring rows: the widest rank's step).
  StatusOr<SequenceMemoryPlan> PlanSequence(const SequenceOptions& options,
                                            int64_t ring_rows) const;
  // The most positions this rank could hold in one dense sequence if the engine were empty.
  StatusOr<int64_t> MaxSequencePositionsNow();

  // ---- Steps ----
  // Runs one step plan, called by every rank at once with the same entries (see step_plan.h).
  // Each rank's share is checked first and the outcome exchanged, so one rank's bad input fails
  // the step on every rank before any collective. `after_layer`, when set and the plan has a
  // prefill entry, is called on every rank after each layer; if it returns false on any rank the
  // step stops on every rank with Cancelled (the answers combined by a host all-gather per
  // layer). A step that fails or is cancelled commits nothing: the sequences keep their length
  // and positions (rows the step wrote past them are overwritten by the next step).
  StatusOr<StepOutput> RunStep(const StepPlan& plan, const LayerCallback& after_layer = {});

  // For decode benchmarks: starts sequence `id` (not running yet; every rank at once) whose first
  // `length` positions are already in the cache — placed over the ranks as ShardPlan places a
  // prompt, K and V set to zero (what a decode step costs does not depend on the values) — with
  // room for `decode_positions` more. Skips the prefill that would make a real cache of that
  // length.
  Status StartSyntheticSequence(SequenceId id, int64_t length, int64_t decode_positions);

 private:
  struct Entry;  // one plan entry resolved on this rank (engine_step.cc)
  Engine() = default;
  Sequence* mutable_sequence(SequenceId id);
  AttentionEnv Env(StepProfiler& profiler);
  MemoryPlanShape memory_shape() const;
  // This rank's plan for `*options` (a kAuto tier for selected layers resolved), what it needs
  // of the backend's memory and of pinned host memory, and what each has free: need_free =
  // {device need, device free, host need, host free} (on the CPU backend, one memory: the host
  // tier counts in the device's).
  Status PlanLocal(SequenceOptions* options, int64_t ring_rows, SequenceMemoryPlan* plan,
                   int64_t need_free[4]);
  // Checks this rank's share of the plan, exchanges every rank's share and outcome, and resolves
  // the entries (rows, positions, ring blocks, logit rows). Fails on every rank together.
  StatusOr<std::vector<Entry>> PrepareStep(const StepPlan& plan);
  Status CheckEntry(const SequenceStep& step, Entry* entry) const;
  Status ExchangeEntries(std::vector<Entry>* entries, const Status& local);
  Status ResolveEntries(std::vector<Entry>* entries, int64_t* ring_rows);
  // The ring rows a step forced to pass-Q (EngineOptions::prefill_exchange) reserves for up to
  // `query_rows` queries per rank: rounds of at most one attention call's rows. 0 otherwise.
  int64_t ForcedPassQRingRows(int64_t query_rows) const;
  // Uploads ids and positions, embeds the step's tokens.
  Status Embed(const std::vector<Entry>& entries, int64_t rows);
  Status UploadIds(const std::vector<Entry>& entries, int64_t rows);
  // The embedding of the ids UploadIds put in the workspace.
  Status EmbedUploaded(int64_t rows);
  // The logits of every entry that has them (consecutive rows in one LM-head GEMM).
  Status ComputeLogits(const std::vector<Entry>& entries);
  // Commits the step's rows and collects the logits (and prefill densities).
  StatusOr<StepOutput> FinishStep(std::vector<Entry>& entries, bool prefill);
  // Recorded decode steps (engine_graph.cc): whether this step may be recorded, and the step run
  // by its recording (recorded first, or run as usual, as DecodeGraphCache says).
  bool Recordable(const std::vector<Entry>& entries) const;
  Status RunRecordable(std::vector<Entry>& entries);
  // The recordable part of a step: embedding, layers, logits (ids and metadata uploaded).
  Status RunDecodeBody(std::vector<Entry>& entries);
  Status RunLayer(int64_t layer, std::vector<Entry>& entries, int64_t rows, StepProfiler& profiler);
  // Output projection and MLP of the step's rows: in chunks, decode rows split over the ranks
  // (EngineOptions::split_decode_mlp) and the rest whole.
  Status RunMlp(int64_t layer, std::span<const Entry> entries, StepProfiler& profiler);
  // Decode rows [begin, end), which every rank holds: each rank's MLP slice, one all-gather of
  // the partials, their sum into the residual stream.
  Status SplitMlp(int64_t layer, int64_t begin, int64_t end, StepProfiler& profiler);
  Status ProjectLayer(int64_t layer, std::vector<Entry>& entries, int64_t rows);
  // RoPE of the decode tokens `run` (consecutive rows of the chunk starting at step row
  // `chunk_begin`, one RoPE table) and their K/V into each owner's store, as one op.
  Status RopeAndStoreDecode(int64_t layer, std::span<Entry> run, int64_t chunk_begin);
  // Decode tokens of consecutive entries (one, or several whose strategies are batchable): their
  // partials on this rank, merged across ranks by one gather.
  Status AttendDecode(int64_t layer, std::span<Entry> run, AttentionEnv& env);
  // After a step with prefill entries (every rank at once): each prefill entry's pairs so far
  // over every rank (StepOutput::prefill), zeros for the others.
  StatusOr<std::vector<PrefillDensity>> PrefillDensities(std::vector<Entry>& entries);
  Status DecodePartials(std::span<Entry> run, std::span<const DecodeInput> inputs,
                        AttentionEnv& env, TensorView o, TensorView lse);
  // Cancelled on every rank if any rank passes false (a host all-gather with several ranks).
  Status AgreeToContinue(bool go_on);

  EngineOptions options_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Workspace> workspace_;
  std::map<SequenceId, std::unique_ptr<Sequence>> sequences_;
  AttentionPolicy policy_;
  EngineStats stats_;
  DecodeGraphCache graphs_;
};

}  // namespace millipede
