#include "worker/backend/backend.h"

#include <string>

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

}  // namespace millipede
