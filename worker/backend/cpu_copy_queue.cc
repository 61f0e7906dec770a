#include "worker/backend/cpu_copy_queue.h"

#include <cstring>

namespace millipede {

StatusOr<CopyEvent> CpuCopyQueue::Copy(ConstTensorView src, TensorView dst) {
  MP_REQUIRE(src.dtype == dst.dtype, "copy: dtype ", DTypeName(src.dtype), " vs ",
             DTypeName(dst.dtype));
  MP_REQUIRE(src.NumElements() == dst.NumElements(), "copy: element counts differ (",
             src.shape.ToString(), " vs ", dst.shape.ToString(), ")");
  if (src.NumBytes() > 0) std::memmove(dst.data, src.data, src.NumBytes());
  return CopyEvent{++issued_};
}

StatusOr<CopyEvent> CpuCopyQueue::Gather(const GatherRowsArgs& args) {
  MP_RETURN_IF_ERROR(GatherRowsRef(args));
  return CopyEvent{++issued_};
}

Status CpuCopyQueue::Check(CopyEvent event) const {
  MP_REQUIRE(event.sequence <= issued_, "copy event ", event.sequence,
             " was not issued by this backend (", issued_, " copies so far)");
  return OkStatus();
}

}  // namespace millipede
