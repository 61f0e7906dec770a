// CUDA form of GemmRef through cuBLASLt. Include only from CUDA-enabled translation units
// (MILLIPEDE_HAVE_CUDA builds); kernels/layer/gemm.h stays CUDA-free.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/status.h"
#include "kernels/layer/gemm.h"

namespace millipede {

// What GemmCuda keeps between calls: the cuBLASLt handle and workspace, device scratch for the
// activations converted to the weight's dtype, and the algorithm chosen for each problem (shape,
// dtype, alignments), so a repeated shape skips cuBLASLt's heuristic. Create one per device (with
// that device current). A context serves one stream at a time, since all its calls share the
// workspace and scratch, and is not thread-safe.
class GemmCudaContext {
 public:
  // What NVIDIA recommends giving cuBLASLt on Hopper.
  static constexpr size_t kDefaultWorkspaceBytes = size_t{32} << 20;

  static StatusOr<std::unique_ptr<GemmCudaContext>> Create(
      size_t workspace_bytes = kDefaultWorkspaceBytes);
  ~GemmCudaContext();
  GemmCudaContext(const GemmCudaContext&) = delete;
  GemmCudaContext& operator=(const GemmCudaContext&) = delete;

  // Sizes the activation scratch for `a` of up to `max_activation_elements` (m * k) now, so that
  // later calls allocate nothing (needed before capturing GemmCuda into a CUDA graph). Growing
  // waits for `stream`; later calls grow the scratch themselves when they need to.
  Status Reserve(int64_t max_activation_elements, cudaStream_t stream);

  struct Impl;  // defined in gemm.cu
  Impl& impl() { return *impl_; }
  // Changes whenever the activation scratch moves (recordings of calls that used it go stale).
  uint64_t generation() const;

 private:
  GemmCudaContext();
  std::unique_ptr<Impl> impl_;
};

// GemmRef on device memory, enqueued on `stream` (asynchronous); out = a @ b^T (+ bias), or
// out += ... with `accumulate`. All accumulation is fp32 (CUBLAS_COMPUTE_32F):
//   a    [m, k] F32 activations, or BF16/F16 ones equal to the weight's dtype.
//   b    [n, k] BF16, F16 or F32 weight (F64 is Unimplemented on the GPU).
//   bias optional [n], any float dtype.
//   out  [m, n] F32; must not overlap a or b.
// Precision: cuBLASLt needs both operands in one dtype, so with BF16/F16 weights F32 `a` is first
// rounded to the weight's dtype (to nearest even, as a bf16/fp16 PyTorch model runs) by a
// conversion kernel of its own; `a` given already rounded skips that kernel and gives bit for bit
// the same result. Expect
// ~2^-9 (BF16) or ~2^-11 (F16) relative error against the fp32-activation reference, and fp32
// rounding only against a reference fed the same rounded activations. F32 weights run a true
// FP32 GEMM (never TF32), within fp32 summation error of the reference. Skinny products (one row
// of BF16/F16 activations, k a multiple of 8, 16-byte aligned rows: a decode step of one
// sequence) run a kernel of their own that reads the weight once (a warp per weight row, fp32
// sums).
Status GemmCuda(const GemmArgs& args, GemmCudaContext& context, cudaStream_t stream);

}  // namespace millipede
