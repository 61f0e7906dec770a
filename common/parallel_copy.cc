#include "common/parallel_copy.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

namespace millipede {
namespace {

constexpr unsigned kMaxThreads = 16;
constexpr size_t kPiece = 4096;  // pieces start on page boundaries of the buffers' offsets

}  // namespace

unsigned ParallelCopyThreads(size_t bytes, unsigned max_threads) {
  if (max_threads == 0)
    max_threads = std::clamp(std::thread::hardware_concurrency(), 1u, kMaxThreads);
  const size_t wanted = std::max<size_t>(1, bytes / kParallelCopyMinBytes);
  return static_cast<unsigned>(std::min<size_t>(wanted, max_threads));
}

void ParallelCopy(void* dst, const void* src, size_t bytes, unsigned max_threads) {
  const unsigned threads = ParallelCopyThreads(bytes, max_threads);
  auto* to = static_cast<char*>(dst);
  const auto* from = static_cast<const char*>(src);
  if (threads <= 1) {
    if (bytes > 0) std::memcpy(to, from, bytes);
    return;
  }
  const size_t share = (bytes / threads + kPiece - 1) / kPiece * kPiece;
  std::vector<std::thread> workers;
  workers.reserve(threads - 1);
  // This thread copies the first piece while the others copy the rest.
  for (unsigned t = 1; t < threads; ++t) {
    const size_t begin = std::min(bytes, t * share), end = std::min(bytes, begin + share);
    if (begin < end)
      workers.emplace_back([=] { std::memcpy(to + begin, from + begin, end - begin); });
  }
  std::memcpy(to, from, std::min(bytes, share));
  for (std::thread& w : workers) w.join();
}

}  // namespace millipede
