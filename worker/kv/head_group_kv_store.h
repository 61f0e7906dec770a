// A layer whose KV heads keep different rows, in one store per group of heads: DuoAttention's
// retrieval heads (decode role "full") keep every row, its streaming heads only the sinks and a
// recent window, so the layer's KV memory falls with the share of streaming heads.
//
// Attention ops read K and V as [rows, heads, head_dim] of one store, so the groups are read
// apart (Group): the full heads' DeviceKvStore [capacity, full heads, head_dim] and the streaming
// heads' StreamingKvStore [constant, streaming heads, head_dim]. A step's rows are written for
// every head at once (RopeKv into StepRows) into staging rows that the sequence's head-group stores
// share; EndWrites copies each group's heads into its store (CopyHeads), so the staging serves
// the next layer. Commit commits both groups; the held rows and ranges reported are the full
// heads'.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "policy/head_groups.h"
#include "worker/kv/device_kv_store.h"
#include "worker/kv/streaming_kv_store.h"

namespace millipede {

class HeadGroupKvStore final : public KvStoreBase {
 public:
  enum Group { kFull = 0, kStreaming = 1 };

  // `layout`: the layer's rows (every KV head); `capacity` rows for the full heads; the streaming
  // heads keep `streaming` (a window); `staging`: at least `step_rows` rows of every head, shared
  // by the sequence's head-group stores. `share_full`, `share_rows`: the full heads' store maps
  // those rows of another one (DeviceKvStore::Create).
  static StatusOr<std::unique_ptr<HeadGroupKvStore>> Create(
      Backend& backend, const KvLayout& layout, KvHeadGroups groups, const KvRetention& streaming,
      int64_t capacity, int64_t step_rows, std::shared_ptr<KvBuffer> staging,
      const DeviceKvStore* share_full = nullptr, int64_t share_rows = 0);
  // What Create allocates (the shared staging apart).
  static int64_t BytesFor(const KvLayout& layout, const KvHeadGroups& groups,
                          const KvRetention& streaming, int64_t capacity, int64_t step_rows);

  KvTier tier() const override { return KvTier::kDevice; }
  // Staging rows of every head.
  StatusOr<KvRows> StepRows(int64_t offset, int64_t n) override;
  // Refused: the groups' rows are read apart (Group).
  StatusOr<ConstKvRows> Rows(int64_t step_rows) const override;
  Status EndWrites(int64_t step_rows) override;
  // Commits both groups; the step's rows must have been moved by EndWrites.
  Status Commit(std::span<const TokenRange> step_ranges, int64_t length) override;
  int64_t NumBytes() const override { return full_->NumBytes() + streaming_->NumBytes(); }
  // Each group from src's group (the same heads in each).
  Status RestoreFrom(Backend& backend, const KvStore& src, std::span<const TokenRange> stored,
                     int64_t length) override;
  Status Truncate(std::span<const TokenRange> stored, int64_t length) override;
  // Two parts: the groups (Group order), each saved and loaded as its own store.
  int64_t num_parts() const override { return 2; }
  StatusOr<SavedKvRows> SaveRows(Backend& backend, int64_t part) const override;
  Status LoadRows(Backend& backend, int64_t part, const SavedKvRows& saved,
                  std::span<const TokenRange> stored, int64_t length) override;

  const KvHeadGroups& groups() const { return groups_; }
  // One group's store: its held rows (positions in held_ranges()) and the step's rows once
  // EndWrites has run, [rows, the group's heads, head_dim].
  const KvStore& group(Group g) const {
    return g == kFull ? static_cast<const KvStore&>(*full_) : *streaming_;
  }
  KvStore& group(Group g) { return g == kFull ? static_cast<KvStore&>(*full_) : *streaming_; }

 private:
  HeadGroupKvStore(Backend& backend, KvHeadGroups groups, std::unique_ptr<DeviceKvStore> full,
                   std::unique_ptr<StreamingKvStore> streaming, std::shared_ptr<KvBuffer> staging)
      : backend_(backend),
        groups_(std::move(groups)),
        full_(std::move(full)),
        streaming_(std::move(streaming)),
        staging_(std::move(staging)) {}

  Backend& backend_;
  KvHeadGroups groups_;
  std::unique_ptr<DeviceKvStore> full_;
  std::unique_ptr<StreamingKvStore> streaming_;
  std::shared_ptr<KvBuffer> staging_;
  int64_t moved_rows_ = 0;  // this step's rows EndWrites moved
};

}  // namespace millipede
