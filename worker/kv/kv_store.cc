#include "worker/kv/kv_store.h"

#include <algorithm>
#include <typeinfo>
#include <string>

#include "worker/backend/backend.h"
#include "worker/kv/saved_kv_rows.h"

namespace millipede {

std::vector<TokenRange> KvRetention::Kept(std::span<const TokenRange> ranges,
                                          int64_t length) const {
  if (KeepsAll() || length < keep_all_below) return {ranges.begin(), ranges.end()};
  std::vector<TokenRange> kept;
  const int64_t window_begin = length - window_tokens + 1;
  for (const TokenRange& r : ranges) {
    const TokenRange sinks{r.begin, std::min(r.end, sink_tokens)};
    const TokenRange recent{std::max(r.begin, std::max(window_begin, sink_tokens)), r.end};
    if (!sinks.empty()) AppendRange(&kept, sinks);
    if (!recent.empty()) AppendRange(&kept, recent);
  }
  return kept;
}

int64_t KvRetention::KeptRows(std::span<const TokenRange> ranges, int64_t length) const {
  return TotalSize(Kept(ranges, length));
}

StatusOr<int64_t> KvStoreBase::CheckStep(std::span<const TokenRange> step_ranges,
                                         int64_t capacity) const {
  int64_t n = 0, last = held_ranges_.empty() ? 0 : held_ranges_.back().end;
  for (const TokenRange& r : step_ranges) {
    MP_REQUIRE(!r.empty(), "KV store: empty commit");
    MP_REQUIRE(r.begin >= last, "KV store: positions must be appended in increasing order");
    last = r.end;
    n += r.size();
  }
  MP_REQUIRE(held_rows_ + n <= capacity, "KV store: ", held_rows_ + n,
             " rows exceed the capacity of ", capacity);
  return n;
}

void KvStoreBase::HoldAll(std::span<const TokenRange> step_ranges, int64_t rows) {
  for (const TokenRange& r : step_ranges) AppendRange(&held_ranges_, r);
  held_rows_ += rows;
}

std::vector<TokenRange> RangesBefore(std::span<const TokenRange> ranges, int64_t length) {
  std::vector<TokenRange> out;
  for (const TokenRange& r : ranges) {
    if (r.begin >= length) break;
    out.push_back({r.begin, std::min(r.end, length)});
  }
  return out;
}

Status CopyKvRows(Backend& backend, ConstKvRows src, KvRows dst) {
  MP_RETURN_IF_ERROR(backend.StartCopy(src.k, dst.k, CopyOrder::kAfterCompute).status());
  MP_ASSIGN_OR_RETURN(const CopyEvent v, backend.StartCopy(src.v, dst.v, CopyOrder::kAfterCompute));
  // The copy queue runs in order: V's copy complete means K's is too.
  return backend.WaitCopy(v);
}

namespace {

std::string RangesText(std::span<const TokenRange> ranges) {
  std::string text;
  for (const TokenRange& r : ranges) {
    if (!text.empty()) text.append(" ");
    text.append("[").append(std::to_string(r.begin)).append(", ");
    text.append(std::to_string(r.end)).append(")");
  }
  return text.empty() ? std::string("none") : text;
}

}  // namespace

StatusOr<std::vector<TokenRange>> KvStoreBase::CheckRestore(const KvStore& src,
                                                            std::span<const TokenRange> stored,
                                                            int64_t length) const {
  if (typeid(src) != typeid(*this))
    return FailedPreconditionError("the cached KV was kept in another kind of store");
  MP_REQUIRE(held_rows_ == 0, "KV store: a prefix is restored into an empty store only");
  if (!(src.retention().sink_tokens == retention_.sink_tokens &&
        src.retention().window_tokens == retention_.window_tokens))
    return FailedPreconditionError("the cached KV was kept with another window");
  return CheckHeldRows(src, stored, length);
}

Status KvStoreBase::Truncate(std::span<const TokenRange> stored, int64_t length) {
  MP_ASSIGN_OR_RETURN(std::vector<TokenRange> kept, CheckHeldRows(*this, stored, length));
  held_rows_ = TotalSize(kept);
  held_ranges_ = std::move(kept);
  return OkStatus();
}

Status CheckSameRanges(std::span<const TokenRange> have, std::span<const TokenRange> needed,
                       int64_t length) {
  if (std::ranges::equal(have, needed)) return OkStatus();
  return FailedPreconditionError("the cached KV holds positions " + RangesText(have) +
                                 " before " + std::to_string(length) + " but a sequence of " +
                                 "that length keeps " + RangesText(needed));
}

StatusOr<std::vector<TokenRange>> CheckHeldRows(const KvStore& store,
                                                std::span<const TokenRange> stored,
                                                int64_t length) {
  std::vector<TokenRange> needed = store.retention().Kept(stored, length);
  MP_RETURN_IF_ERROR(CheckSameRanges(RangesBefore(store.held_ranges(), length), needed, length));
  return needed;
}

Status KvStoreBase::RestoreContiguous(Backend& backend, const KvStore& src,
                                      std::span<const TokenRange> stored, int64_t length) {
  MP_ASSIGN_OR_RETURN(const std::vector<TokenRange> needed, CheckRestore(src, stored, length));
  if (needed.empty()) return OkStatus();
  MP_ASSIGN_OR_RETURN(const ConstKvRows from, src.Rows(0));
  return HoldCopiedRows(backend, from, needed, length);
}

Status KvStoreBase::HoldCopiedRows(Backend& backend, ConstKvRows from,
                                   std::span<const TokenRange> needed, int64_t length) {
  const int64_t n = TotalSize(needed);
  MP_REQUIRE(from.k.dim(0) >= n, "KV store: the cached store holds ", from.k.dim(0), " rows, not ",
             n);
  MP_ASSIGN_OR_RETURN(const KvRows to, StepRows(0, n));
  const ConstKvRows first{SliceRows(from.k, 0, n), SliceRows(from.v, 0, n)};
  MP_RETURN_IF_ERROR(CopyKvRows(backend, first, to));
  MP_RETURN_IF_ERROR(EndWrites(n));
  return Commit(needed, length);
}

StatusOr<SavedKvRows> KvStore::SaveRows(Backend& backend, int64_t part) const {
  MP_REQUIRE(part == 0, "KV store: part ", part, " of a store of one");
  MP_ASSIGN_OR_RETURN(const ConstKvRows rows, Rows(0));
  SavedKvRows saved{.retention = retention(), .ranges = held_ranges(), .k = {}, .v = {}};
  MP_ASSIGN_OR_RETURN(saved.k, backend.AllocateHost(rows.k.dtype, rows.k.shape));
  MP_ASSIGN_OR_RETURN(saved.v, backend.AllocateHost(rows.v.dtype, rows.v.shape));
  if (rows.k.dim(0) > 0)
    MP_RETURN_IF_ERROR(CopyKvRows(backend, rows, {saved.k.view(), saved.v.view()}));
  return saved;
}

StatusOr<std::vector<TokenRange>> KvStoreBase::CheckLoad(int64_t part, const SavedKvRows& saved,
                                                         std::span<const TokenRange> stored,
                                                         int64_t length) const {
  MP_REQUIRE(part == 0, "KV store: part ", part, " of a store of one");
  MP_REQUIRE(held_rows_ == 0, "KV store: a prefix is restored into an empty store only");
  if (!(saved.retention.sink_tokens == retention_.sink_tokens &&
        saved.retention.window_tokens == retention_.window_tokens))
    return FailedPreconditionError("the cached KV was kept with another window");
  std::vector<TokenRange> needed = retention_.Kept(stored, length);
  MP_RETURN_IF_ERROR(CheckSameRanges(RangesBefore(saved.ranges, length), needed, length));
  const Shape& shape = saved.k.view().shape;
  MP_REQUIRE(shape.rank == 3 && shape[0] == saved.rows() && saved.v.view().shape == shape,
             "KV store: saved rows ", shape.ToString(), " for ", saved.rows(), " positions");
  return needed;
}

Status KvStoreBase::LoadRows(Backend& backend, int64_t part, const SavedKvRows& saved,
                             std::span<const TokenRange> stored, int64_t length) {
  MP_ASSIGN_OR_RETURN(const std::vector<TokenRange> needed,
                      CheckLoad(part, saved, stored, length));
  if (needed.empty()) return OkStatus();
  return HoldCopiedRows(backend, {saved.k.cview(), saved.v.cview()}, needed, length);
}

const char* KvTierName(KvTier tier) { return tier == KvTier::kDevice ? "device" : "host"; }

}  // namespace millipede
