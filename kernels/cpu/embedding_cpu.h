// The CPU backend's embedding lookup (kernels/layer/embedding.h), threaded over rows.
#pragma once

#include "common/status.h"
#include "kernels/layer/embedding.h"

namespace millipede {

// EmbeddingRef's result, checks and errors; every id is checked before any row is written.
Status EmbeddingCpu(const EmbeddingArgs& args);

}  // namespace millipede
