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

class DecodeStrategy {
 public:
  virtual ~DecodeStrategy() = default;
  virtual const char* name() const = 0;
  // This rank's partial over its rows: o [1, heads, head_dim] F32, lse [1, heads] F32 (o = 0,
  // lse = -inf when it sees none). The engine merges the ranks' partials.
  virtual Status Partial(AttentionEnv& env, const DecodeInput& in, TensorView o,
                         TensorView lse) = 0;
  // True when Partial is plain attention over BatchRows(in) (no mask, AfterMerge does nothing),
  // so that the engine may run the decode tokens of many sequences in one BatchDecodeAttention
  // call. Depends on the strategy alone: every rank decides the same.
  virtual bool batchable() const { return false; }
  // The rows Partial attends to, for batchable strategies.
  virtual StatusOr<ConstKvRows> BatchRows(const DecodeInput& in) const {
    return UnimplementedError(std::string("decode strategy ") + name() + " does not batch");
  }
  // The A-shape windows a batched call applies to BatchRows (BatchDecodeAttentionArgs's
  // kv_head_window and sink_tokens: the rows hold positions 0 .. n - 1, the token's last); tokens
  // batch together only under equal windows. None by default.
  struct Windows {
    const std::vector<int64_t>* window = nullptr;  // [kv_heads]; null: none
    int64_t sink = 0;
    bool operator==(const Windows& o) const {
      return (window == nullptr) == (o.window == nullptr) &&
             (window == nullptr || (*window == *o.window && sink == o.sink));
    }
  };
  virtual Windows batch_windows() const { return {}; }
  // True when Partial (and AfterMerge) on one rank can run as a recorded step (DecodeInput's
  // recorded fields): every call's shapes fixed by recorded_rows, nothing that waits for the
  // device. Batchable strategies are (the engine batches them itself).
  virtual bool recordable() const { return batchable(); }
  // Called by every rank after a prefill step's attention of the layer, while `in.q` holds the
  // step's queries (static eviction chooses its keys here). Nothing by default.
  virtual Status AfterPrefill(AttentionEnv& env, const PrefillInput& in) { return OkStatus(); }
  // Called by every rank once the ranks' partials are merged: `lse` [1, heads] F32 is the
  // token's log-sum-exp over every key of every rank (OmniKV's filter layers score their keys
  // with it). Nothing by default.
  virtual Status AfterMerge(AttentionEnv& env, const DecodeInput& in, ConstTensorView lse) {
    return OkStatus();
  }
};

}  // namespace millipede
