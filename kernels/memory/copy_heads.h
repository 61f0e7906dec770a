// dst[t, dst_heads[j], :] = src[t, src_heads[j], :] for every row t and pair j: whole heads moved
// between two tensors of per-head rows. Packs a layer's queries, keys or values of some heads into
// a tensor of those heads alone, and unpacks an output back (a layer whose KV heads are kept in
// separate stores, head_group_kv_store.h).
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

// The most heads one call moves (the CUDA kernel takes the lists as launch arguments).
inline constexpr int64_t kCopyHeadsMax = 256;

struct CopyHeadsArgs {
  ConstTensorView src;  // [n, src heads, width] of any dtype
  TensorView dst;       // [n, dst heads, width] src's dtype; must not overlap src
  // [J] head pairs, J <= kCopyHeadsMax, in host memory: src_heads[j] in [0, src heads),
  // dst_heads[j] in [0, dst heads) and distinct. dst's other heads are left as they are.
  std::span<const int32_t> src_heads;
  std::span<const int32_t> dst_heads;
};

// Checks shapes, dtypes and the head lists.
Status CopyHeadsCheckArgs(const CopyHeadsArgs& args);

// Copies the heads on the host. n == 0 or J == 0: nothing to do.
Status CopyHeadsRef(const CopyHeadsArgs& args);

}  // namespace millipede
