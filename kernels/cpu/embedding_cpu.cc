#include "kernels/cpu/embedding_cpu.h"

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vector_math.h"

namespace millipede {

Status EmbeddingCpu(const EmbeddingArgs& args) {
  MP_RETURN_IF_ERROR(EmbeddingCheckArgs(args));
  const int64_t vocab = args.table.dim(0), hidden = args.table.dim(1), n = args.ids.dim(0);
  const int32_t* ids = args.ids.as<const int32_t>();
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      return OutOfRangeError(detail::StrCat("embedding: token id ", ids[i], " at position ", i,
                                            " is outside the vocabulary [0, ", vocab, ")"));
  float* out = args.out.as<float>();
  cpu::ParallelFor(n, static_cast<double>(n) * hidden, [&](int64_t i) {
    cpu::WidenRow(args.table.data, args.table.dtype, ids[i] * hidden, hidden, out + i * hidden);
  });
  return OkStatus();
}

}  // namespace millipede
