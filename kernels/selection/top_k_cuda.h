// CUDA form of TopKRef. Include only from CUDA-enabled translation units (MILLIPEDE_HAVE_CUDA
// builds); kernels/selection/top_k.h stays CUDA-free.
#pragma once

#include <cuda_runtime.h>

#include <memory>

#include "common/status.h"
#include "kernels/selection/top_k.h"

namespace millipede {

// Device memory for TopKCuda's intermediate results (grown on demand, kept between calls).
// Create one per device (with that device current); a workspace serves one stream at a time and
// is not thread-safe.
class TopKCudaWorkspace {
 public:
  static StatusOr<std::unique_ptr<TopKCudaWorkspace>> Create();
  ~TopKCudaWorkspace();
  TopKCudaWorkspace(const TopKCudaWorkspace&) = delete;
  TopKCudaWorkspace& operator=(const TopKCudaWorkspace&) = delete;

  struct Impl;  // defined in top_k.cu
  Impl& impl() { return *impl_; }
  // Changes whenever the workspace's memory moves (it grows on demand).
  uint64_t generation() const;

 private:
  TopKCudaWorkspace();
  std::unique_ptr<Impl> impl_;
};

// TopKRef with scores, index and value in device memory: the same output, bit for bit.
// Enqueued on `stream` without waiting (growing the workspace waits for `stream` once).
//
// How: per row, a radix select finds the k-th largest key (floats mapped to order-preserving
// 32-bit keys, NaN to a key below every number) in four 8-bit passes, each a histogram over the
// row split across many blocks; a compaction then keeps the keys above that threshold and the
// lowest-column keys equal to it; for TopKOrder::kValue a segmented radix sort orders the kept
// (key, column) pairs, while kColumn's compaction writes them in column order and needs no sort.
// Cost: six reads of the scores (four histogram passes, a count and the compaction), for kValue a
// segmented sort of rows * min(k, cols) 64-bit keys, and about 14 launches (plus the sort's for
// kValue); millipede-bench-selection measures it.
Status TopKCuda(const TopKArgs& args, TopKCudaWorkspace& workspace, cudaStream_t stream);

}  // namespace millipede
