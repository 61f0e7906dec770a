#include "common/parallel_copy.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <thread>

namespace millipede {
namespace {

constexpr unsigned kMaxThreads = 16;
constexpr size_t kPiece = 4096;  // pieces start on page boundaries of the buffers' offsets

}  // namespace

unsigned ParallelCopyThreads(size_t bytes, unsigned max_threads) {
  if (max_threads == 0) max_threads = std::thread::hardware_concurrency();
  max_threads = std::clamp(max_threads, 1u, kMaxThreads);
  const size_t wanted = std::max<size_t>(1, bytes / kParallelCopyMinBytes);
  return static_cast<unsigned>(std::min<size_t>(wanted, max_threads));
}

void ParallelCopy(void* dst, const void* src, size_t bytes, unsigned max_threads) noexcept {
  const unsigned threads = ParallelCopyThreads(bytes, max_threads);
  auto* to = static_cast<char*>(dst);
  const auto* from = static_cast<const char*>(src);
  const size_t share = (bytes / threads + kPiece - 1) / kPiece * kPiece;
  auto copy = [=](unsigned t) {
    const size_t begin = std::min(bytes, t * share), end = std::min(bytes, begin + share);
    if (begin < end) std::memcpy(to + begin, from + begin, end - begin);
  };
  // This thread copies the first piece while the others copy theirs. A thread the system does
  // not give leaves its piece to this one: the copy completes either way, and no exception
  // leaves (the CUDA copy queue calls this from a host function).
  std::array<std::thread, kMaxThreads> workers;
  std::array<bool, kMaxThreads> started{};
  for (unsigned t = 1; t < threads; ++t) {
    try {
      workers[t] = std::thread(copy, t);
      started[t] = true;
    } catch (...) {
    }
  }
  for (unsigned t = 0; t < threads; ++t)
    if (!started[t]) copy(t);
  for (unsigned t = 1; t < threads; ++t)
    if (started[t]) workers[t].join();
}

}  // namespace millipede
