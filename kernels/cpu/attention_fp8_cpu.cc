#include "kernels/cpu/attention_fp8_cpu.h"

#include <algorithm>
#include <mutex>

#include "kernels/attention/attention_fp8.h"
#include "kernels/cpu/parallel.h"

namespace millipede {

Status AttentionFp8Cpu(const AttentionArgs& args) {
  MP_RETURN_IF_ERROR(AttentionFp8CheckArgs(args));
  const int64_t n_q = args.q.dim(0), heads = args.q.dim(1), d = args.q.dim(2);
  // Slices of at least 16 rows: each one rounds every key again (n_kv x d per KV head).
  const int64_t slices = std::max<int64_t>(1, std::min<int64_t>(4 * cpu::CpuThreads(), n_q / 16));
  const int64_t rows = (n_q + slices - 1) / std::max<int64_t>(slices, 1);
  const double work = 4.0 * static_cast<double>(n_q) * args.k.dim(0) * heads * d;
  std::mutex mu;
  Status status = OkStatus();
  cpu::ParallelFor(slices, work, [&](int64_t s) {
    const int64_t begin = s * rows, count = std::min(rows, n_q - begin);
    if (count <= 0) return;
    AttentionArgs slice = args;
    slice.q = SliceRows(args.q, begin, count);
    slice.o = SliceRows(args.o, begin, count);
    if (args.lse.data != nullptr) slice.lse = SliceRows(args.lse, begin, count);
    slice.q_offset = args.q_offset + begin;
    const Status part = AttentionFp8Ref(slice);
    if (!part.ok()) {
      std::lock_guard<std::mutex> lock(mu);
      if (status.ok()) status = part;
    }
  });
  return status;
}

}  // namespace millipede
