// A large copy between two buffers of host memory, split over several threads: one thread's
// memcpy moves far less than the host's memory bandwidth (the host tier's rows of a cached
// document, tens of GiB, would take seconds on one).
#pragma once

#include <cstddef>

namespace millipede {

// Below this, one thread copies.
inline constexpr size_t kParallelCopyMinBytes = size_t{32} << 20;

// The number of threads ParallelCopy uses for `bytes`: one per kParallelCopyMinBytes, at most
// `max_threads` (0: the host's hardware threads) and never more than 16.
unsigned ParallelCopyThreads(size_t bytes, unsigned max_threads = 0);

// memcpy(dst, src, bytes) (the ranges do not overlap), in pieces of whole pages on
// ParallelCopyThreads(bytes, max_threads) threads (the calling one among them, which also copies
// the piece of any thread the system refuses); returns once every piece is copied. Throws nothing.
void ParallelCopy(void* dst, const void* src, size_t bytes, unsigned max_threads = 0) noexcept;

}  // namespace millipede
