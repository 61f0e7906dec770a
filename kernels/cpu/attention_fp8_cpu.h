// The CPU backend's FP8 attention: AttentionFp8Ref (kernels/attention/attention_fp8.h) with K
// and V rounded once, then slices of query rows in parallel. Rows are independent in the
// reference, so the result is the reference's, bit for bit.
#pragma once

#include "common/status.h"
#include "kernels/attention/attention.h"

namespace millipede {

// Same contract, checks and errors as AttentionFp8Ref.
Status AttentionFp8Cpu(const AttentionArgs& args);

}  // namespace millipede
