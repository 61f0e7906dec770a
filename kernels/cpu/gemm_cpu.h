// The CPU backend's GEMM: GemmArgs (kernels/layer/gemm.h) through OpenBLAS's sgemm, threaded.
#pragma once

#include "common/status.h"
#include "kernels/layer/gemm.h"

namespace millipede {

// out (+)= a @ b^T + bias, as GemmRef computes it but accumulated in fp32 (sgemm): each element
// within a few fp32 ulps of sum_p |a_ip b_jp| of GemmRef's. BF16/F16/F64 weights are widened to
// F32 a panel at a time inside each thread (a small fraction of the work when a has many rows);
// one to four rows of a (decode) take a threaded dot-product path instead. Same argument checks
// and errors as GemmRef.
Status GemmCpu(const GemmArgs& args);

}  // namespace millipede
