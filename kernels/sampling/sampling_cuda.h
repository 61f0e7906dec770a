// CUDA form of SampleRef. Include only from CUDA-enabled translation units (MILLIPEDE_HAVE_CUDA
// builds); kernels/sampling/sampling.h stays CUDA-free.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "common/status.h"
#include "kernels/sampling/sampling.h"

namespace millipede {

// Device memory for SampleCuda: the sort buffers (sized to the vocabulary on first use, or by
// Reserve) and the result slot, plus a pinned host copy of the result. Create one per device
// (with that device current); a workspace serves one stream at a time and is not thread-safe.
class SampleCudaWorkspace {
 public:
  static StatusOr<std::unique_ptr<SampleCudaWorkspace>> Create();
  ~SampleCudaWorkspace();
  SampleCudaWorkspace(const SampleCudaWorkspace&) = delete;
  SampleCudaWorkspace& operator=(const SampleCudaWorkspace&) = delete;

  // Sizes the sort buffers for vocabularies up to `max_vocab` now, so that later calls allocate
  // nothing (needed before capturing SampleCudaAsync into a CUDA graph). Growing waits for
  // `stream`; later calls grow the buffers themselves when they need to.
  Status Reserve(int64_t max_vocab, cudaStream_t stream);

  struct Impl;  // defined in sampling.cu
  Impl& impl() { return *impl_; }

 private:
  SampleCudaWorkspace();
  std::unique_ptr<Impl> impl_;
};

// SampleRef on logits in device memory ([vocab] F32), with the same token for the same
// (logits, params, step): greedy is the argmax with ties to the lowest id; otherwise the logits
// are sorted (descending, ties to the lower id: a stable radix sort), the weights exp(s_i - s_0)
// of the kept tokens summed in double and the draw u = RandomUniform(seed, step) taken by inverse
// CDF, as in the reference. Only the order of the double sums differs, so a different token is
// possible only when u * total lies within ~1e-15 relative of a cumulative boundary. Enqueues
// on `stream` and waits for it. The reference's errors: bad params or shapes (checked before
// anything runs), a NaN or +inf logit, or no finite logit (found on the device).
StatusOr<int32_t> SampleCuda(ConstTensorView logits, const SamplingParams& params, uint64_t step,
                             SampleCudaWorkspace& workspace, cudaStream_t stream);

// SampleCuda without the wait: the token id is written to `token` (one int32 in device memory),
// or -1 when the logits hold a NaN or +inf or no finite value (SampleCuda says which). Params and
// shapes are checked on the host as before.
Status SampleCudaAsync(ConstTensorView logits, const SamplingParams& params, uint64_t step,
                       SampleCudaWorkspace& workspace, int32_t* token, cudaStream_t stream);

}  // namespace millipede
