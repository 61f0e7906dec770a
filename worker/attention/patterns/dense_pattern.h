// Dense prefill: every causal key, by exact ring attention (the trivial ring pattern).
#pragma once

#include "worker/attention/prefill_pattern_variant.h"

namespace millipede {

const PrefillPatternVariant& DensePattern();

}  // namespace millipede
