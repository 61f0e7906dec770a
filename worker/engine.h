// The engine of one worker rank: a Llama-family decoder (llama, mistral, qwen2) run layer by layer
// on a backend, with a KV cache, chunked projections/MLP and logits for the last position only.
//
// A sequence may be spread over the ranks of a Communicator (context parallelism; see
// dist/shard_plan.h). Two kinds of step:
//  - a sharded step (prefill): each rank runs its own tokens; attention is ring attention, the
//    ranks' K/V blocks travelling around the ring while each rank attends its queries to the
//    block in hand (the next transfer overlapping the current compute), partial results merged by
//    log-sum-exp;
//  - a replicated step (decode): every rank runs the same token; one rank stores its K/V; each
//    rank attends to its own shard and only the (o, lse) partials cross ranks.
// With one rank both reduce to ordinary single-process inference.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/checkpoint/model_config.h"
#include "common/policy/attention_policy.h"
#include "common/status.h"
#include "worker/backend.h"
#include "worker/dist/communicator.h"
#include "worker/dist/shard_plan.h"
#include "worker/kv_cache.h"
#include "worker/memory_plan.h"
#include "worker/model_weights.h"

namespace millipede {

// Called after each layer of a sharded step: (layers done, layers total) -> keep going?
using LayerCallback = std::function<bool(int64_t layers_done, int64_t layers_total)>;

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
  // Attention policy file (JSON, common/policy/attention_policy.h); empty: dense/full.
  std::string policy_file;
  // For one token (a decode step), run the Q/K/V projections as one GEMM and gate/up as one GEMM
  // over the fused weights (LayerWeights::qkv_proj, gate_up_proj) when they lie back to back in
  // backend memory: as a device backend places them, and as random weights are made on the CPU;
  // a memory-mapped checkpoint on the CPU backend runs them separately. false: separate GEMMs
  // always (the same results on the CPU; tests compare the two).
  bool fuse_projections = true;
  // Measure where the time goes (EngineStats seconds): the backend is synchronised at phase
  // boundaries, which costs a little overlap. Off: only the byte counters are kept.
  bool profile = false;
};

// Where one rank's time and bytes went, cumulative since the engine was created (ResetStats).
// Seconds are measured only with EngineOptions::profile.
struct EngineStats {
  double embed_s = 0;       // embeddings and host uploads of a step
  double qkv_s = 0;         // RMSNorm, Q/K/V projections, RoPE, K/V into the cache
  double attention_s = 0;   // attention kernels and (o, lse) merges
  double comm_wait_s = 0;   // waiting for ring transfers / decode partials beyond the compute
  double mlp_s = 0;         // output projection and MLP
  double logits_s = 0;      // final norm and LM head
  int64_t comm_bytes = 0;   // bytes this rank sent over the data plane
  int64_t prefill_layers = 0;  // layer passes of sharded steps
  int64_t decode_layers = 0;   // layer passes of decode steps
};

class Engine {
 public:
  // `comm` connects the ranks sharing each sequence; null means a single rank. `backend`, when
  // set, runs the engine's ops instead of CreateBackend(options.backend, options.device) (tests
  // wrap a backend to watch its ops); its kind must be options.backend.
  static StatusOr<std::unique_ptr<Engine>> Create(const EngineOptions& options,
                                                  std::unique_ptr<Communicator> comm = nullptr,
                                                  std::unique_ptr<Backend> backend = nullptr);

  const ModelConfig& config() const { return config_; }
  const EngineOptions& options() const { return options_; }
  Backend& backend() { return *backend_; }
  Communicator& comm() { return *comm_; }
  // Tokens the model may see at once: prompt plus generated (config max_position_embeddings,
  // times the factor for dynamic NTK scaling, further limited by a sliding window, which this
  // engine does not implement).
  int64_t max_context() const;

