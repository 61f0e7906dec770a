// CUDA form of AttentionRef (kernels/attention.h). Include only from CUDA-enabled translation
// units (MILLIPEDE_HAVE_CUDA builds); kernels/attention.h stays CUDA-free.
//
// Paths (chosen per call, invisible to the caller except for precision and speed):
//  - Tensor cores: head_dim 64 or 128, K and V both BF16 or both F16, 16-byte aligned q/k/v.
//    Tiles of query rows per kv head (GQA heads packed, K/V never expanded), causal tile
//    skipping. More than 16 packed query rows (prefill) run on the Hopper kernel
//    (attention_wgmma.cu: TMA-fed 128-key tiles, wgmma, two warpgroups of 64 rows) on a
//    compute capability 9.0 device; fewer (decode), or other devices, on the mma.sync kernel
//    (attention_flash.cu: 64-key tiles). Long key runs with too few tiles of query rows to
//    fill the GPU are split over thread blocks (Flash-Decoding) and the partial (o, lse)
//    merged with MergeStateCuda.
//  - CUDA cores (attention_generic.cu): everything else up to head_dim 256 (F32 K/V, mixed K/V
//    dtypes, head_dim 16, 32, 80, ...), fp32 throughout; correct but slow, never split.
// Every path takes A-shape windows (kv_head_window, sink_tokens) for up to 64 KV heads: a
// windowed head's blocks load only the sink tiles and the tiles from their rows' earliest window
// start on, and key splits are planned for the heads that read most keys. Evicted key rows
// (kv_row_visible) are Unimplemented here.
//
// Precision of the tensor-core path: q (F32 in the engine) is rounded to K's 16-bit type before
// Q K^T, and the probabilities exp(s - m) to V's type before P V; products are exact and sums
// fp32, the softmax statistics (max, sum, LSE) fp32 from the unrounded probabilities. Against
// AttentionRef on the same 16-bit K/V the error is that of one bf16 (or f16) rounding of q and
// of P: about 2^-9 relative per score, a few 1e-3 of max |o| and ~1e-3 absolute in lse for
// bf16 (the GPU tests allow 2e-2). With F16 K/V, |q| must stay below 65504 (it would overflow
// to inf on conversion), which holds for any sane activations.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "common/status.h"
#include "kernels/attention/attention.h"

namespace millipede {

struct AttentionCudaOptions {
  // Key splits of the tensor-core path: 0 chooses from n_kv, the number of thread blocks and
  // the device's SM count (one full wave of blocks, at least 256 keys per split); 1 never
  // splits; n > 1 asks for n (at most one per 64-key tile). Ignored on the CUDA-core path.
  int num_splits = 0;
  // Device scratch for split partials, 16-byte aligned, at least AttentionCudaWorkspaceBytes()
  // bytes, not used concurrently by anything else on other streams. Null: when a call needs
  // scratch it takes it with cudaMallocAsync on the stream and returns it with cudaFreeAsync
  // (stream-ordered, fine for one-off calls; engines should pass a buffer to avoid the pool's
  // mapping cost).
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  // false keeps prefill on the mma.sync kernel (tests and benchmarks compare the two).
  bool allow_wgmma = true;
};

// Bytes of workspace AttentionCuda(args, options, ...) needs (0 when it does not split). Checks
// the arguments' shapes and dtypes; asks the current device for its SM count.
StatusOr<size_t> AttentionCudaWorkspaceBytes(const AttentionArgs& args,
                                             const AttentionCudaOptions& options = {});

// Same contract as AttentionRef, with every tensor in device memory; enqueued on `stream`
// (asynchronous: errors in the kernels themselves surface at the next synchronisation). Shapes,
// dtypes and the scale are checked on the host before anything is launched.
//   q [n_q, num_q_heads, head_dim] F32; k, v [n_kv, num_kv_heads, head_dim] F32/BF16/F16;
//   o [n_q, num_q_heads, head_dim] F32; lse [n_q, num_q_heads] F32 natural log, optional.
// head_dim above 256 (outside the tensor-core instances) is Unimplemented.
Status AttentionCuda(const AttentionArgs& args, cudaStream_t stream);
Status AttentionCuda(const AttentionArgs& args, const AttentionCudaOptions& options,
                     cudaStream_t stream);

}  // namespace millipede
