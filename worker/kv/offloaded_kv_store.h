// A selected layer's KV store whose context rows (the prompt) live in the host tier, OmniKV's
// context bank, while the rows of decode steps (generated tokens) stay on the device: every
// selected layer attends to all generated tokens at every step, but only to the context rows its
// filter layer chose, which the group's packed load gathers from host memory (TokenSelection).
//
// Context rows are written on the device into a staging slot of a KvStagingPool shared by the
// sequence's offloaded stores: two slots, so one layer's rows go out to host memory on the copy
// queue while the next layer computes, and a slot is written again only once its copy is
// complete (compute waits for it). The copy of a layer's rows starts when the next offloaded
// layer takes a slot, or at Commit, whichever comes first, after the compute that wrote them.
// EndContext (the sequence's first decode step) switches the store to generated rows.
//
// A prefill step after held rows (a later chunk of the prompt, or a follow-up after a cached
// prefix) attends to the held rows as well as its own: the pool's window, a device buffer of the
// sequence's context capacity, receives the held rows from host memory and the step's rows
// behind them, one layer at a time, so that every prefill path reads one contiguous block.
#pragma once

#include <memory>

#include "worker/backend/backend.h"
#include "worker/kv/kv_buffer.h"

namespace millipede {

class OffloadedKvStore;

// Two device buffers of `step_rows` rows that the offloaded stores of one sequence take in turn,
// and the window (`window_rows` rows, 0: none yet) where a step after held rows reads them.
class KvStagingPool {
 public:
  static StatusOr<std::shared_ptr<KvStagingPool>> Create(Backend& backend, const KvLayout& layout,
                                                         int64_t step_rows, int64_t window_rows);
  static int64_t BytesFor(const KvLayout& layout, int64_t step_rows, int64_t window_rows) {
    return layout.RowBytes() * (2 * step_rows + window_rows);
  }
  int64_t NumBytes() const {
    return slots_[0].rows.NumBytes() + slots_[1].rows.NumBytes() + window_.NumBytes();
  }
  // A window of at least `rows` rows (a sequence taken over by a job whose steps follow held
  // rows).
  Status ReserveWindow(int64_t rows);
  // Slots of at least `rows` rows (a sequence taken over by a job of larger steps than its slots
  // were sized for). Refused while a slot's rows wait to be copied out.
  Status ReserveSlots(int64_t rows);
  // Slots of exactly `rows` rows and no window (a cached sequence laid out again for smaller
  // steps); refused as ReserveSlots is.
  Status ResizeSlots(int64_t rows);
  int64_t slot_rows() const { return slots_[0].rows.capacity(); }

 private:
  friend class OffloadedKvStore;
  struct Slot {
    KvBuffer rows;
    OffloadedKvStore* owner = nullptr;
    int64_t written = 0;   // rows [0, written) hold the owner's step rows
    bool pending = false;  // written and not yet copied out
    CopyEvent copied;      // the latest copy out of this slot
    uint64_t last_use = 0;
  };
  // Which store's rows the window holds: its held rows then `step` rows of its slot's use `use`.
  struct WindowTag {
    const OffloadedKvStore* owner = nullptr;
    int64_t held = 0, step = 0;
    uint64_t use = 0;
  };
  KvStagingPool(Backend& backend, const KvLayout& layout) : backend_(backend), layout_(layout) {}
  // Rows [offset, offset + n) of `owner`'s slot, taking the least recently used slot (and
  // starting the copy out of the other store's pending rows) when it holds none. A step writes
  // its rows from offset 0 first.
  StatusOr<KvRows> Acquire(OffloadedKvStore* owner, int64_t offset, int64_t n);
  // `owner`'s pending slot, or null.
  Slot* PendingOf(const OffloadedKvStore* owner);
  // Starts the copy of a pending slot's rows to its owner's host rows.
  Status Flush(Slot& slot);
  // `owner`'s held rows followed by the first `step_rows` rows of its pending slot, in the window
  // (copied there unless it holds them already; compute waits for the copies).
  StatusOr<ConstKvRows> Joined(const OffloadedKvStore& owner, int64_t step_rows);

