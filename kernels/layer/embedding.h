// Token embedding lookup: out[i, :] = table[ids[i], :].
#pragma once

#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

struct EmbeddingArgs {
  // [n] I32 token ids; each must lie in [0, vocab).
  ConstTensorView ids;
  // [vocab, hidden] F32, BF16, F16 or F64, row-major (Hugging Face `embed_tokens.weight`).
  ConstTensorView table;
  // [n, hidden] F32, row-major. Written in full on success.
  TensorView out;
};

// Checks EmbeddingArgs' shapes and dtypes (not the ids, which may live on a device).
Status EmbeddingCheckArgs(const EmbeddingArgs& args);

// Gathers one table row per id, converted to F32. An id outside [0, vocab) is an OutOfRange
// error naming the id and its position; `out` is then unspecified.
Status EmbeddingRef(const EmbeddingArgs& args);

}  // namespace millipede
