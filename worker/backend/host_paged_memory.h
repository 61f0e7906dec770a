// Paged host memory for the CPU backend's AllocatePaged: each chunk is a range of an anonymous
// in-memory file (memfd), mapped at its place in the tensor's address range; a shared chunk is
// the same file range mapped again in another tensor, so both see the same pages. A chunk no
// tensor maps any more gives its pages back to the system (a hole punched in its file).
#pragma once

#include "worker/backend/backend.h"

namespace millipede {

// The host's page size in bytes.
int64_t HostPageBytes();
// Backend::AllocatePaged in host memory (its contract).
StatusOr<BackendTensor> AllocatePagedHost(DType dtype, const Shape& shape, int64_t chunk_bytes,
                                          const BackendTensor* share, int64_t share_chunks);

}  // namespace millipede
