#include "kernels/layer/embedding.h"
#include "kernels/memory/float_rows.h"

namespace millipede {

Status EmbeddingCheckArgs(const EmbeddingArgs& args) {
  MP_RETURN_IF_ERROR(CheckFloatTensor(args.table, "embedding table", 2));
  const int64_t hidden = args.table.dim(1);
  MP_REQUIRE(args.ids.rank() == 1, "embedding ids: rank ", args.ids.rank(), ", expected 1");
  const int64_t n = args.ids.dim(0);
  MP_RETURN_IF_ERROR(CheckTensor(args.ids, "embedding ids", DType::kI32, Shape{n}));
  return CheckTensor(args.out, "embedding out", DType::kF32, Shape{n, hidden});
}

Status EmbeddingRef(const EmbeddingArgs& args) {
  MP_RETURN_IF_ERROR(EmbeddingCheckArgs(args));
  const int64_t vocab = args.table.dim(0);
  const int64_t hidden = args.table.dim(1);
  const int64_t n = args.ids.dim(0);

  const int32_t* ids = args.ids.as<const int32_t>();
  float* out = args.out.as<float>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = ids[i];
    if (id < 0 || id >= vocab)
      return OutOfRangeError(detail::StrCat("embedding: token id ", id, " at position ", i,
                                            " is outside the vocabulary [0, ", vocab, ")"));
    LoadFloatRow(args.table.data, args.table.dtype, id * hidden, hidden, out + i * hidden);
  }
  return OkStatus();
}

}  // namespace millipede
