// CUDA form of GatherRowsRef. Include only from CUDA-enabled translation units
// (MILLIPEDE_HAVE_CUDA builds); kernels/memory/gather_rows.h stays CUDA-free.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/status.h"
#include "kernels/memory/gather_rows.h"

namespace millipede {

// GatherRowsRef on the GPU, enqueued on `stream`. src, index and dst may each be device memory
// or mapped page-locked host memory (cudaHostAlloc with cudaHostAllocMapped): a host src is
// read by the kernel across PCIe, with 16-byte loads when the rows' size and addresses allow.
//
// The indices are not checked on the host (they may live on the device). An index outside
// [0, n) is never followed: that dst row is set to zero bytes and, when `bad` is non-null, the
// entry's position is stored to *bad (one int64 in device or mapped host memory; with several
// bad entries, any one of them). The caller sets *bad to -1 beforehand and reads it once the
// stream has passed the kernel.
//
// `max_blocks` (0: no limit beyond the kernel's own) caps the grid: a gather from host memory on
// a copy stream needs only enough loads in flight to fill PCIe, and a small grid leaves the SMs
// to the compute it overlaps.
Status GatherRowsCuda(const GatherRowsArgs& args, int64_t* bad, cudaStream_t stream,
                      int64_t max_blocks = 0);

}  // namespace millipede
