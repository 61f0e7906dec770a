// CUDA form of TopKCutRef. Include only from CUDA-enabled translation units (MILLIPEDE_HAVE_CUDA
// builds); kernels/selection/top_k_cut.h stays CUDA-free.
#pragma once

#include <cuda_runtime.h>

#include "common/status.h"
#include "kernels/selection/top_k_cut.h"

namespace millipede {

// TopKCutRef with every tensor in device memory; enqueued on `stream` without waiting. The data
// is not checked: valid keys and columns give the reference's output, and nothing is written
// past a row's slots. One block per row: a radix select of the row's k-th largest key over the
// ranks' ranks * k keys (eight 8-bit passes, each a shared-memory histogram), then a block scan
// that compacts this rank's kept entries in order.
Status TopKCutCuda(const TopKCutArgs& args, cudaStream_t stream);

}  // namespace millipede
