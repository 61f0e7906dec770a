#include "worker/kv/streaming_kv_store.h"

#include <algorithm>
#include <memory>

namespace millipede {

StatusOr<std::unique_ptr<StreamingKvStore>> StreamingKvStore::Create(
    Backend& backend, const KvLayout& layout, const KvRetention& retention, int64_t step_rows) {
  MP_REQUIRE(retention.window_tokens > 0 && retention.sink_tokens >= 0,
             "streaming KV store: needs a positive window, got ", retention.window_tokens);
  MP_REQUIRE(step_rows > 0, "streaming KV store: step rows must be positive, got ", step_rows);
  MP_ASSIGN_OR_RETURN(KvBuffer buffer,
                      KvBuffer::Create(backend, layout, CapacityFor(retention, step_rows)));
  return std::unique_ptr<StreamingKvStore>(
      new StreamingKvStore(backend, std::move(buffer), retention));
}

StatusOr<KvRows> StreamingKvStore::StepRows(int64_t offset, int64_t n) {
  MP_REQUIRE(held_rows_ + offset + n <= data_capacity(), "streaming KV store: a step of ",
             offset + n, " rows exceeds the ", data_capacity() - held_rows_,
             " this store was sized for");
  return buffer_.Slice(held_rows_ + offset, n);
}

StatusOr<ConstKvRows> StreamingKvStore::Rows(int64_t step_rows) const {
  return buffer_.Prefix(held_rows_ + step_rows);
}

Status StreamingKvStore::MoveRowsDown(int64_t from, int64_t to, int64_t n) {
  if (n == 0 || from == to) return OkStatus();
  MP_ASSERT(to < from && n <= retention_.window_tokens, "rows move down by at most a window");
  MP_ASSIGN_OR_RETURN(KvRows src, buffer_.Slice(from, n));
  MP_ASSIGN_OR_RETURN(KvRows spare, buffer_.Slice(data_capacity(), n));
  MP_ASSIGN_OR_RETURN(KvRows dst, buffer_.Slice(to, n));
  // Same dtype: Convert is a copy. Through the spare rows when source and target overlap.
  if (from - to >= n) {
    MP_RETURN_IF_ERROR(backend_.Convert(AsConst(src.k), dst.k));
    return backend_.Convert(AsConst(src.v), dst.v);
  }
  MP_RETURN_IF_ERROR(backend_.Convert(AsConst(src.k), spare.k));
  MP_RETURN_IF_ERROR(backend_.Convert(AsConst(src.v), spare.v));
  MP_RETURN_IF_ERROR(backend_.Convert(AsConst(spare.k), dst.k));
  return backend_.Convert(AsConst(spare.v), dst.v);
}

Status StreamingKvStore::Commit(std::span<const TokenRange> step_ranges, int64_t length) {
  MP_ASSIGN_OR_RETURN(const int64_t n, CheckStep(step_ranges, data_capacity()));
  std::vector<TokenRange> all = held_ranges_;
  for (const TokenRange& r : step_ranges) AppendRange(&all, r);
  const int64_t rows = held_rows_ + n;
  // Rows are in position order: the kept ones are a prefix (sinks) and a suffix (window).
  int64_t sinks = 0, suffix_begin = rows, row = 0;
  for (const TokenRange& r : all) {
    for (int64_t p = r.begin; p < r.end; ++p, ++row) {
      if (p < retention_.sink_tokens) sinks = row + 1;
      if (suffix_begin == rows && p >= retention_.sink_tokens &&
          retention_.Keeps(p, length))
        suffix_begin = row;
    }
  }
  suffix_begin = std::max(suffix_begin, sinks);
  MP_RETURN_IF_ERROR(MoveRowsDown(suffix_begin, sinks, rows - suffix_begin));
  held_ranges_ = retention_.Kept(all, length);
  held_rows_ = sinks + rows - suffix_begin;
  MP_ASSERT(held_rows_ == retention_.KeptRows(all, length), "kept rows match the retention");
  return OkStatus();
}

}  // namespace millipede