  // Starts a new sequence with room for `capacity` positions on this rank and steps of up to
  // `step_tokens` tokens (0: capacity), freeing the previous one. Called by every rank at once:
  // the ranks' memory plans are checked against each GPU's (or host's) free memory before
  // anything is allocated, and if any rank cannot fit, every rank fails with its numbers.
  // Every buffer the plan names is allocated here, so later steps of at most `step_tokens`
  // tokens do not allocate. `policy`, when given, is the sequence's attention policy until
  // EndSequence (else the engine's); it is checked like SetPolicy's, and a rank that refuses it
  // makes every rank fail.
  Status StartSequence(int64_t capacity, int64_t step_tokens = 0,
                       std::optional<AttentionPolicy> policy = std::nullopt);
  // The plan StartSequence checks, for this rank (ring rows: the widest rank's step).
  SequenceMemoryPlan PlanSequence(int64_t capacity, int64_t step_tokens,
                                  int64_t ring_rows) const;
  // The most positions this rank could hold in one sequence now (free memory / plan).
  StatusOr<int64_t> MaxSequencePositionsNow();
  // For decode benchmarks: starts a sequence (every rank at once) whose first `length` positions
  // are already in the cache — placed over the ranks as ShardPlan places a prompt, K and V set to
  // zero (what a decode step costs does not depend on the values) — with room for
  // `decode_positions` more. Skips the prefill that would make a real cache of that length.
  Status StartSyntheticSequence(int64_t length, int64_t decode_positions);
  // Frees the current sequence's KV cache and buffers.
  void EndSequence();
  // Positions in the current sequence over all ranks.
  int64_t length() const { return global_length_; }
  const KvCache* kv_cache() const { return kv_.get(); }
  const EngineStats& stats() const { return stats_; }

  // The attention policy the following steps use: the current sequence's (StartSequence), else
  // the engine's (SetPolicy; dense/full unless set).
  const AttentionPolicy& policy() const { return sequence_policy_ ? *sequence_policy_ : policy_; }
  // The patterns and roles this engine runs, reported to the coordinator (a worker's hello).
  // Dense prefill and full and streaming-head decode on every backend (streaming heads only
  // slice the KV rows); a-shape prefill heads and static-eviction decode on the CPU backend
  // (the attention kernels' windows and evicted rows are CPU-only so far).
  PolicyCapabilities capabilities() const;
  // Checks that `policy` fits the model (ValidateAttentionPolicy) and that this engine runs it:
  // a pattern or role outside capabilities() is Unimplemented naming it, the layer and the head,
  // and so is a layer that mixes decode roles per KV head (this engine runs one per layer).
  Status CheckPolicy(const AttentionPolicy& policy) const;
  // Checks `policy` (CheckPolicy), then uses it for the sequences that bring none; on an error
  // the current policy is unchanged.
  Status SetPolicy(AttentionPolicy policy);
  void ResetStats() { stats_ = EngineStats(); }

  // A sharded step, called by every rank at once: this rank runs `ids` at the global positions
  // `ranges` (in increasing order; ids concatenated in that order). Over all ranks the ranges
  // must tile [length(), length() + n) exactly. With several ranks it must be the sequence's
  // first step (prefill). Returns the logits of position length() + n - 1 ([vocab] F32, backend
  // memory, valid until the next step) on the rank that holds it, nullopt on the others.
  //
  // `after_layer`, when set, is called on every rank after each layer with (layers done, layers
  // total); if it returns false on any rank the step stops on every rank with Cancelled (with
  // several ranks the answers are combined by a host all-gather per layer).
  StatusOr<std::optional<ConstTensorView>> ForwardShard(std::span<const TokenRange> ranges,
                                                        std::span<const int32_t> ids,
                                                        const LayerCallback& after_layer = {});
  // A replicated step, called by every rank with the same token: runs it at position length(),
  // stores its K/V on rank length() mod N, and returns its logits on every rank.
  StatusOr<ConstTensorView> ForwardDecode(int32_t id);
  // Single-rank convenience: a sharded step over [length(), length() + n).
  StatusOr<ConstTensorView> Forward(std::span<const int32_t> ids);
  // Forward, then the logits copied to the host.
  Status ForwardToHost(std::span<const int32_t> ids, std::vector<float>* logits);

