// A-shape prefill (StreamingLLM's attention sinks, MInference's a_shape): each query sees the
// first sink_tokens positions and the keys within window_tokens of it, by exact ring attention
// masked by global position (ring_prefill.h), so blocks and chunks compose exactly. A layer's
// a-shape heads share one sink count (policy validation); windows may differ per KV head.
#pragma once

#include "worker/attention/prefill_pattern_variant.h"

namespace millipede {

const PrefillPatternVariant& AShapePattern();

}  // namespace millipede
