// OmniKV's token selection for one group of layers of one sequence on one rank: the context
// (prompt) rows its filter layer chose at the current decode step, per KV head, which every
// selected layer up to the next filter layer attends to, and, for the group's layers whose
// context rows live in the host tier, the packed loads of those rows.
//
// The rows are this rank's own (each rank keeps only its shard's share of the global top-k), as
// indices into the rank's context rows, which are the first rows of every store of the sequence
// (stores keep rows in position order and the context precedes every generated token). The
// choice stays on the device: the filter layer writes each head's rows into ChosenBuffer (TopK in
// column order on one rank, or the agreed cut uploaded once on several), and Choose builds the
// gather index from it with one op (SelectionIndex) — no host round trip on one rank.
//
// Chosen rows are laid out slot by slot, [slots, kv_heads, head_dim], so that one attention call
// covers every head; a head with fewer rows than the slots (only under context parallelism,
// where each rank holds its share of the cut) is padded, and its count masks the padding
// (AttentionArgs::kv_head_rows). The host-tier layers of a group share one host arena; each
// layer's rows are loaded by a gather of their own on the copy queue, started right after the
// index is built, so that a selected layer's compute waits only for its own load while the later
// ones run behind it.
#pragma once

#include <cstdint>
#include <vector>

#include "worker/attention/attention_env.h"
#include "worker/kv/kv_store.h"

namespace millipede {

class TokenSelection {
 public:
  explicit TokenSelection(int64_t filter_layer) : filter_layer_(filter_layer) {}
  int64_t filter_layer() const { return filter_layer_; }

  // ---- Set up by the sequence ----
  // The group's host-tier layers (increasing) and their arena: [2 * n * capacity, kv_heads,
  // head_dim] in AllocateHost memory, layer i's K the rows [2i * capacity, (2i + 1) * capacity)
  // and its V the next block; `packed` [2 * n * max_rows * kv_heads, head_dim] (backend memory)
  // receives the loads, max_rows the most rows a KV head is given (the budget, or fewer).
  void SetHostTier(std::vector<int64_t> layers, BackendTensor arena, int64_t capacity,
                   BackendTensor packed);
  // Layer i's K and V in the arena ([capacity, kv_heads, head_dim] each).
  KvRows HostRows(size_t i) const { return ArenaRows(arena_.view(), capacity_, i); }
  // The same in any such arena (one not set yet).
  static KvRows ArenaRows(const TensorView& arena, int64_t capacity, size_t i);
  const std::vector<int64_t>& host_layers() const { return host_layers_; }
  // Positions from `context_end` on are generated (the sequence's first decode step): never
  // chosen, always attended to. Idempotent.
  void BeginDecode(int64_t context_end);
  // Back to before the first decode step, with no choice: the sequence was taken over by a job
  // whose prompt continues it.
  void Reset();
  int64_t context_end() const { return context_end_; }

  // ---- The filter layer, at each decode step ----
  // Where the filter layer writes this step's choice: [kv_heads, slots] I32 in backend memory,
  // each head's chosen rows (below the rank's context rows, increasing) followed by -1 in the
  // slots it does not fill. Drops the previous choice.
  StatusOr<TensorView> ChosenBuffer(AttentionEnv& env, int64_t slots);
  // Once the choice is written (queued on the compute stream) for the token at `position`, over
  // the rank's first `context_rows` rows: builds the gather index and each head's count, and
  // starts the host-tier loads.
  Status Choose(AttentionEnv& env, int64_t context_rows, int64_t position);
  // Choose from a choice written elsewhere (one TopK for the filter layers of many sequences):
  // `chosen` [kv_heads, slots] I32 in backend memory, as ChosenBuffer's, read by the ops this
  // queues. Drops the previous choice.
  Status ChooseFrom(AttentionEnv& env, ConstTensorView chosen, int64_t context_rows,
                    int64_t position);

  // ---- Selected layers ----
  // OK when the filter layer chose for the token at `position` (FailedPrecondition otherwise,
  // naming `layer`).
  Status CheckFresh(int64_t position, int64_t layer) const;
  int64_t context_rows() const { return context_rows_; }
  // Slots per KV head of the current choice (0: no row chosen).
  int64_t slots() const { return slots_; }
  // The chosen rows of host-tier `layer` (compute waits for that layer's load): K and V
  // [slots, kv_heads, head_dim] each.
  StatusOr<ConstKvRows> Loaded(AttentionEnv& env, int64_t layer);
  // The chosen rows of `context` (a device store's context rows [context_rows, kv_heads,
  // head_dim]) gathered on the compute stream: K and V [slots, kv_heads, head_dim] each, valid
  // until the next Gather.
  StatusOr<ConstKvRows> Gather(AttentionEnv& env, ConstKvRows context);
  // How many of the chosen rows each KV head has: [kv_heads] I32 in backend memory (its slots
  // past that are padding), as the attention ops' kv_head_rows.
  ConstTensorView counts(const AttentionEnv& env) const {
    return SliceRows(counts_.cview(), 0, env.config.num_key_value_heads);
  }
  // The chosen rows as an index into the context rows (Gather's): [slots, kv_heads] I64 flat rows
  // of the context viewed as [context_rows * kv_heads, head_dim], in backend memory; a head's
  // slots past its count repeat a row.
  StatusOr<ConstTensorView> RowIndex(const AttentionEnv& env) const;
  // Attention of the token's query `q` [1, heads, head_dim] over chosen rows `rows` (from Loaded
  // or Gather), each head over its own count: o [1, heads, head_dim], lse [1, heads] (o = 0,
  // lse = -inf for heads with no chosen row). One call.
  Status Attend(AttentionEnv& env, ConstTensorView q, ConstKvRows rows, int64_t position,
                TensorView o, TensorView lse) const;

 private:
  // Builds the gather index and counts from `chosen` [kv_heads, slots_] and starts the loads.
  Status Index(AttentionEnv& env, ConstTensorView chosen, int64_t context_rows, int64_t position);
  // Starts one gather per host-tier layer (its K and V blocks of the index) on the copy queue.
  Status StartLoads(AttentionEnv& env);

  int64_t filter_layer_;
  int64_t context_end_ = -1;
  int64_t position_ = -1;  // the token the current choice is for
  int64_t context_rows_ = 0;
  int64_t slots_ = 0;
  BackendTensor chosen_;  // [kv_heads, slots] I32
  BackendTensor index_;   // [blocks, slots * kv_heads] I64 (block 0: rows of one context)
  BackendTensor counts_;  // [kv_heads] I32
  BackendTensor gather_k_, gather_v_;
  // Host tier.
  std::vector<int64_t> host_layers_;
  BackendTensor arena_, packed_;
  int64_t capacity_ = 0;
  std::vector<CopyEvent> loads_;  // per host-tier layer
};

}  // namespace millipede
