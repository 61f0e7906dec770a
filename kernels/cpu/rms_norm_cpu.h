// The CPU backend's RMSNorm (kernels/layer/rms_norm.h), vectorised and threaded over rows.
#pragma once

#include "common/status.h"
#include "kernels/layer/rms_norm.h"

namespace millipede {

// RmsNormRef's result (the mean of squares summed in double, as there; the same fp32 roundings
// after it), with its checks, errors and in-place rules.
Status RmsNormCpu(const RmsNormArgs& args);

}  // namespace millipede
