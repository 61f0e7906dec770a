#include "worker/kv/offloaded_kv_store.h"

#include <algorithm>

#include "worker/kv/saved_kv_rows.h"

namespace millipede {

StatusOr<std::shared_ptr<KvStagingPool>> KvStagingPool::Create(Backend& backend,
                                                               const KvLayout& layout,
                                                               int64_t step_rows,
                                                               int64_t window_rows) {
  auto pool = std::shared_ptr<KvStagingPool>(new KvStagingPool(backend, layout));
  for (Slot& slot : pool->slots_) {
    MP_ASSIGN_OR_RETURN(slot.rows, KvBuffer::Create(backend, layout, step_rows));
  }
  MP_RETURN_IF_ERROR(pool->ReserveWindow(window_rows));
  return pool;
}

Status KvStagingPool::ReserveWindow(int64_t rows) {
  if (rows <= window_.capacity()) return OkStatus();
  // The old window's last readers finish first.
  MP_RETURN_IF_ERROR(backend_.Synchronize());
  window_ = KvBuffer();
  window_tag_ = {};
  MP_ASSIGN_OR_RETURN(window_, KvBuffer::Create(backend_, layout_, rows));
  return OkStatus();
}

Status KvStagingPool::ReserveSlots(int64_t rows) {
  if (rows <= slot_rows()) return OkStatus();
  return ResizeSlots(rows);
}

Status KvStagingPool::ResizeSlots(int64_t rows) {
  rows = std::max<int64_t>(rows, 1);
  for (const Slot& slot : slots_)
    MP_REQUIRE(!slot.pending, "offloaded KV store: staging slots resized while rows wait in one");
  // Allocated first, so that a failure changes nothing; the old slots' last copies and readers
  // finish before they are freed.
  KvBuffer fresh[2];
  for (KvBuffer& b : fresh) {
    MP_ASSIGN_OR_RETURN(b, KvBuffer::Create(backend_, layout_, rows));
  }
  MP_RETURN_IF_ERROR(backend_.Synchronize());
  window_ = KvBuffer();
  window_tag_ = {};
  for (int i = 0; i < 2; ++i) slots_[i] = Slot{.rows = std::move(fresh[i])};
  return OkStatus();
}

StatusOr<ConstKvRows> KvStagingPool::Joined(const OffloadedKvStore& owner, int64_t step_rows) {
  const Slot* slot = PendingOf(&owner);
  MP_REQUIRE(slot != nullptr && slot->written >= step_rows, "offloaded KV store: ", step_rows,
             " step rows were not written in this step");
  const int64_t held = owner.held_rows_, n = held + step_rows;
  if (n > window_.capacity())
    return FailedPreconditionError(
        "offloaded KV store: a step after " + std::to_string(held) +
        " held rows needs a window of " + std::to_string(n) +
        " rows on the device, the sequence has " + std::to_string(window_.capacity()));
  const WindowTag tag{&owner, held, step_rows, slot->last_use};
  if (window_tag_.owner == tag.owner && window_tag_.held == tag.held &&
      window_tag_.step == tag.step && window_tag_.use == tag.use)
    return window_.Prefix(n);
  window_tag_ = {};
  // Behind the compute queued so far: the step's rows are written and the window's last readers
  // (the previous layer's attention) are done.
  MP_ASSIGN_OR_RETURN(const KvRows held_dst, window_.Slice(0, held));
  MP_ASSIGN_OR_RETURN(const KvRows step_dst, window_.Slice(held, step_rows));
  const ConstKvRows step_src = slot->rows.Prefix(step_rows);
  CopyEvent last;
  for (const auto& [src, dst] :
       {std::pair{SliceRows(AsConst(owner.host_.k), 0, held), held_dst.k},
        std::pair{SliceRows(AsConst(owner.host_.v), 0, held), held_dst.v},
        std::pair{step_src.k, step_dst.k}, std::pair{step_src.v, step_dst.v}}) {
    if (src.shape.dims[0] == 0) continue;
    MP_ASSIGN_OR_RETURN(last, backend_.StartCopy(src, dst, CopyOrder::kAfterCompute));
  }
  MP_RETURN_IF_ERROR(backend_.ComputeWaitFor(last));
  window_tag_ = tag;
  return window_.Prefix(n);
}

KvStagingPool::Slot* KvStagingPool::PendingOf(const OffloadedKvStore* owner) {
  for (Slot& slot : slots_)
    if (slot.pending && slot.owner == owner) return &slot;
  return nullptr;
}

Status KvStagingPool::Flush(Slot& slot) {
  OffloadedKvStore& owner = *slot.owner;
  const int64_t n = slot.written, at = owner.held_rows_;
  MP_REQUIRE(at + n <= owner.host_.k.dim(0), "offloaded KV store: ", at + n,
             " context rows exceed its host capacity of ", owner.host_.k.dim(0));
  slot.pending = false;
  owner.copied_rows_ = n;
  if (n == 0) return OkStatus();
  const ConstKvRows src = slot.rows.Prefix(n);
  MP_RETURN_IF_ERROR(
      backend_.StartCopy(src.k, SliceRows(owner.host_.k, at, n), CopyOrder::kAfterCompute)
          .status());
  MP_ASSIGN_OR_RETURN(slot.copied, backend_.StartCopy(src.v, SliceRows(owner.host_.v, at, n),
                                                      CopyOrder::kAfterCompute));
  owner.last_copy_ = slot.copied;
  return OkStatus();
}

StatusOr<KvRows> KvStagingPool::Acquire(OffloadedKvStore* owner, int64_t offset, int64_t n) {
  Slot* slot = PendingOf(owner);
  if (slot == nullptr) {
    // The previous layer's rows leave now, behind the compute queued so far (its attention),
    // while this layer computes.
    for (Slot& s : slots_)
      if (s.pending) MP_RETURN_IF_ERROR(Flush(s));
    slot = slots_[0].last_use <= slots_[1].last_use ? &slots_[0] : &slots_[1];
    MP_RETURN_IF_ERROR(backend_.ComputeWaitFor(slot->copied));
    slot->owner = owner;
    slot->pending = true;
    slot->written = 0;
    owner->copied_rows_ = 0;
  }
  slot->last_use = ++uses_;
  if (offset == 0) slot->written = 0;  // a new step (a failed one's rows are overwritten)
  MP_ASSIGN_OR_RETURN(KvRows rows, slot->rows.Slice(offset, n));
  slot->written = std::max(slot->written, offset + n);
  return rows;
}

StatusOr<std::unique_ptr<OffloadedKvStore>> OffloadedKvStore::Create(
    Backend& backend, const KvLayout& layout, KvRows host, std::shared_ptr<KvStagingPool> staging,
    int64_t generated_capacity) {
  const Shape row{layout.num_kv_heads, layout.head_dim};
  MP_REQUIRE(host.k.rank() == 3 && host.k.dtype == layout.dtype && host.k.shape == host.v.shape &&
                 host.k.dtype == host.v.dtype && host.k.dim(1) == row[0] && host.k.dim(2) == row[1],
             "offloaded KV store: host rows ", host.k.shape.ToString(), " do not fit the layout");
  MP_REQUIRE(staging != nullptr, "offloaded KV store: no staging pool");
  MP_ASSIGN_OR_RETURN(KvBuffer generated, KvBuffer::Create(backend, layout, generated_capacity));
  return std::unique_ptr<OffloadedKvStore>(
      new OffloadedKvStore(backend, host, std::move(staging), std::move(generated)));
}

StatusOr<KvRows> OffloadedKvStore::StepRows(int64_t offset, int64_t n) {
  if (!context_ended_) {
    MP_REQUIRE(held_rows_ + offset + n <= host_.k.dim(0),
               "offloaded KV store: ", held_rows_ + offset + n,
               " context rows exceed its host capacity of ", host_.k.dim(0));
    return staging_->Acquire(this, offset, n);
  }
  MP_REQUIRE(generated_rows_ + offset + n <= generated_.capacity(),
             "offloaded KV store: ", generated_rows_ + offset + n,
             " generated rows exceed its device capacity of ", generated_.capacity(),
             " on this rank");
  return generated_.Slice(generated_rows_ + offset, n);
}

StatusOr<ConstKvRows> OffloadedKvStore::Rows(int64_t step_rows) const {
  if (context_ended_)
    return FailedPreconditionError(
        "offloaded KV store: context rows are read through the packed load and generated rows "
        "through GeneratedRows");
  if (step_rows == 0) {
    MP_RETURN_IF_ERROR(backend_.ComputeWaitFor(last_copy_));
    return ConstKvRows{SliceRows(AsConst(host_.k), 0, held_rows_),
                       SliceRows(AsConst(host_.v), 0, held_rows_)};
  }
  if (held_rows_ > 0) return staging_->Joined(*this, step_rows);
  const KvStagingPool::Slot* slot = staging_->PendingOf(this);
  MP_REQUIRE(slot != nullptr && slot->written >= step_rows, "offloaded KV store: ", step_rows,
             " step rows were not written in this step");
  return slot->rows.Prefix(step_rows);
}

Status OffloadedKvStore::Commit(std::span<const TokenRange> step_ranges, int64_t length) {
  if (context_ended_) {
    MP_ASSIGN_OR_RETURN(const int64_t n,
                        CheckStep(step_ranges, context_rows_ + generated_.capacity()));
    generated_rows_ += n;
    HoldAll(step_ranges, n);
    return OkStatus();
  }
  MP_ASSIGN_OR_RETURN(const int64_t n, CheckStep(step_ranges, host_.k.dim(0)));
  if (n > 0) {
    if (KvStagingPool::Slot* slot = staging_->PendingOf(this)) {
      MP_RETURN_IF_ERROR(staging_->Flush(*slot));
    }
    MP_ASSERT(copied_rows_ == n, "offloaded KV store: the step wrote ", copied_rows_,
              " rows and commits ", n);
  }
  copied_rows_ = 0;
  HoldAll(step_ranges, n);
  return OkStatus();
}

void OffloadedKvStore::EndContext() {
  if (context_ended_) return;
  context_ended_ = true;
  context_rows_ = held_rows_;
  // Rows a failed step left in a slot are not this store's any more.
  if (KvStagingPool::Slot* slot = staging_->PendingOf(this)) slot->pending = false;
}

StatusOr<ConstKvRows> OffloadedKvStore::GeneratedRows(int64_t step_rows) const {
  MP_REQUIRE(context_ended_, "offloaded KV store: no generated rows before EndContext");
  return generated_.Prefix(generated_rows_ + step_rows);
}

Status OffloadedKvStore::WaitForWrites() const { return backend_.WaitCopy(last_copy_); }

Status OffloadedKvStore::CopyToHost(Backend& backend, ConstKvRows rows, int64_t begin,
                                    int64_t count) {
  if (count == 0) return OkStatus();
  const ConstKvRows first{SliceRows(rows.k, 0, count), SliceRows(rows.v, 0, count)};
  return CopyKvRows(backend, first,
                    KvRows{SliceRows(host_.k, begin, count), SliceRows(host_.v, begin, count)});
}

Status OffloadedKvStore::RestoreFrom(Backend& backend, const KvStore& src,
                                     std::span<const TokenRange> stored, int64_t length) {
  MP_ASSIGN_OR_RETURN(const std::vector<TokenRange> needed, CheckRestore(src, stored, length));
  MP_REQUIRE(!context_ended_, "offloaded KV store: a prefix is restored before decoding only");
  const auto& from = static_cast<const OffloadedKvStore&>(src);
  const int64_t n = TotalSize(needed);
  MP_REQUIRE(n <= host_.k.dim(0), "offloaded KV store: ", n,
             " cached rows exceed its host capacity of ", host_.k.dim(0));
  const int64_t context = std::min(n, from.context_rows());
  MP_RETURN_IF_ERROR(from.WaitForWrites());
  MP_RETURN_IF_ERROR(CopyToHost(backend, {AsConst(from.host_.k), AsConst(from.host_.v)}, 0,
                                context));
  MP_RETURN_IF_ERROR(CopyToHost(backend, from.generated_.Prefix(n - context), context,
                                n - context));
  HoldAll(needed, n);
  return OkStatus();
}

Status OffloadedKvStore::Truncate(std::span<const TokenRange> stored, int64_t length) {
  MP_ASSIGN_OR_RETURN(std::vector<TokenRange> kept, CheckHeldRows(*this, stored, length));
  const int64_t n = TotalSize(kept), context = context_rows();
  MP_REQUIRE(n <= host_.k.dim(0), "offloaded KV store: ", n,
             " rows exceed its host capacity of ", host_.k.dim(0));
  MP_RETURN_IF_ERROR(WaitForWrites());
  // Generated rows kept become context rows: host memory, behind the context rows.
  if (n > context) MP_RETURN_IF_ERROR(CopyToHost(backend_, generated_.Prefix(n - context), context,
                                                 n - context));
  if (KvStagingPool::Slot* slot = staging_->PendingOf(this)) slot->pending = false;
  context_ended_ = false;
  context_rows_ = generated_rows_ = copied_rows_ = 0;
  held_rows_ = n;
  held_ranges_ = std::move(kept);
  return OkStatus();
}

StatusOr<SavedKvRows> OffloadedKvStore::SaveRows(Backend& backend, int64_t part) const {
  MP_REQUIRE(part == 0, "offloaded KV store: part ", part, " of a store of one");
  const Shape shape{held_rows_, host_.k.dim(1), host_.k.dim(2)};
  SavedKvRows saved{.retention = retention_, .ranges = held_ranges_, .k = {}, .v = {}};
  MP_ASSIGN_OR_RETURN(saved.k, backend.AllocateHost(host_.k.dtype, shape));
  MP_ASSIGN_OR_RETURN(saved.v, backend.AllocateHost(host_.v.dtype, shape));
  MP_RETURN_IF_ERROR(WaitForWrites());
  const int64_t context = context_rows();
  auto copy = [&](ConstKvRows rows, int64_t begin, int64_t count) -> Status {
    if (count == 0) return OkStatus();
    return CopyKvRows(backend, {SliceRows(rows.k, 0, count), SliceRows(rows.v, 0, count)},
                      {SliceRows(saved.k.view(), begin, count),
                       SliceRows(saved.v.view(), begin, count)});
  };
  MP_RETURN_IF_ERROR(copy({AsConst(host_.k), AsConst(host_.v)}, 0, context));
  MP_RETURN_IF_ERROR(copy(generated_.Prefix(held_rows_ - context), context, held_rows_ - context));
  return saved;
}

Status OffloadedKvStore::LoadRows(Backend& backend, int64_t part, const SavedKvRows& saved,
                                  std::span<const TokenRange> stored, int64_t length) {
  MP_ASSIGN_OR_RETURN(const std::vector<TokenRange> needed,
                      CheckLoad(part, saved, stored, length));
  MP_REQUIRE(!context_ended_, "offloaded KV store: a prefix is restored before decoding only");
  const int64_t n = TotalSize(needed);
  MP_REQUIRE(n <= host_.k.dim(0), "offloaded KV store: ", n,
             " cached rows exceed its host capacity of ", host_.k.dim(0));
  MP_RETURN_IF_ERROR(CopyToHost(backend, {saved.k.cview(), saved.v.cview()}, 0, n));
  HoldAll(needed, n);
  return OkStatus();
}

}  // namespace millipede
