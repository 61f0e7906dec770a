#include "worker/backend/backend.h"

#include <algorithm>
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

StatusOr<PagedPlan> PlanPaged(int64_t bytes, int64_t page, int64_t chunk_bytes,
                              const BackendTensor* share, int64_t share_chunks) {
  MP_REQUIRE(page > 0 && chunk_bytes > 0 && chunk_bytes % page == 0, "paged tensor: chunks of ",
             chunk_bytes, " bytes are not a multiple of the page (", page, " bytes)");
  MP_REQUIRE(bytes >= 0 && share_chunks >= 0, "paged tensor: ", bytes, " bytes, sharing ",
             share_chunks, " chunks");
  PagedPlan plan;
  if (share_chunks > 0) {
    MP_REQUIRE(share != nullptr && share->paged() != nullptr &&
                   static_cast<int64_t>(share->paged()->chunks.size()) >= share_chunks,
               "paged tensor: the tensor to share has fewer than ", share_chunks, " chunks");
    const auto& from = share->paged()->chunks;
    plan.shared.assign(from.begin(), from.begin() + share_chunks);
    for (const auto& c : plan.shared) plan.total += c->bytes;
    MP_REQUIRE(plan.total <= bytes, "paged tensor: ", plan.total,
               " shared bytes exceed the tensor's ", bytes);
  }
  const int64_t rounded = (bytes + page - 1) / page * page;
  while (plan.total < std::max<int64_t>(rounded, page)) {
    const int64_t n = std::min(chunk_bytes, std::max<int64_t>(rounded, page) - plan.total);
    plan.new_bytes.push_back(n);
    plan.total += n;
  }
  return plan;
}

}  // namespace millipede
