// A KV store that keeps every row in backend memory (the GPU tier on a device backend): a full
// layer, a filter layer, static eviction (which hides rows at attention time, never drops them).
#pragma once

#include "worker/kv/kv_buffer.h"

namespace millipede {

class DeviceKvStore final : public KvStoreBase {
 public:
  // Room for `capacity` rows over the sequence's life (its share of the prompt and of decode),
  // in chunks the prefix cache can share (KvBuffer::CreatePaged). With `share`, the new store's
  // first `share_rows` rows (ShareableRows of `share`) are share's, mapped: a RestoreFrom that
  // store then copies only the rows after them.
  static StatusOr<std::unique_ptr<DeviceKvStore>> Create(Backend& backend, const KvLayout& layout,
                                                         int64_t capacity,
                                                         const DeviceKvStore* share = nullptr,
                                                         int64_t share_rows = 0);
  // Of the first `prefix_rows` held rows of `store`, those a new store can map: whole chunks.
  static int64_t ShareableRows(const DeviceKvStore& store, int64_t prefix_rows);
  // What Create allocates.
  static int64_t BytesFor(const KvLayout& layout, int64_t capacity) {
    return layout.RowBytes() * capacity;
  }

  KvTier tier() const override { return KvTier::kDevice; }
  StatusOr<KvRows> StepRows(int64_t offset, int64_t n) override;
  StatusOr<ConstKvRows> Rows(int64_t step_rows) const override;
  Status Commit(std::span<const TokenRange> step_ranges, int64_t length) override;
  int64_t NumBytes() const override { return buffer_.NumBytes(); }
  Status RestoreFrom(Backend& backend, const KvStore& src, std::span<const TokenRange> stored,
                     int64_t length) override;
  // Refuses (FailedPrecondition) to forget rows whose memory another store shares: its next
  // steps would write over that store's rows.
  Status Truncate(std::span<const TokenRange> stored, int64_t length) override;
  // Rows mapped from another store at creation (the prefix cache's shared blocks).
  int64_t shared_rows() const { return shared_rows_; }
  // Whether a row from `row` on lies in memory another store shares.
  bool SharedFrom(int64_t row) const { return buffer_.SharedFrom(row); }
  int64_t capacity() const { return buffer_.capacity(); }
  int64_t fixed_capacity() const override { return buffer_.capacity(); }
  StatusOr<KvRows> FixedRows(int64_t n) const override { return buffer_.Slice(0, n); }

 private:
  explicit DeviceKvStore(KvBuffer buffer, int64_t shared_rows)
      : buffer_(std::move(buffer)), shared_rows_(shared_rows) {}
  KvBuffer buffer_;
  int64_t shared_rows_ = 0;
};

}  // namespace millipede
