// The CPU backend's merge of partial attention results (kernels/attention/merge_state.h),
// threaded over rows.
#pragma once

#include "common/status.h"
#include "kernels/attention/merge_state.h"

namespace millipede {

// MergeStateRef's result, with each row's weights from AttentionState<double> as the reference
// computes them and the head_dim loop in fp32. Same checks and errors as MergeStateRef.
Status MergeStateCpu(const MergeStateArgs& args);

// MergeStateInPlaceRef's result, likewise. Same checks and errors.
Status MergeStateInPlaceCpu(TensorView o, TensorView lse, ConstTensorView o_other,
                            ConstTensorView lse_other);

}  // namespace millipede
