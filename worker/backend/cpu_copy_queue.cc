#include "worker/backend/cpu_copy_queue.h"

#include <cstring>

#include "common/parallel_copy.h"

namespace millipede {

StatusOr<CopyEvent> CpuCopyQueue::Copy(ConstTensorView src, TensorView dst) {
  MP_REQUIRE(src.dtype == dst.dtype, "copy: dtype ", DTypeName(src.dtype), " vs ",
             DTypeName(dst.dtype));
  MP_REQUIRE(src.NumElements() == dst.NumElements(), "copy: element counts differ (",
             src.shape.ToString(), " vs ", dst.shape.ToString(), ")");
  const size_t n = src.NumBytes();
  const auto* from = static_cast<const char*>(src.data);
  auto* to = static_cast<char*>(dst.data);
  if (from + n <= to || to + n <= from) {
    ParallelCopy(to, from, n);
  } else if (n > 0) {
    std::memmove(to, from, n);
  }
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
