// One layer's keys and values of one sequence on one rank, behind one interface: the rows a step
// writes, the rows attention reads, and what stays once the step is committed.
//
// Rows are kept in position order. A step appends its new rows after the held ones; attention
// during the step reads the held rows followed by the step's rows as one contiguous block (ring
// attention sends it as is); Commit makes the step's rows held and drops what the store does not
// keep (KvRetention). Stores:
//  - DeviceKvStore (device_kv_store.h): every row, capacity fixed when the sequence starts;
//  - StreamingKvStore (streaming_kv_store.h): the sink tokens and a recent window only, constant
//    size whatever the sequence length (DuoAttention's streaming heads, StreamingLLM);
//  - HostKvStore (host_kv_store.h): every row in pinned host memory, written asynchronously;
//  - OffloadedKvStore (offloaded_kv_store.h): OmniKV's selected layers, the context in host memory;
//  - HeadGroupKvStore (head_group_kv_store.h): a layer's full KV heads every row, its streaming
//    heads the sinks and window, in two stores.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/shard_plan.h"
#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

class Backend;
struct SavedKvRows;  // worker/kv/saved_kv_rows.h

// Which positions a store keeps once a step is committed.
struct KvRetention {
  int64_t sink_tokens = 0;    // positions [0, sink_tokens) always stay
  int64_t window_tokens = 0;  // 0: every position stays
  // While the sequence holds fewer positions, every position stays (a policy's dense fallback:
  // prefill below dense_below_tokens attends to every key).
  int64_t keep_all_below = 0;
  bool KeepsAll() const { return window_tokens == 0; }
  // Whether `position` stays once the sequence holds `length` positions: every position, or the
  // sinks and the positions a query at `length` sees in its window (length - p < window).
  bool Keeps(int64_t position, int64_t length) const {
    return KeepsAll() || length < keep_all_below || position < sink_tokens ||
           position > length - window_tokens;
  }
  // The kept part of `ranges` (increasing, disjoint), in order.
  std::vector<TokenRange> Kept(std::span<const TokenRange> ranges, int64_t length) const;
  // Rows of `ranges` kept by this retention: the sinks are a prefix and the window a suffix.
  int64_t KeptRows(std::span<const TokenRange> ranges, int64_t length) const;
};

// Where a store's rows live.
enum class KvTier { kDevice, kHost };
const char* KvTierName(KvTier tier);  // "device", "host"

// K and V rows: each [rows, num_kv_heads, head_dim] in the store's dtype.
struct KvRows {
  TensorView k, v;
};
struct ConstKvRows {
  ConstTensorView k, v;
};

class KvStore {
 public:
  virtual ~KvStore() = default;
  virtual KvTier tier() const = 0;
  virtual const KvRetention& retention() const = 0;
  // Rows held from committed steps and their global positions (increasing).
  virtual int64_t held_rows() const = 0;
  virtual const std::vector<TokenRange>& held_ranges() const = 0;
  // Room for the current step's rows [offset, offset + n) after the held ones, to be written by
  // an op (RopeKv). InvalidArgument beyond what the store was sized for.
  virtual StatusOr<KvRows> StepRows(int64_t offset, int64_t n) = 0;
  // The held rows followed by the step's first `step_rows` rows, contiguous. A store whose held
  // rows and step rows live apart (the host tier) refuses a view across both.
  virtual StatusOr<ConstKvRows> Rows(int64_t step_rows) const = 0;
  // Ends the step: its `step_ranges` (this rank's new positions, increasing, after the held
  // ones, as many rows as were written) become held; rows the retention drops at `length`
  // (positions over all ranks now) are released.
  virtual Status Commit(std::span<const TokenRange> step_ranges, int64_t length) = 0;
  // The step's rows [0, step_rows) are written (RopeKv into StepRows): a store that stages them
  // moves them into place now, before attention reads them and before another store's rows are
  // written. Every writer calls it once per step and layer. Nothing by default.
  virtual Status EndWrites(int64_t step_rows) { return OkStatus(); }
  // Bytes the store holds (both K and V).
  virtual int64_t NumBytes() const = 0;
  // For steps recorded once and replayed (decode graphs): how many rows stay where they are
  // written for the store's life, in backend memory, the held rows first and a step's rows after
  // them; 0 for a store that moves, drops or offloads rows.
  virtual int64_t fixed_capacity() const { return 0; }
  // Rows [0, n) of that storage, written or not (n <= fixed_capacity()).
  virtual StatusOr<KvRows> FixedRows(int64_t n) const {
    return UnimplementedError("this KV store moves its rows");
  }
  // The prefix cache: makes this store, empty and of the same kind and layout as `src`, hold
  // src's rows of the positions before `length`, as it would hold them had its own sequence
  // been `length` long with this rank's positions `stored` (increasing, all < length): what src
  // holds below `length` must be exactly what this store's retention keeps of `stored` there
  // (a store that keeps a window only is reused at the length it was cached at).
  // FailedPrecondition when it is not, or when the kinds differ. Copies on the backend's copy
  // queue and waits for them (src may be freed afterwards).
  virtual Status RestoreFrom(Backend& backend, const KvStore& src,
                             std::span<const TokenRange> stored, int64_t length) = 0;
  // The prefix cache's take-over: forgets the held rows of positions from `length` on, as if
  // this store's sequence had been `length` long with this rank's positions `stored`
  // (increasing, all < length): what it holds below `length` must be exactly what its
  // retention keeps of `stored` there (FailedPrecondition otherwise). Nothing is copied.
  virtual Status Truncate(std::span<const TokenRange> stored, int64_t length) = 0;

