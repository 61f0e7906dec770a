// Device memory of the sparse index builders' CUDA forms (vertical_slash_index_cuda.h,
// block_sparse_index_cuda.h, block_sums_cuda.h). Include only from CUDA-enabled translation units
// (MILLIPEDE_HAVE_CUDA builds); kernels/sparse_index/sparse_index.h stays CUDA-free.
#pragma once

#include <cuda_runtime.h>

#include <memory>

#include "common/status.h"

namespace millipede {

// An error word the kernels report a broken input into (so that a bad position or selection is
// an InvalidArgument naming it, as on the CPU), its page-locked host copy, and grow-only scratch:
// the offsets scan's temporaries, per-head selection lengths, block-sparse scores and kept-block
// bitmaps. Create one per device (with that device current); a workspace serves one stream at a
// time and is not thread-safe.
class SparseIndexCudaWorkspace {
 public:
  static StatusOr<std::unique_ptr<SparseIndexCudaWorkspace>> Create();
  ~SparseIndexCudaWorkspace();
  SparseIndexCudaWorkspace(const SparseIndexCudaWorkspace&) = delete;
  SparseIndexCudaWorkspace& operator=(const SparseIndexCudaWorkspace&) = delete;

  struct Impl;  // defined in sparse_index.cu
  Impl& impl() { return *impl_; }

 private:
  SparseIndexCudaWorkspace();
  std::unique_ptr<Impl> impl_;
};

}  // namespace millipede
