// Attention strategies: how one layer's heads of one sequence attend, in prefill and in decode,
// built once from the sequence's attention policy (layer_attention.h). The engine's layer loop
// only calls them.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "worker/attention/attention_env.h"
#include "worker/kv/kv_store.h"

namespace millipede {

// A sequence's prefill attention pairs so far on this rank (attended_pairs.h): counted on the host
// for dense and A-shape heads, on the backend for sparse heads (SparseIndexPairs).
struct PrefillPairs {
  int64_t host = 0;
  TensorView device;  // [1] I64 in backend memory
};

// One sequence's query rows of a prefill step (or prefill chunk) in one layer.
struct PrefillInput {
  int64_t layer = 0;
  KvStore* store = nullptr;      // this rank's rows of the layer: held rows, then the step's
  int64_t step_rows = 0;         // rows this rank added in this step (its queries' keys)
  ConstTensorView q;             // [n, heads * head_dim] F32, after RoPE
  std::span<const TokenRange> q_ranges;  // the queries' global positions (n in all)
  // Every rank's rows of this layer this step (held then new), by rank: the ring blocks.
  std::span<const std::vector<TokenRange>> rank_blocks;
  // Every rank's queries this step (their global positions), by rank: in.q_ranges is this rank's.
  std::span<const std::vector<TokenRange>> rank_queries;
  int64_t length = 0;            // positions over all ranks after the step
  int64_t step_begin = 0;        // positions over all ranks before the step (its first query)
  TensorView o_acc;              // [n, heads * head_dim] F32 output
  TensorView lse_acc;            // [n, heads] F32 natural-log LSE
  // Where the strategy adds the query-key pairs its queries attend (null: not counted).
  PrefillPairs* pairs = nullptr;
};

class PrefillStrategy {
 public:
  virtual ~PrefillStrategy() = default;
  virtual const char* name() const = 0;
  // Writes (o_acc, lse_acc) of the queries over every rank's keys they may see. Called by every
  // rank sharing the sequence at once (it may exchange data with them).
  virtual Status Run(AttentionEnv& env, const PrefillInput& in) = 0;
};

// One decode token of one sequence in one layer.
struct DecodeInput {
  int64_t layer = 0;
  KvStore* store = nullptr;   // this rank's rows: held, then the token's own if this rank owns it
  int64_t step_rows = 0;      // 1 on the rank that stores the token, else 0
  ConstTensorView q;          // [1, heads, head_dim] F32, after RoPE
  int64_t position = 0;       // the token's global position
  // A recorded step (decode graphs: a strategy that is recordable() on one rank, its store's
  // FixedRows): its calls span the first `recorded_rows` rows of the store and read on the device
  // how many there are after the step (`recorded_length`, [1] I64) and how many of those follow
  // the sequence's context (`recorded_generated`, [1] I64). 0: the usual step.
  int64_t recorded_rows = 0;
  ConstTensorView recorded_length = {}, recorded_generated = {};
};

// One part of a decode token's attention, for the batched call (BatchParts): the token's query
// over `rows` ([n, kv_heads, head_dim] each; every row precedes the token), or, when `row_index`
// is set ([m, kv_heads] I64 in backend memory), over the m rows it names (key j of KV head g the
// flat row row_index[j][g] of `rows` viewed as [n * kv_heads, head_dim]); KV head g over only its
// first head_rows[g] of them when `head_rows` is set ([kv_heads] I32 in backend memory). A
// token's parts cover disjoint keys; their partials merge by log-sum-exp.
struct DecodePart {
  ConstKvRows rows;
  ConstTensorView head_rows = {};
  ConstTensorView row_index = {};
};
// The most parts a token's attention has (chosen or kept rows, then recent or generated rows).
inline constexpr size_t kMaxDecodeParts = 2;

// Appends the part over every row of the token's store (its held rows, then the token's own).
inline Status AppendEveryRow(const DecodeInput& in, std::vector<DecodePart>* parts) {
  MP_ASSIGN_OR_RETURN(const ConstKvRows rows, in.store->Rows(in.step_rows));
  parts->push_back({rows});
  return OkStatus();
}

class DecodeStrategy {
 public:
  virtual ~DecodeStrategy() = default;
  virtual const char* name() const = 0;
  // This rank's partial over its rows: o [1, heads, head_dim] F32, lse [1, heads] F32 (o = 0,
  // lse = -inf when it sees none). The engine merges the ranks' partials.
  virtual Status Partial(AttentionEnv& env, const DecodeInput& in, TensorView o,
                         TensorView lse) = 0;
  // True when Partial equals the log-sum-exp merge of attention over the parts BatchParts gives
  // (under batch_windows), so that the engine may run the decode tokens of many sequences, whatever
  // their strategies, in one BatchDecodeAttention call. Depends on the strategy alone: every rank
  // decides the same.
  virtual bool batchable() const { return false; }
  // Batchable strategies, in place of Partial for a token of a batched run: the parts of its
  // attention (at most kMaxDecodeParts; none: o = 0, lse = -inf), valid until the next call of
  // this strategy; whatever Partial prepares on the device (gathers, counts) is queued here.
  // AfterMerge follows as it follows Partial.
  virtual Status BatchParts(AttentionEnv& env, const DecodeInput& in,
                            std::vector<DecodePart>* parts) {
    return UnimplementedError(std::string("decode strategy ") + name() + " does not batch");
  }
  // Strategies that batch with their own kind rather than by parts (a layer whose KV heads keep
  // their rows in two stores): true when `other`, another sequence's strategy of the same layer,
  // decodes with this one in one BatchPartials call. Depends on the strategies alone.
  virtual bool BatchesWith(const DecodeStrategy& other) const { return false; }
  // The partials of unrecorded tokens whose strategies BatchesWith this one (strategies[0] is this
  // one; inputs alike): q [n, heads, head_dim] F32 their queries, o [n, heads, head_dim] and
  // lse [n, heads] F32 as Partial's, token by token.
  virtual Status BatchPartials(AttentionEnv& env, std::span<DecodeStrategy* const> strategies,
                               std::span<const DecodeInput> inputs, ConstTensorView q, TensorView o,
                               TensorView lse) {
    return UnimplementedError(std::string("decode strategy ") + name() + " does not batch");
  }
  // True when a recorded step's Partial is plain attention over the store's FixedRows up to the
  // recorded length (no mask beyond batch_windows, AfterMerge does nothing), so that the engine
  // batches recorded tokens by BatchDecodeAttention's lengths.
  virtual bool batches_recorded() const { return false; }
  struct Windows {
    const std::vector<int64_t>* window = nullptr;  // [kv_heads]; null: none
    int64_t sink = 0;
    bool operator==(const Windows& o) const {
      return (window == nullptr) == (o.window == nullptr) &&
             (window == nullptr || (*window == *o.window && sink == o.sink));
    }
  };
  // The A-shape windows a batched call applies to the parts (BatchDecodeAttentionArgs's
  // kv_head_window and sink_tokens: a part's rows hold positions 0 .. n - 1, the token's last);
  // tokens batch together only under equal windows. None by default.
  virtual Windows batch_windows() const { return {}; }
  // True when Partial (and AfterMerge) on one rank can run as a recorded step (DecodeInput's
  // recorded fields): every call's shapes fixed by recorded_rows, nothing that waits for the
  // device. Those that batch recorded steps are (the engine batches them itself).
  virtual bool recordable() const { return batches_recorded(); }
  // Called by every rank after a prefill step's attention of the layer, while `in.q` holds the
  // step's queries (static eviction chooses its keys here). Nothing by default.
  virtual Status AfterPrefill(AttentionEnv& env, const PrefillInput& in) { return OkStatus(); }
  // Called by every rank once the ranks' partials are merged: `lse` [1, heads] F32 is the
  // token's log-sum-exp over every key of every rank (OmniKV's filter layers score their keys
  // with it). Nothing by default.
  virtual Status AfterMerge(AttentionEnv& env, const DecodeInput& in, ConstTensorView lse) {
    return OkStatus();
  }
  // Strategies whose AfterMerge runs for many tokens at once (OmniKV's filter layers): true when
  // `other`, another sequence's strategy of the same layer, joins this one's AfterMergeBatch.
  // Depends on the strategies alone: every rank decides the same.
  virtual bool AfterMergeBatchesWith(const DecodeStrategy& other) const { return false; }
  // AfterMerge of the unrecorded tokens whose strategies AfterMergeBatchesWith this one
  // (strategies[0] is this one; inputs alike): q [n, heads, head_dim] and lse [n, heads] F32 the
  // queries and merged log-sum-exps of a run of tokens, token i's at row rows[i].
  virtual Status AfterMergeBatch(AttentionEnv& env, std::span<DecodeStrategy* const> strategies,
                                 std::span<const DecodeInput> inputs, ConstTensorView q,
                                 ConstTensorView lse, std::span<const int32_t> rows) {
    return UnimplementedError(std::string("decode strategy ") + name() +
                              " does not batch AfterMerge");
  }
};

}  // namespace millipede
