// One sequence on one rank: its KV stores (one per layer), its length over all ranks, the
// positions this rank stores, its attention policy and the strategies built from it (with their
// selection state). The model's weights and the step buffers belong to the engine; any number of
// sequences share them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "checkpoint/model_config.h"
#include "policy/attention_policy.h"
#include "worker/attention/layer_attention.h"
#include "worker/backend/backend.h"
#include "worker/kv/kv_buffer.h"
#include "worker/kv/offloaded_kv_store.h"
#include "worker/memory_plan.h"

namespace millipede {

class SavedSequence;  // worker/engine/saved_sequence.h

using SequenceId = int64_t;

// Where the context (prompt) rows of a sequence's selected layers live (OmniKV). kHost: in the
// host tier of the node (pinned memory), each layer's chosen rows loaded back behind the compute
// of the layers before it, except for the layer right after each filter layer, which stays on
// the device so that its rows are gathered while the group's loads run (SequenceOptions::
// host_tier_layers may send fewer); generated rows stay on the device either way. kAuto: the
// device when the memory plan fits there, else the host tier for as few selected layers as
// let the device hold the rest (decided when the sequence starts).
enum class SelectedKvTier { kAuto, kDevice, kHost };
const char* SelectedKvTierName(SelectedKvTier tier);  // "auto", "device", "host"
StatusOr<SelectedKvTier> ParseSelectedKvTier(std::string_view name);

struct SequenceOptions {
  // Positions this rank may store over the sequence's life (its prompt share and decode share).
  int64_t capacity = 0;
  // The most tokens one step adds on this rank (0: capacity); sizes streaming stores.
  int64_t step_tokens = 0;
  AttentionPolicy policy;
  // The most positions this rank stores in decode steps (its share of the generated tokens);
  // -1: not known, up to capacity. Splits a host-tier layer's rows between host and device.
  int64_t decode_rows = -1;
  SelectedKvTier selected_kv = SelectedKvTier::kAuto;  // kAuto is the device to Create
  // With kHost, how many selected layers go to the host tier: the first of HostTierCandidates
  // (policy/head_groups.h); -1 (or more than there are): every one that may.
  int64_t host_tier_layers = -1;
  // Ranks sharing the sequence. With one, a layer's store holds its positions in order from 0,
  // so that layers mixing streaming and full heads decode in batched calls.
  int64_t ranks = 1;
  // Layers mixing full and streaming-head KV heads (DuoAttention) keep a store per group of
  // heads (the streaming heads only their sinks and window) where LayerHeadGroups allows it and
  // the capacity is more than twice a streaming store's; else (or false) one store of every row,
  // whose tokens of many sequences decode in one batched call.
  bool split_kv_heads = true;
  // The sequence starts from a cached prefix (its first prefill step follows held rows).
  bool cached_prefix = false;
  // The host tier was the memory plan's choice (kAuto), not the caller's: once the sequence is
  // kept in the prefix cache, its host-tier layers may move back to the device where it has room
  // (Relayout; SequenceTable::Keep).
  bool host_tier_movable = false;
};

class Sequence {
 public:
  // Builds the strategies from options.policy and allocates every layer's store. With `share`
  // (a cached sequence of the same layout; a shared chunk lives while either maps it), every store
  // that keeps all its rows in backend memory maps share's chunks before position `share_length`
  // (DeviceKvStore::ShareableRows) rather than allocating them; a RestorePrefix from `share` at
  // that length then copies only the rest.
  static StatusOr<std::unique_ptr<Sequence>> Create(SequenceId id, Backend& backend,
                                                    const ModelConfig& config, DType kv_dtype,
                                                    SequenceOptions options,
                                                    const Sequence* share = nullptr,
                                                    int64_t share_length = 0);
  // Bytes of backend memory a sequence created with `share` at `share_length` maps rather than
  // allocates (both K and V): what its memory plan needs less.
  static int64_t SharedBytes(const Sequence& share, int64_t share_length);
  // What the stores of such a sequence take on this rank, in plan's kv_bytes (device),
  // host_kv_bytes (pinned host), selection_bytes (OmniKV's scores, gathers, packed loads) and
  // head_group_bytes (the staging and packs of layers with a store per group of heads), and
  // index_bytes: what the engine's sparse prefill scratch grows to for its steps, in index
  // chunks of `attention_rows` query rows.
  static Status PlanStores(const ModelConfig& config, DType kv_dtype,
                           const SequenceOptions& options, int64_t attention_rows,
                           SequenceMemoryPlan* plan);
  // Whether such a sequence's layers that may keep a store per group of heads do.
  static bool SplitsKvHeads(const SequenceOptions& options);

  SequenceId id() const { return id_; }
  const SequenceOptions& options() const { return options_; }
  const AttentionPolicy& policy() const { return options_.policy; }
  // Positions over all ranks.
  int64_t length() const { return length_; }
  // The positions before its first decode step (its context, which OmniKV's selection covers);
  // -1 before that step.
  int64_t decode_start() const { return decode_start_; }
  // Positions this rank has stored in every layer (before retention drops any), increasing.
  const std::vector<TokenRange>& stored() const { return stored_; }
  int64_t stored_rows() const { return stored_rows_; }
  int64_t num_layers() const { return static_cast<int64_t>(stores_.size()); }
  KvStore& kv(int64_t layer) { return *stores_[static_cast<size_t>(layer)]; }
  const KvStore& kv(int64_t layer) const { return *stores_[static_cast<size_t>(layer)]; }
  LayerAttention& attention(int64_t layer) { return layers_[static_cast<size_t>(layer)]; }
  // The most rows one step may add on this rank: bounded only by streaming stores, which are
  // sized for options().step_tokens.
  int64_t MaxStepRows() const;
  // Bytes every store holds now (both tiers), and the part in the host tier.
  int64_t KvBytes() const;
  int64_t HostKvBytes() const;
  // Of KvBytes, what its stores map from a cached sequence (the prefix cache's shared blocks,
  // counted in that sequence's bytes too).
  int64_t SharedKvBytes() const;

