// A constant-size KV store: the sink tokens and a recent window only (DuoAttention's streaming
// heads, StreamingLLM). Memory is (sink + 2 x window + step) rows whatever the sequence length
// (more while every row is kept below KvRetention::keep_all_below):
// held rows are the rank's sinks followed by its rows inside the window of the next query; a step
// appends after them; Commit moves the rows still inside the window next to the sinks (through a
// spare window of rows, so no copy overlaps itself) and drops the rest.
//
// What a step's queries see: the held rows and the step's own rows. A step that prefills a whole
// prompt therefore sees all of it (exact for its dense heads); a later step (the next prefill
// chunk, a decode token) sees the sinks and the window only.
#pragma once

#include "policy/head_groups.h"
#include "worker/kv/kv_buffer.h"

namespace millipede {

class StreamingKvStore final : public KvStoreBase {
 public:
  // `step_rows`: the most rows one step appends on this rank.
  static StatusOr<std::unique_ptr<StreamingKvStore>> Create(Backend& backend,
                                                            const KvLayout& layout,
                                                            const KvRetention& retention,
                                                            int64_t step_rows);
  // Held rows (the sinks and the window, or every row below keep_all_below), a step's rows and a
  // spare window.
  static int64_t CapacityFor(const KvRetention& retention, int64_t step_rows) {
    return StreamingStoreRows(retention.sink_tokens, retention.window_tokens,
                              retention.keep_all_below, step_rows);
  }
  static int64_t BytesFor(const KvLayout& layout, const KvRetention& retention,
                          int64_t step_rows) {
    return layout.RowBytes() * CapacityFor(retention, step_rows);
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

 private:
  StreamingKvStore(Backend& backend, KvBuffer buffer, const KvRetention& retention)
      : KvStoreBase(retention), backend_(backend), buffer_(std::move(buffer)) {}
  // Rows [0, data_capacity) hold data; the last window_tokens rows are the spare for Commit.
  int64_t data_capacity() const { return buffer_.capacity() - retention_.window_tokens; }
  // Copies rows [from, from + n) to [to, to + n) (to < from) without an overlapping copy.
  Status MoveRowsDown(int64_t from, int64_t to, int64_t n);

  Backend& backend_;
  KvBuffer buffer_;
};

}  // namespace millipede
