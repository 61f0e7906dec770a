// The CPU backend's embedding lookup (kernels/embedding.h), threaded over rows.
#pragma once

#include "common/status.h"
#include "kernels/embedding.h"

namespace millipede {

// EmbeddingRef's result, checks and errors; every id is checked before any row is written.
Status EmbeddingCpu(const EmbeddingArgs& args);

}  // namespace millipede
