#include "worker/kv/device_kv_store.h"

#include <memory>

namespace millipede {

StatusOr<std::unique_ptr<DeviceKvStore>> DeviceKvStore::Create(Backend& backend,
                                                               const KvLayout& layout,
                                                               int64_t capacity) {
  MP_ASSIGN_OR_RETURN(KvBuffer buffer, KvBuffer::Create(backend, layout, capacity));
  return std::unique_ptr<DeviceKvStore>(new DeviceKvStore(std::move(buffer)));
}

StatusOr<KvRows> DeviceKvStore::StepRows(int64_t offset, int64_t n) {
  MP_REQUIRE(held_rows_ + offset + n <= buffer_.capacity(), "KV store: ",
             held_rows_ + offset + n, " rows exceed the sequence capacity of ",
             buffer_.capacity(), " on this rank");
  return buffer_.Slice(held_rows_ + offset, n);
}

StatusOr<ConstKvRows> DeviceKvStore::Rows(int64_t step_rows) const {
  return buffer_.Prefix(held_rows_ + step_rows);
}

Status DeviceKvStore::Commit(std::span<const TokenRange> step_ranges, int64_t length) {
  MP_ASSIGN_OR_RETURN(const int64_t n, CheckStep(step_ranges, buffer_.capacity()));
  HoldAll(step_ranges, n);
  return OkStatus();
}

}  // namespace millipede
