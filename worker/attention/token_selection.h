// OmniKV's token selection for one group of layers of one sequence on one rank: the context
// (prompt) rows its filter layer chose at the current decode step, per KV head, which every
// selected layer up to the next filter layer attends to, and, for the group's layers whose
// context rows live in the host tier, the packed load of those rows.
//
// The rows are this rank's own (each rank keeps only its shard's share of the global top-k), as
// indices into the rank's context rows, which are the first rows of every store of the sequence
// (stores keep rows in position order and the context precedes every generated token). The
// host-tier layers of a group share one host arena, so one gather on the copy queue loads the
// chosen rows of all of them at once, behind the filter layer's index upload and overlapped with
// the layers that run in the meantime; a selected layer's compute waits for it only when it
// reads the rows.
//
// Gathered rows are laid out by KV head ([rows(0)], [rows(1)], ... of head_dim each), or, when
// every head has as many rows (always on one rank once the context exceeds the budget), row by
// row ([n, kv_heads, head_dim]) so that one attention call covers every head.
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
  KvRows HostRows(size_t i) const;
  const std::vector<int64_t>& host_layers() const { return host_layers_; }
  // Positions from `context_end` on are generated (the sequence's first decode step): never
  // chosen, always attended to. Idempotent.
  void BeginDecode(int64_t context_end);
  int64_t context_end() const { return context_end_; }

  // ---- The filter layer, at each decode step ----
  // This rank's chosen rows of each KV head (increasing, below `context_rows`, the rank's rows
  // before context_end) for the token at `position`: uploads the gather index and starts the
  // packed load.
  Status Choose(AttentionEnv& env, std::vector<std::vector<int64_t>> rows, int64_t context_rows,
                int64_t position);

  // ---- Selected layers ----
  // OK when the filter layer chose for the token at `position` (FailedPrecondition otherwise,
  // naming `layer`).
  Status CheckFresh(int64_t position, int64_t layer) const;
  int64_t context_rows() const { return context_rows_; }
  int64_t total_rows() const { return head_offset_.empty() ? 0 : head_offset_.back(); }
  // The chosen rows of host-tier `layer` (compute waits for the packed load): K and V
  // [total_rows, head_dim] each.
  StatusOr<ConstKvRows> Loaded(AttentionEnv& env, int64_t layer);
  // The chosen rows of `context` (a device store's context rows [context_rows, kv_heads,
  // head_dim]) gathered on the compute stream: K and V [total_rows, head_dim] each, valid until
  // the next Gather.
  StatusOr<ConstKvRows> Gather(AttentionEnv& env, ConstKvRows context);
  // Attention of the token's query `q` [1, heads, head_dim] over gathered rows `rows` (from
  // Loaded or Gather): o [1, heads, head_dim], lse [1, heads] (o = 0, lse = -inf for heads with
  // no chosen row).
  Status Attend(AttentionEnv& env, ConstTensorView q, ConstKvRows rows, int64_t position,
                TensorView o, TensorView lse) const;

 private:
  // Starts the packed load of the rows at `index` (rows of [context_rows * kv_heads, head_dim])
  // of every host-tier layer.
  Status StartLoad(AttentionEnv& env, const std::vector<int64_t>& index);

  int64_t filter_layer_;
  int64_t context_end_ = -1;
  int64_t position_ = -1;  // the token the current choice is for
  int64_t context_rows_ = 0;
  bool by_row_ = false;               // gathered row by row ([n, kv_heads, head_dim]), else by head
  std::vector<int64_t> head_offset_;  // [kv_heads + 1], by-head layout
  BackendTensor index_;               // [total] rows of [context_rows * kv_heads, head_dim]
  BackendTensor gather_k_, gather_v_;
  // Host tier.
  std::vector<int64_t> host_layers_;
  BackendTensor arena_, packed_, load_index_;
  int64_t capacity_ = 0;
  CopyEvent load_;
};

}  // namespace millipede
