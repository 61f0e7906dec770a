// CUDA form of AntidiagonalSelectRef. Include only from CUDA-enabled translation units
// (MILLIPEDE_HAVE_CUDA builds); kernels/sparse_index/antidiagonal_select.h stays CUDA-free.
#pragma once

#include <cuda_runtime.h>

#include "common/status.h"
#include "kernels/layer/gemm_cuda.h"
#include "kernels/sparse_index/antidiagonal_select.h"
#include "kernels/sparse_index/sparse_index_cuda.h"

namespace millipede {

// AntidiagonalSelectRef with the tensors in device memory (permille stays a host array). Needs
// head_dim % 8 == 0 and block / stride a power of two <= 16.
//
// How (XAttention's own plan, with cuBLASLt for the products): the keys are laid out once as
// reshaped rows [kv_heads, key rows, stride * head_dim] in bf16; then per slab of scored query
// blocks (consecutive blocks whose fp32 scores fit 1 GiB) the reshaped query rows of every head
// [kv_heads, group, blocks, R, stride * head_dim] (bf16, times scale / stride * log2(e)), one GEMM
// per KV head against its reshaped keys up to the slab's last row (GemmCuda: fp32 scores), one
// thread block per (query block, KV head) that reads each row's scores twice (its softmax maximum
// and sum, then each key block's share, added in shared memory), and one per (query block, KV
// head) that turns the masses into the kept bitmap, the threshold found by bisection over the
// fixed-point masses (AntidiagonalKeep's rule, so equal masses give equal blocks). Masses differ
// from the reference's by bf16 rounding of the scaled q and of k (about 1e-3 relative), and blocks
// at the threshold's edge may differ with them. Cost: the products (kv_heads * group * rows *
// key rows * stride * head_dim multiply-adds, the causal triangle plus one slab's width), and
// three passes over the fp32 scores. Waits for `stream` before returning (broken inputs are
// InvalidArgument errors).
Status AntidiagonalSelectCuda(const AntidiagonalSelectArgs& args,
                              SparseIndexCudaWorkspace& workspace, GemmCudaContext& gemm,
                              cudaStream_t stream);

}  // namespace millipede