  // ---- The prefix cache's host tier: the held rows saved to host memory and back ----
  // How many stores of rows this one is made of (a store per group of heads: 2); each part is
  // saved apart.
  virtual int64_t num_parts() const { return 1; }
  // Part `part`'s held rows, in position order, copied into new host memory (AllocateHost) on
  // the copy queue; returns once the copies are complete. By default: Rows(0).
  virtual StatusOr<SavedKvRows> SaveRows(Backend& backend, int64_t part) const;
  // Makes part `part` of this store (empty, of the kind and layout that saved `saved`) hold
  // saved's rows of the positions before `length`, as RestoreFrom does from a live store: what
  // `saved` holds there must be exactly what this store's retention keeps of `stored`
  // (FailedPrecondition otherwise). Copies and waits.
  virtual Status LoadRows(Backend& backend, int64_t part, const SavedKvRows& saved,
                          std::span<const TokenRange> stored, int64_t length) = 0;
};

// What `store` holds below `length` is what its retention keeps of `stored` (this rank's
// positions, increasing) at `length`: those positions, or FailedPrecondition naming both.
StatusOr<std::vector<TokenRange>> CheckHeldRows(const KvStore& store,
                                                std::span<const TokenRange> stored,
                                                int64_t length);
// `have` (what a store holds below `length`) is `needed` (what its retention keeps there), or
// FailedPrecondition naming both.
Status CheckSameRanges(std::span<const TokenRange> have, std::span<const TokenRange> needed,
                       int64_t length);
// Positions of `ranges` (increasing) before `length`.
std::vector<TokenRange> RangesBefore(std::span<const TokenRange> ranges, int64_t length);
// dst = src for K and V (same shapes and dtype; backend or AllocateHost memory), on the copy
// queue after the compute queued so far; returns once both copies are complete.
Status CopyKvRows(Backend& backend, ConstKvRows src, KvRows dst);

// The held-row bookkeeping every store shares.
class KvStoreBase : public KvStore {
 public:
  const KvRetention& retention() const override { return retention_; }
  int64_t held_rows() const override { return held_rows_; }
  const std::vector<TokenRange>& held_ranges() const override { return held_ranges_; }
  // Truncate for a store whose held rows are in position order from row 0: bookkeeping only.
  Status Truncate(std::span<const TokenRange> stored, int64_t length) override;
  // LoadRows for a store whose steps write through StepRows and Commit (HoldCopiedRows).
  Status LoadRows(Backend& backend, int64_t part, const SavedKvRows& saved,
                  std::span<const TokenRange> stored, int64_t length) override;

 protected:
  explicit KvStoreBase(const KvRetention& retention = {}) : retention_(retention) {}
  // The rows of a step's `step_ranges` (non-empty, increasing, after the held positions), which
  // must fit beside the held rows in `capacity`.
  StatusOr<int64_t> CheckStep(std::span<const TokenRange> step_ranges, int64_t capacity) const;
  // The step's positions become held rows (a store that keeps them all).
  void HoldAll(std::span<const TokenRange> step_ranges, int64_t rows);
  // RestoreFrom's checks: this store is empty and `src` holds below `length` exactly what this
  // store's retention keeps of `stored`, which it returns.
  StatusOr<std::vector<TokenRange>> CheckRestore(const KvStore& src,
                                                 std::span<const TokenRange> stored,
                                                 int64_t length) const;
  // LoadRows's checks: part 0 of an empty store, saved with this store's retention, holding
  // below `length` exactly what the retention keeps of `stored`, which it returns.
  StatusOr<std::vector<TokenRange>> CheckLoad(int64_t part, const SavedKvRows& saved,
                                              std::span<const TokenRange> stored,
                                              int64_t length) const;
  // RestoreFrom for a store whose held rows are one contiguous block from row 0 (Rows(0)) and
  // whose steps write through StepRows and Commit: src's first rows are copied as one step.
  Status RestoreContiguous(Backend& backend, const KvStore& src,
                           std::span<const TokenRange> stored, int64_t length);
  // The first rows of `from` (at least TotalSize(needed)) become the held rows of `needed`, as
  // one step through StepRows, EndWrites and Commit.
  Status HoldCopiedRows(Backend& backend, ConstKvRows from, std::span<const TokenRange> needed,
                        int64_t length);

  KvRetention retention_;
  int64_t held_rows_ = 0;
  std::vector<TokenRange> held_ranges_;
};

}  // namespace millipede
