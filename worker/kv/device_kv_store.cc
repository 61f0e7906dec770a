#include "worker/kv/device_kv_store.h"

#include <algorithm>
#include <memory>

namespace millipede {

StatusOr<std::unique_ptr<DeviceKvStore>> DeviceKvStore::Create(Backend& backend,
                                                               const KvLayout& layout,
                                                               int64_t capacity,
                                                               const DeviceKvStore* share,
                                                               int64_t share_rows) {
  MP_REQUIRE(share_rows == 0 || (share != nullptr && share_rows <= share->held_rows() &&
                                  share->NumBytes() / share->capacity() == layout.RowBytes()),
             "KV store: ", share_rows, " rows to share from a store holding fewer or other rows");
  MP_ASSIGN_OR_RETURN(KvBuffer buffer,
                      KvBuffer::CreatePaged(backend, layout, capacity,
                                            share ? &share->buffer_ : nullptr, share_rows));
  return std::unique_ptr<DeviceKvStore>(new DeviceKvStore(std::move(buffer), share_rows));
}

int64_t DeviceKvStore::ShareableRows(const DeviceKvStore& store, int64_t prefix_rows) {
  const int64_t chunk = store.buffer_.chunk_rows();
  if (chunk == 0) return 0;
  return std::min(prefix_rows, store.held_rows()) / chunk * chunk;
}

Status DeviceKvStore::RestoreFrom(Backend& backend, const KvStore& src,
                                  std::span<const TokenRange> stored, int64_t length) {
  if (shared_rows_ == 0) return RestoreContiguous(backend, src, stored, length);
  MP_ASSIGN_OR_RETURN(const std::vector<TokenRange> needed, CheckRestore(src, stored, length));
  const int64_t n = TotalSize(needed);
  MP_REQUIRE(n >= shared_rows_, "KV store: a prefix of ", n, " rows, ", shared_rows_,
             " of them shared");
  // The shared rows are src's own memory already; the rest is copied.
  if (n > shared_rows_) {
    MP_ASSIGN_OR_RETURN(const ConstKvRows from, src.Rows(0));
    MP_ASSIGN_OR_RETURN(const KvRows to, buffer_.Slice(shared_rows_, n - shared_rows_));
    const ConstKvRows tail{SliceRows(from.k, shared_rows_, n - shared_rows_),
                           SliceRows(from.v, shared_rows_, n - shared_rows_)};
    MP_RETURN_IF_ERROR(CopyKvRows(backend, tail, to));
  }
  return Commit(needed, length);
}

Status DeviceKvStore::Truncate(std::span<const TokenRange> stored, int64_t length) {
  MP_ASSIGN_OR_RETURN(const std::vector<TokenRange> kept, CheckHeldRows(*this, stored, length));
  if (buffer_.SharedFrom(TotalSize(kept)))
    return FailedPreconditionError(
        "the cached KV's rows after the prefix are shared with another sequence");
  return KvStoreBase::Truncate(stored, length);
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
