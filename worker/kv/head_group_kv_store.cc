#include "worker/kv/head_group_kv_store.h"

#include <numeric>

#include "worker/kv/saved_kv_rows.h"

namespace millipede {
namespace {

KvLayout GroupLayout(const KvLayout& layout, const std::vector<int32_t>& heads) {
  return KvLayout{static_cast<int64_t>(heads.size()), layout.head_dim, layout.dtype};
}

}  // namespace

StatusOr<std::unique_ptr<HeadGroupKvStore>> HeadGroupKvStore::Create(
    Backend& backend, const KvLayout& layout, KvHeadGroups groups, const KvRetention& streaming,
    int64_t capacity, int64_t step_rows, std::shared_ptr<KvBuffer> staging,
    const DeviceKvStore* share_full, int64_t share_rows) {
  MP_REQUIRE(!groups.full.empty() && !groups.streaming.empty(),
             "head-group KV store: needs full and streaming heads");
  MP_REQUIRE(static_cast<int64_t>(groups.full.size() + groups.streaming.size()) ==
                 layout.num_kv_heads,
             "head-group KV store: ", groups.full.size(), " + ", groups.streaming.size(),
             " heads for a layer of ", layout.num_kv_heads);
  MP_REQUIRE(staging != nullptr && staging->capacity() >= step_rows,
             "head-group KV store: staging rows fewer than a step's ", step_rows);
  MP_ASSIGN_OR_RETURN(std::unique_ptr<DeviceKvStore> full,
                      DeviceKvStore::Create(backend, GroupLayout(layout, groups.full), capacity,
                                            share_full, share_rows));
  MP_ASSIGN_OR_RETURN(std::unique_ptr<StreamingKvStore> window,
                      StreamingKvStore::Create(backend, GroupLayout(layout, groups.streaming),
                                               streaming, step_rows));
  return std::unique_ptr<HeadGroupKvStore>(new HeadGroupKvStore(
      backend, std::move(groups), std::move(full), std::move(window), std::move(staging)));
}

int64_t HeadGroupKvStore::BytesFor(const KvLayout& layout, const KvHeadGroups& groups,
                                   const KvRetention& streaming, int64_t capacity,
                                   int64_t step_rows) {
  return DeviceKvStore::BytesFor(GroupLayout(layout, groups.full), capacity) +
         StreamingKvStore::BytesFor(GroupLayout(layout, groups.streaming), streaming, step_rows);
}

StatusOr<KvRows> HeadGroupKvStore::StepRows(int64_t offset, int64_t n) {
  // Room in both groups too: refused here rather than at EndWrites.
  MP_RETURN_IF_ERROR(full_->StepRows(offset, n).status());
  MP_RETURN_IF_ERROR(streaming_->StepRows(offset, n).status());
  return staging_->Slice(offset, n);
}

StatusOr<ConstKvRows> HeadGroupKvStore::Rows(int64_t) const {
  return FailedPreconditionError(
      "head-group KV store: the full and streaming heads' rows live apart; read each group's");
}

Status HeadGroupKvStore::EndWrites(int64_t step_rows) {
  MP_ASSIGN_OR_RETURN(const KvRows staged, staging_->Slice(0, step_rows));
  auto move = [&](KvStore& store, const std::vector<int32_t>& heads) -> Status {
    std::vector<int32_t> slots(heads.size());
    std::iota(slots.begin(), slots.end(), 0);
    MP_ASSIGN_OR_RETURN(const KvRows dst, store.StepRows(0, step_rows));
    MP_RETURN_IF_ERROR(backend_.CopyHeads({AsConst(staged.k), dst.k, heads, slots}));
    return backend_.CopyHeads({AsConst(staged.v), dst.v, heads, slots});
  };
  MP_RETURN_IF_ERROR(move(*full_, groups_.full));
  MP_RETURN_IF_ERROR(move(*streaming_, groups_.streaming));
  moved_rows_ = step_rows;
  return OkStatus();
}

Status HeadGroupKvStore::Commit(std::span<const TokenRange> step_ranges, int64_t length) {
  const int64_t n = TotalSize(step_ranges);
  MP_REQUIRE(n == moved_rows_, "head-group KV store: a step of ", n, " rows, of which ",
             moved_rows_, " were moved into the groups (EndWrites)");
  MP_RETURN_IF_ERROR(full_->Commit(step_ranges, length));
  MP_RETURN_IF_ERROR(streaming_->Commit(step_ranges, length));
  held_ranges_ = full_->held_ranges();
  held_rows_ = full_->held_rows();
  moved_rows_ = 0;
  return OkStatus();
}

Status HeadGroupKvStore::RestoreFrom(Backend& backend, const KvStore& src,
                                     std::span<const TokenRange> stored, int64_t length) {
  const auto* from = dynamic_cast<const HeadGroupKvStore*>(&src);
  if (from == nullptr || from->groups_.full != groups_.full ||
      from->groups_.streaming != groups_.streaming)
    return FailedPreconditionError(
        "the cached KV was kept in another kind of store (its KV heads grouped otherwise)");
  MP_REQUIRE(held_rows_ == 0, "head-group KV store: a prefix is restored into an empty store only");
  MP_RETURN_IF_ERROR(full_->RestoreFrom(backend, *from->full_, stored, length));
  MP_RETURN_IF_ERROR(streaming_->RestoreFrom(backend, *from->streaming_, stored, length));
  held_ranges_ = full_->held_ranges();
  held_rows_ = full_->held_rows();
  return OkStatus();
}

Status HeadGroupKvStore::Truncate(std::span<const TokenRange> stored, int64_t length) {
  // The streaming group first: it is the one that may refuse, and then nothing has changed.
  MP_RETURN_IF_ERROR(streaming_->Truncate(stored, length));
  MP_RETURN_IF_ERROR(full_->Truncate(stored, length));
  held_ranges_ = full_->held_ranges();
  held_rows_ = full_->held_rows();
  return OkStatus();
}

StatusOr<SavedKvRows> HeadGroupKvStore::SaveRows(Backend& backend, int64_t part) const {
  MP_REQUIRE(part == kFull || part == kStreaming, "head-group KV store: no part ", part);
  return group(static_cast<Group>(part)).SaveRows(backend, 0);
}

Status HeadGroupKvStore::LoadRows(Backend& backend, int64_t part, const SavedKvRows& saved,
                                  std::span<const TokenRange> stored, int64_t length) {
  MP_REQUIRE(part == kFull || part == kStreaming, "head-group KV store: no part ", part);
  MP_RETURN_IF_ERROR(group(static_cast<Group>(part)).LoadRows(backend, 0, saved, stored, length));
  held_ranges_ = full_->held_ranges();
  held_rows_ = full_->held_rows();
  return OkStatus();
}

}  // namespace millipede