  // This rank's rows of a layer with `retention` this step, by position: the kept part of
  // `stored` at `length` (as each store keeps it) followed by `step` (what another rank's stored
  // and step ranges give, so each rank knows every rank's ring blocks).
  static std::vector<TokenRange> BlockRanges(const KvRetention& retention,
                                             std::span<const TokenRange> stored, int64_t length,
                                             std::span<const TokenRange> step);

  // Ends a step: this rank's new positions `step` in every store and the new length.
  Status Commit(std::span<const TokenRange> step, int64_t length);
  // The prefix cache: makes this new sequence (nothing stored yet; the stores laid out as
  // `src`'s: the same policy and choices of tier and head groups) hold src's KV of the
  // positions before `length` on this rank, as if it had prefilled them; length in
  // [1, src.length()]. FailedPrecondition when src's stores cannot give them (a store that
  // keeps a window only, cached at another length; stores of another kind).
  Status RestorePrefix(Backend& backend, const Sequence& src, int64_t length);
  // The same from a sequence saved to the host tier (SavedSequence), its stores laid out as
  // this one's.
  Status RestorePrefix(Backend& backend, const SavedSequence& src, int64_t length);
  // The prefix cache's take-over: this (cached) sequence becomes sequence `id` of `length`
  // positions (at most its length), its stores and their memory as they are (the rows of later
  // positions forgotten), before its first step again. `options` must be what it was started
  // with but for decode_rows (the new job's) and a capacity and step no larger. Checked first
  // (CanTakeOver), then done; nothing changes when the check fails. FailedPrecondition for a
  // sequence whose store cannot forget rows (a window store at another length) or whose
  // host-tier layers lack room for the new split of context and generated rows. OmniKV's
  // selections start again; host-tier layers keep their rows in place (generated rows among
  // them join the context in host memory).
  Status CanTakeOver(const SequenceOptions& options, int64_t length) const;
  // Its prefill pair counters start again at zero (on `backend`).
  Status TakeOver(Backend& backend, SequenceId id, const SequenceOptions& options,
                  int64_t length);
  // A cached sequence laid out again: its first `host_layers` (-1: all) of HostTierCandidates keep
  // their context rows in the host tier and the other selected layers on the device (fewer: rows
  // move up; more: down), host-tier staging slots of `slot_rows` rows and no window. Its rows are
  // cut to its context (the positions before its first decode step) and it is before its first step
  // again, as a take-over at that length leaves it. Everything is allocated before anything
  // moves: on failure (no memory) the layout is unchanged. Needs what TakeOver checks.
  Status Relayout(Backend& backend, const ModelConfig& config, DType kv_dtype, int64_t host_layers,
                  int64_t slot_rows);
  // Selected layers whose context rows are in the host tier now.
  int64_t host_layers() const { return static_cast<int64_t>(offloaded_.size()); }
  // Called before the first decode step runs (then nothing): positions before length() are the
  // context, later ones generated (OmniKV's selections and host-tier stores split at it).
  void BeginDecode();

  // The query-key pairs this rank's prefill attention computed so far, where the strategies add
  // them (a backend counter only when a layer has sparse heads), and their total (waits for the
  // backend).
  PrefillPairs& prefill_pairs() { return pairs_; }
  StatusOr<int64_t> AttendedPairs(Backend& backend) const;
  // The causal pairs of the prefilled positions over every layer and KV head (the dense count the
  // attended pairs compare with), kept by the engine.
  int64_t causal_pairs = 0;

 private:
  Sequence() = default;
  // RestorePrefix's checks and bookkeeping around `restore_layer` (layer, this rank's positions
  // before `length`), for a source of `src`'s length, layers and stored positions.
  struct SourceShape {
    int64_t length = 0;
    int64_t layers = 0;
    std::span<const TokenRange> stored;
  };
  // Every store cut to the positions before `length`, OmniKV's choices forgotten, before the first
  // step again (TakeOver and Relayout, after CanTakeOver).
  Status Rewind(Backend& backend, int64_t length);
  Status RestoreLayers(int64_t length, const SourceShape& src,
                       const std::function<Status(int64_t, std::span<const TokenRange>)>&
                           restore_layer);
  SequenceId id_ = 0;
  SequenceOptions options_;
  std::vector<LayerAttention> layers_;
  std::vector<std::unique_ptr<KvStore>> stores_;
  std::shared_ptr<KvStagingPool> staging_;      // host-tier layers' staging (none without)
  std::shared_ptr<KvBuffer> head_staging_;      // head-group layers' step rows (none without)
  std::vector<OffloadedKvStore*> offloaded_;    // the host-tier stores among stores_
  bool decoding_ = false;
  int64_t decode_start_ = -1;
  std::vector<TokenRange> stored_;
  int64_t stored_rows_ = 0;
  int64_t length_ = 0;
  PrefillPairs pairs_;
  BackendTensor pairs_device_;
};

}  // namespace millipede
