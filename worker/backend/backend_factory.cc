#include "worker/backend/backend_factory.h"

#include "worker/backend/cpu_backend.h"
#ifdef MILLIPEDE_HAVE_CUDA
#include "worker/backend/cuda_backend.h"
#endif

namespace millipede {

StatusOr<std::unique_ptr<Backend>> CreateBackend(BackendKind kind, int device) {
  if (kind == BackendKind::kCpu) return CreateCpuBackend();
#ifdef MILLIPEDE_HAVE_CUDA
  return CreateCudaBackend(device);
#else
  (void)device;
  return UnimplementedError(
      "the cuda backend is not part of this build (build the `cuda` preset)");
#endif
}

}  // namespace millipede
