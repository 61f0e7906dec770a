#include "worker/backend/backend.h"

#include "worker/backend/cpu_backend.h"
#ifdef MILLIPEDE_HAVE_CUDA
#include "worker/backend/cuda_backend.h"
#endif

namespace millipede {

const char* BackendKindName(BackendKind kind) {
  return kind == BackendKind::kCpu ? "cpu" : "cuda";
}

StatusOr<BackendKind> ParseBackendKind(std::string_view name) {
  if (name == "cpu") return BackendKind::kCpu;
  if (name == "cuda" || name == "gpu") return BackendKind::kCuda;
  return InvalidArgumentError("unknown backend \"" + std::string(name) +
                              "\" (expected cpu or cuda)");
}

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
