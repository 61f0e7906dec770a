#include "worker/kv/host_kv_store.h"

#include <memory>

namespace millipede {

StatusOr<std::unique_ptr<HostKvStore>> HostKvStore::Create(Backend& backend,
                                                           const KvLayout& layout,
                                                           int64_t capacity, int64_t step_rows) {
  MP_REQUIRE(capacity > 0 && step_rows > 0, "host KV store: capacity ", capacity,
             " and step rows ", step_rows, " must be positive");
  const Shape shape{capacity, layout.num_kv_heads, layout.head_dim};
  MP_ASSIGN_OR_RETURN(BackendTensor k, backend.AllocateHost(layout.dtype, shape));
  MP_ASSIGN_OR_RETURN(BackendTensor v, backend.AllocateHost(layout.dtype, shape));
  MP_ASSIGN_OR_RETURN(KvBuffer staging, KvBuffer::Create(backend, layout, step_rows));
  return std::unique_ptr<HostKvStore>(
      new HostKvStore(backend, std::move(k), std::move(v), std::move(staging), capacity));
}

StatusOr<KvRows> HostKvStore::StepRows(int64_t offset, int64_t n) {
  MP_REQUIRE(held_rows_ + offset + n <= capacity_, "host KV store: ", held_rows_ + offset + n,
             " rows exceed the capacity of ", capacity_);
  // The previous step's rows may still be on their way out of the staging buffer.
  MP_RETURN_IF_ERROR(backend_.ComputeWaitFor(last_copy_));
  return staging_.Slice(offset, n);
}

StatusOr<ConstKvRows> HostKvStore::Rows(int64_t step_rows) const {
  if (step_rows == 0) {
    MP_RETURN_IF_ERROR(backend_.ComputeWaitFor(last_copy_));
    return ConstKvRows{SliceRows(host_k_.cview(), 0, held_rows_),
                       SliceRows(host_v_.cview(), 0, held_rows_)};
  }
  if (held_rows_ > 0)
    return FailedPreconditionError(
        "host KV store: its held rows are in host memory and the step's on the device; no "
        "view spans both");
  return staging_.Prefix(step_rows);
}

Status HostKvStore::Commit(std::span<const TokenRange> step_ranges, int64_t length) {
  MP_ASSIGN_OR_RETURN(const int64_t n, CheckStep(step_ranges, capacity_));
  if (n > 0) {
    const ConstKvRows src = staging_.Prefix(n);
    const TensorView k = SliceRows(host_k_.view(), held_rows_, n);
    const TensorView v = SliceRows(host_v_.view(), held_rows_, n);
    MP_RETURN_IF_ERROR(backend_.StartCopy(src.k, k, CopyOrder::kAfterCompute).status());
    MP_ASSIGN_OR_RETURN(last_copy_, backend_.StartCopy(src.v, v, CopyOrder::kAfterCompute));
  }
  HoldAll(step_ranges, n);
  return OkStatus();
}

StatusOr<CopyEvent> HostKvStore::StartGather(ConstTensorView index, KvRows dst) {
  const ConstTensorView k = SliceRows(host_k_.cview(), 0, held_rows_);
  const ConstTensorView v = SliceRows(host_v_.cview(), 0, held_rows_);
  // Copies on the queue run in order: the gathers start after the rows' copies out.
  MP_RETURN_IF_ERROR(backend_.StartGatherRows({k, index, dst.k}, CopyOrder::kAfterCompute)
                         .status());
  return backend_.StartGatherRows({v, index, dst.v}, CopyOrder::kAfterCompute);
}

Status HostKvStore::WaitForWrites() { return backend_.WaitCopy(last_copy_); }

}  // namespace millipede