 private:
  struct Block;  // one rank's K/V rows as they travel the ring
  Engine() = default;
  // Checks this rank's share of a sharded step (ids, ranges, capacity).
  Status CheckShard(std::span<const TokenRange> ranges, std::span<const int32_t> ids) const;
  // Cancelled on every rank if any rank passes false (a host all-gather with several ranks).
  Status AgreeToContinue(bool go_on);
  MemoryPlanShape memory_shape() const;
  int64_t attention_chunk() const;
  Status EnsureScratch(int64_t chunk);
  Status EnsureStepBuffers(int64_t n);
  Status EnsureRingBuffers(int64_t rows);
  // RoPE frequencies for a pass whose longest position is seq_len - 1, uploaded only when they
  // change (dynamic NTK scaling depends on seq_len; the other scalings do not).
  StatusOr<ConstTensorView> InvFreq(int64_t seq_len);
  // With profiling: waits for the backend and adds the time since the last mark to `*bucket`.
  Status Mark(double* bucket);
  // RMSNorm, Q/K/V projections and RoPE of tokens [begin, end) of the step, K/V into cache rows
  // [cache_row, cache_row + end - begin) when `store_kv`. Queries go to q_ rows [begin, end).
  // Positions come from positions_ (uploaded once per step).
  Status ProjectQkv(int64_t layer, int64_t begin, int64_t end, int64_t cache_row, bool store_kv,
                    ConstTensorView inv_freq);
  // ProjectQkv of a decode step's one token, with one GEMM over the fused Q/K/V weights when
  // UseFused allows (its queries then stay in qkv_). Returns the queries [1, heads, head_dim].
  StatusOr<ConstTensorView> ProjectQkvDecode(int64_t layer, int64_t cache_row, bool store_kv,
                                             ConstTensorView inv_freq);
  // RoPE of queries `q` [m, heads, head_dim] (in place) and, when `store_kv`, of keys `k` stored
  // with values `v` ([m, kv_heads, head_dim]) into cache rows [cache_row, cache_row + m): one op.
  Status RopeAndStore(int64_t layer, TensorView q, ConstTensorView k, ConstTensorView v,
                      ConstTensorView positions, int64_t cache_row, bool store_kv,
                      ConstTensorView inv_freq);
  // Whether one GEMM over `fused` (LayerWeights::qkv_proj or gate_up_proj) may replace its parts':
  // fusion is on, the parts are adjacent, and so are their biases (`part_bias`: the first part's)
  // if the model has them.
  bool UseFused(ConstTensorView fused, ConstTensorView part_bias, ConstTensorView fused_bias) const;
  // Attention of the step's query rows `q_rows` (global positions `q_ranges`) to a K/V block,
  // merged into the accumulators.
  // A-shape heads of one layer: window per KV head (0 = dense) and the sink tokens.
  struct HeadWindows {
    std::vector<int64_t> window;
    int64_t sink = 0;
    const int64_t* data() const { return window.empty() ? nullptr : window.data(); }
  };
  // The layer's prefill windows from the policy (empty = every head dense) for a step of `total`
  // tokens over all ranks.
  HeadWindows PrefillWindows(int64_t layer, int64_t total) const;
  Status AttendBlock(int64_t layer, const std::vector<TokenRange>& q_ranges,
                     ConstTensorView block_k, ConstTensorView block_v,
                     const std::vector<TokenRange>& block_ranges, const HeadWindows& windows);
  // Decode attention of the step's query over this rank's rows [0, visible) into o_part_ /
  // lse_part_: all rows, or for a streaming-head layer only those at positions < sink or within
  // the window of `position`.
  // `q`: the token's queries [1, heads, head_dim].
  Status AttendDecode(int64_t layer, ConstTensorView q, int64_t position, int64_t visible);
  // Static eviction (engine_eviction.cc, CPU backend): ranks this rank's key rows (global
  // positions `row_ranges`, rows [0, rows)) by the attention the step's last observed prompt
  // queries pay them, normalised over every rank's keys, and marks each KV head's global top
  // keep_tokens in heavy_[layer]. Called by every rank after the layer's attention, while q_
  // holds the step's queries (positions `q_ranges`).
  Status SelectHeavyHitters(int64_t layer, const std::vector<TokenRange>& q_ranges,
                            const std::vector<TokenRange>& row_ranges, int64_t rows,
                            int64_t global_end);
  // Output projection into the residual stream, then the MLP, for tokens [begin, end).
  Status OutputAndMlp(int64_t layer, int64_t begin, int64_t end, ConstTensorView attention_out);
  Status Logits(int64_t row);

