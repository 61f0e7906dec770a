// A KV store in pinned host memory (the host tier of a node): every row is kept there. A step's
// rows are written on the device into a staging buffer (what RopeKv writes) and copied out at
// Commit on the backend's copy queue, after the compute that wrote them, so the copy runs behind
// the next layer's compute; the staging buffer is written again only once that copy is complete
// (the next step's StepRows makes compute wait for it). Kernels read host rows in place (the
// memory is mapped) or gather selected rows to the device on the copy queue (StartGather: the
// packed loads of OmniKV's selected layers).
#pragma once

#include "worker/backend/backend.h"
#include "worker/kv/kv_buffer.h"

namespace millipede {

class HostKvStore final : public KvStoreBase {
 public:
  // Room for `capacity` rows in host memory and steps of up to `step_rows` rows on the device.
  static StatusOr<std::unique_ptr<HostKvStore>> Create(Backend& backend, const KvLayout& layout,
                                                       int64_t capacity, int64_t step_rows);
  // What Create allocates in host memory and in the backend's memory.
  static int64_t HostBytesFor(const KvLayout& layout, int64_t capacity) {
    return layout.RowBytes() * capacity;
  }
  static int64_t DeviceBytesFor(const KvLayout& layout, int64_t step_rows) {
    return layout.RowBytes() * step_rows;
  }

  KvTier tier() const override { return KvTier::kHost; }
  StatusOr<KvRows> StepRows(int64_t offset, int64_t n) override;
  // The held rows (host memory, ordered after their copies for compute) or the step's rows
  // (device); FailedPrecondition for a view across both.
  StatusOr<ConstKvRows> Rows(int64_t step_rows) const override;
  Status Commit(std::span<const TokenRange> step_ranges, int64_t length) override;
  // Unimplemented: sequences keep no store of this kind (the prefix cache never holds one).
  Status RestoreFrom(Backend& backend, const KvStore& src, std::span<const TokenRange> stored,
                     int64_t length) override {
    return UnimplementedError("a host KV store is not restored from the prefix cache");
  }
  Status LoadRows(Backend& backend, int64_t part, const SavedKvRows& saved,
                  std::span<const TokenRange> stored, int64_t length) override {
    return UnimplementedError("a host KV store is not restored from the prefix cache");
  }
  int64_t NumBytes() const override {
    return static_cast<int64_t>(host_k_.NumBytes() + host_v_.NumBytes()) + staging_.NumBytes();
  }

  // Queues dst[i] = held row index[i] of K and V on the copy queue (index [m] I32/I64 and dst
  // [m, kv_heads, head_dim] in backend memory); compute must ComputeWaitFor the event before
  // reading dst.
  StatusOr<CopyEvent> StartGather(ConstTensorView index, KvRows dst);
  // Blocks until every row committed so far is in host memory (for the host to read them).
  Status WaitForWrites();

 private:
  HostKvStore(Backend& backend, BackendTensor k, BackendTensor v, KvBuffer staging,
              int64_t capacity)
      : backend_(backend), host_k_(std::move(k)), host_v_(std::move(v)),
        staging_(std::move(staging)), capacity_(capacity) {}

  Backend& backend_;
  BackendTensor host_k_, host_v_;  // [capacity, kv_heads, head_dim] each, pinned host memory
  KvBuffer staging_;               // [step_rows, kv_heads, head_dim] each, backend memory
  int64_t capacity_ = 0;
  CopyEvent last_copy_;  // the latest copy out of the staging buffer
};

}  // namespace millipede
