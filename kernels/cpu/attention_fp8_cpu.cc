#include "kernels/cpu/attention_fp8_cpu.h"

#include <algorithm>

#include "kernels/attention/attention_fp8.h"
#include "kernels/cpu/parallel.h"

namespace millipede {

Status AttentionFp8Cpu(const AttentionArgs& args) {
  MP_ASSIGN_OR_RETURN(const Fp8AttentionHostOperands ops, Fp8AttentionHostOperandsRef(args));
  const int64_t n_q = args.q.dim(0), heads = args.q.dim(1), d = args.q.dim(2);
  const int64_t slices = std::max<int64_t>(1, std::min<int64_t>(4 * cpu::CpuThreads(), n_q));
  const int64_t rows = (n_q + slices - 1) / slices;
  const double work = 4.0 * static_cast<double>(n_q) * args.k.dim(0) * heads * d;
  cpu::ParallelFor(slices, work, [&](int64_t s) {
    AttentionFp8RowsRef(args, ops, std::min(n_q, s * rows), std::min(n_q, (s + 1) * rows));
  });
  return OkStatus();
}

}  // namespace millipede