  Backend& backend_;
  KvLayout layout_;
  Slot slots_[2];
  uint64_t uses_ = 0;
  KvBuffer window_;  // [window rows, kv_heads, head_dim] each, device
  WindowTag window_tag_;
};

class OffloadedKvStore final : public KvStoreBase {
 public:
  // `host` [context_capacity, kv_heads, head_dim] K and V in AllocateHost memory that outlives
  // the store (a slice of the group's host arena); room for `generated_capacity` rows of decode
  // steps on the device.
  static StatusOr<std::unique_ptr<OffloadedKvStore>> Create(Backend& backend,
                                                            const KvLayout& layout, KvRows host,
                                                            std::shared_ptr<KvStagingPool> staging,
                                                            int64_t generated_capacity);
  // What Create allocates in the backend's memory (the staging pool and the host rows apart).
  static int64_t DeviceBytesFor(const KvLayout& layout, int64_t generated_capacity) {
    return layout.RowBytes() * generated_capacity;
  }

  KvTier tier() const override { return KvTier::kHost; }
  StatusOr<KvRows> StepRows(int64_t offset, int64_t n) override;
  // Before EndContext: the held rows (host memory, ordered after their copies for compute), the
  // step's rows (staging) or, after held rows, both (the pool's window). After it: refused (read
  // ContextRows through the packed load, GeneratedRows directly).
  StatusOr<ConstKvRows> Rows(int64_t step_rows) const override;
  Status Commit(std::span<const TokenRange> step_ranges, int64_t length) override;
  int64_t NumBytes() const override { return HostBytes() + generated_.NumBytes(); }
  int64_t HostBytes() const {
    return static_cast<int64_t>(host_.k.NumBytes() + host_.v.NumBytes());
  }
  // src's context rows (host memory) and generated rows (device) before `length` become this
  // store's context rows, in host memory.
  Status RestoreFrom(Backend& backend, const KvStore& src, std::span<const TokenRange> stored,
                     int64_t length) override;
  // The context rows (host memory) and generated rows (device) in position order.
  StatusOr<SavedKvRows> SaveRows(Backend& backend, int64_t part) const override;
  // The saved rows before `length` become this store's context rows, in host memory.
  Status LoadRows(Backend& backend, int64_t part, const SavedKvRows& saved,
                  std::span<const TokenRange> stored, int64_t length) override;
  // Keeps the rows before `length` as context rows in host memory (generated rows among them
  // are copied there from the device) and starts a new context: a cached sequence taken over.
  Status Truncate(std::span<const TokenRange> stored, int64_t length) override;
  int64_t context_capacity() const { return host_.k.dim(0); }
  int64_t generated_capacity() const { return generated_.capacity(); }

  // From now on the steps' rows are generated rows, kept on the device. Idempotent.
  void EndContext();
  bool context_ended() const { return context_ended_; }
  // Rows held in host memory (all held rows before EndContext).
  int64_t context_rows() const { return context_ended_ ? context_rows_ : held_rows_; }
  // The held generated rows followed by the step's first `step_rows` (device memory).
  StatusOr<ConstKvRows> GeneratedRows(int64_t step_rows) const;
  // Blocks until every context row committed so far is in host memory (for the host to read).
  Status WaitForWrites() const;

 private:
  friend class KvStagingPool;
  // Copies `rows` (its first `count`) into the host rows [begin, begin + count) and waits.
  Status CopyToHost(Backend& backend, ConstKvRows rows, int64_t begin, int64_t count);
  OffloadedKvStore(Backend& backend, KvRows host, std::shared_ptr<KvStagingPool> staging,
                   KvBuffer generated)
      : backend_(backend),
        host_(host),
        staging_(std::move(staging)),
        generated_(std::move(generated)) {}

  Backend& backend_;
  KvRows host_;  // [context capacity, kv_heads, head_dim] each, pinned host memory
  std::shared_ptr<KvStagingPool> staging_;
  KvBuffer generated_;  // [generated capacity, kv_heads, head_dim] each, device
  bool context_ended_ = false;
  int64_t context_rows_ = 0;    // held rows at EndContext
  int64_t generated_rows_ = 0;  // held generated rows
  int64_t copied_rows_ = 0;     // rows of the step copied out so far (checked at Commit)
  CopyEvent last_copy_;         // the latest copy of this store's rows to host memory
};

}  // namespace millipede