  EngineOptions options_;
  ModelConfig config_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<ModelWeights> weights_;
  std::unique_ptr<KvCache> kv_;
  int64_t global_length_ = 0;
  // The dtype RMSNorm and SiLU-mul write GEMM inputs in (Backend::GemmInputDType of the weights';
  // F32 where the GEMM weights do not share one dtype).
  DType gemm_input_dtype_ = DType::kF32;

  // Per-step buffers, sized for `step_rows_` tokens.
  int64_t step_rows_ = 0;
  BackendTensor hidden_;    // [n, hidden] F32 residual stream
  BackendTensor q_;         // [n, heads * head_dim] F32 queries (after RoPE)
  BackendTensor o_acc_;     // [n, heads * head_dim] F32 attention output accumulator
  BackendTensor lse_acc_;   // [n, heads] F32 its log-sum-exp
  BackendTensor positions_;  // [n] I64 global positions of the step's tokens
  BackendTensor ids_;        // [n] I32
  // Per-chunk scratch, sized for `scratch_rows_` tokens (attention partials for
  // max(scratch_rows_, attention_chunk) rows).
  int64_t scratch_rows_ = 0;
  BackendTensor normed_;     // [chunk, hidden] in gemm_input_dtype_
  BackendTensor k_, v_;      // [chunk, kv_heads * head_dim]
  BackendTensor qkv_;        // [1, (heads + 2 * kv_heads) * head_dim]: q | k | v of a decode step
  BackendTensor o_part_;     // [chunk, heads * head_dim]
  BackendTensor lse_part_;   // [chunk, heads]
  // [chunk, 2 * intermediate] F32: for m tokens gate in the first m * intermediate elements and
  // up from element chunk * intermediate; for one token through the fused GEMM, gate | up.
  BackendTensor gate_up_;
  // [chunk, intermediate] silu(gate) * up in gemm_input_dtype_ when that is not F32 (with F32 it
  // overwrites gate).
  BackendTensor silu_out_;
  BackendTensor logits_;     // [1, vocab]
  BackendTensor inv_freq_;   // [head_dim / 2] F32
  int64_t inv_freq_len_ = -1;  // the seq_len inv_freq_ was computed for
  EngineStats stats_;
  AttentionPolicy policy_;
  std::optional<AttentionPolicy> sequence_policy_;  // the current sequence's, if it brought one
  // Per layer with static eviction: [capacity, num_kv_heads] 1 = kept heavy hitter.
  std::vector<std::vector<uint8_t>> heavy_;
  std::chrono::steady_clock::time_point mark_;
  // Ring buffers: two blocks of K and V received from neighbours.
  BackendTensor ring_k_[2], ring_v_[2];
  int64_t ring_rows_ = 0;
  // Decode partials of every rank: [N, 1, heads, head_dim] and [N, 1, heads].
  BackendTensor gathered_o_, gathered_lse_;
};

}  // namespace millipede
