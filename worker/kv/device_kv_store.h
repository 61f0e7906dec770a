// A KV store that keeps every row in backend memory (the GPU tier on a device backend): a full
// layer, a filter layer, static eviction (which hides rows at attention time, never drops them).
#pragma once

#include "worker/kv/kv_buffer.h"

namespace millipede {

class DeviceKvStore final : public KvStoreBase {
 public:
  // Room for `capacity` rows over the sequence's life (its share of the prompt and of decode).
  static StatusOr<std::unique_ptr<DeviceKvStore>> Create(Backend& backend, const KvLayout& layout,
                                                         int64_t capacity);
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
                     int64_t length) override {
    return RestoreContiguous(backend, src, stored, length);
  }
  int64_t capacity() const { return buffer_.capacity(); }
  int64_t fixed_capacity() const override { return buffer_.capacity(); }
  StatusOr<KvRows> FixedRows(int64_t n) const override { return buffer_.Slice(0, n); }

 private:
  explicit DeviceKvStore(KvBuffer buffer) : buffer_(std::move(buffer)) {}
  KvBuffer buffer_;
};

}  // namespace millipede
