// The CPU backend's copy queue: all its memory is host memory, so a copy runs when it is started
// and its event is complete at once. Events are still numbered, so that one this queue never
// issued is refused as it would be on a GPU.
#pragma once

#include <cstdint>

#include "worker/backend/backend.h"

namespace millipede {

class CpuCopyQueue {
 public:
  // dst = src (same dtype and element count), now.
  StatusOr<CopyEvent> Copy(ConstTensorView src, TensorView dst);
  // GatherRowsRef, now.
  StatusOr<CopyEvent> Gather(const GatherRowsArgs& args);
  // OK for an event this queue issued (all complete); InvalidArgument otherwise.
  Status Check(CopyEvent event) const;

 private:
  uint64_t issued_ = 0;
};

}  // namespace millipede
