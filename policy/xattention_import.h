// XAttention's settings as an attention policy.
//
// XAttention (Xu et al., 2025) runs every head with three numbers: `block_size` (128 in its
// text experiments), `stride` (8 or 16) and `threshold`, the share of each query block's
// attention mass the kept key blocks must hold (0.9 and 0.95 in its experiments; a float in
// (0, 1]). The import gives every KV head of every layer from `starting_layer` on the
// antidiagonal pattern (kernels/sparse_index/antidiagonal_select.h) with those three numbers, the
// threshold as thousandths: `mass_permille` = round(1000 * threshold), noted when that rounds.
// Layers before `starting_layer` stay dense; decode is full (XAttention is prefill only).
#pragma once

#include <cstdint>

#include "checkpoint/model_config.h"
#include "common/status.h"
#include "policy/policy_import.h"

namespace millipede {

struct XAttentionImportOptions {
  int64_t block = 128;     // divides or is a multiple of 64
  int64_t stride = 8;      // block / stride is a power of two, at most 16
  double threshold = 0.9;  // in (0, 1]
  int64_t starting_layer = 0;
  int64_t dense_below_tokens = 0;
};

// InvalidArgument, naming the option, for settings the engine cannot run.
StatusOr<PolicyImport> ImportXAttention(const ModelConfig& model,
                                        const XAttentionImportOptions& options);

}  // namespace millipede
