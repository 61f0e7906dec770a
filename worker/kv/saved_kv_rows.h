// One store's held rows saved outside it, in host memory: the prefix cache's host tier
// (worker/engine/saved_sequence.h) keeps a cached sequence this way once its backend memory is
// wanted. KvStore::SaveRows makes one; KvStore::LoadRows puts its rows back into a new store of
// the same kind and layout.
#pragma once

#include <cstdint>
#include <vector>

#include "common/shard_plan.h"
#include "worker/backend/backend.h"
#include "worker/kv/kv_store.h"

namespace millipede {

struct SavedKvRows {
  KvRetention retention;            // the saving store's
  std::vector<TokenRange> ranges;   // the held positions, increasing
  BackendTensor k, v;               // [rows, kv_heads, head_dim] each, AllocateHost memory
  int64_t rows() const { return TotalSize(ranges); }
  int64_t NumBytes() const { return static_cast<int64_t>(k.NumBytes() + v.NumBytes()); }
};

}  // namespace millipede
