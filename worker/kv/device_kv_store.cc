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
  int64_t n = 0;
  for (const TokenRange& r : step_ranges) {
    MP_REQUIRE(!r.empty(), "KV store: empty commit");
    MP_REQUIRE(held_ranges_.empty() || r.begin >= held_ranges_.back().end,
               "KV store: positions must be appended in increasing order");
    n += r.size();
  }
  MP_REQUIRE(held_rows_ + n <= buffer_.capacity(), "KV store: ", held_rows_ + n,
             " rows exceed the capacity of ", buffer_.capacity());
  for (const TokenRange& r : step_ranges) AppendRange(&held_ranges_, r);
  held_rows_ += n;
  return OkStatus();
}

}  // namespace millipede
