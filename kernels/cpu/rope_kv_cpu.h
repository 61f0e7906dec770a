// The CPU backend's RopeKv (kernels/layer/rope_kv.h), threaded over rows.
#pragma once

#include "common/status.h"
#include "kernels/layer/rope_kv.h"

namespace millipede {

// RopeKvRef's result bit for bit (each row's angles computed once for q and k), with its checks
// and errors.
Status RopeKvCpu(const RopeKvArgs& args);

}  // namespace millipede
